"""Fire-time tables: (expression, zone, after) -> the next fire instants, DST included.

Expected values are written out in UTC by hand from the zones' published transitions.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from cronstream.schemas.definition.cron import cron_times
from cronstream.schemas.events import from_ms, iso, to_ms
from cronstream.streams.core.schedule import JobSchedule, Misfire, jitter_offset


def _ms(text: str) -> int:
    return to_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))


def _walk(expr: str, zone: str, after: str, n: int) -> list[str]:
    times = cron_times(expr, zone)
    t, out = _ms(after), []
    for _ in range(n):
        nxt = times.next_after(t)
        assert nxt is not None
        out.append(iso(from_ms(nxt)))
        t = nxt
    return out


CASES = [
    # plain UTC, seconds field, aliases
    (
        "*/15 * * * *",
        "UTC",
        "2026-11-22T10:07:00Z",
        ["2026-11-22T10:15:00.000Z", "2026-11-22T10:30:00.000Z"],
    ),
    (
        "30 */10 * * * *",
        "UTC",
        "2026-11-22T10:00:30Z",
        ["2026-11-22T10:10:30.000Z", "2026-11-22T10:20:30.000Z"],
    ),
    ("@daily", "UTC", "2026-11-22T10:00:00Z", ["2026-11-23T00:00:00.000Z"]),
    # a start inside a second still yields the next whole-second slot
    (
        "* * * * * *",
        "UTC",
        "2026-11-22T10:00:00.400Z",
        ["2026-11-22T10:00:01.000Z", "2026-11-22T10:00:02.000Z"],
    ),
    # leap day, last day of month, nth weekday
    ("0 12 29 2 *", "UTC", "2026-01-01T00:00:00Z", ["2028-02-29T12:00:00.000Z"]),
    (
        "0 0 L * *",
        "UTC",
        "2028-02-01T00:00:00Z",
        ["2028-02-29T00:00:00.000Z", "2028-03-31T00:00:00.000Z"],
    ),
    ("0 9 * * 1#2", "UTC", "2026-02-01T00:00:00Z", ["2026-02-09T09:00:00.000Z"]),
    # Europe/Paris spring forward 2026-03-29 01:00Z (02:00 CET -> 03:00 CEST): the
    # skipped 02:00-02:45 slots and 03:00 collapse into one fire at the transition.
    (
        "*/15 * * * *",
        "Europe/Paris",
        "2026-03-29T00:30:00Z",
        ["2026-03-29T00:45:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-29T01:15:00.000Z"],
    ),
    (
        "30 2 * * *",
        "Europe/Paris",
        "2026-03-27T12:00:00Z",
        ["2026-03-28T01:30:00.000Z", "2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"],
    ),
    # Europe/Paris fall back 2026-10-25 01:00Z (03:00 CEST -> 02:00 CET): 02:30 fires
    # once (the first, CEST occurrence); hourly skips the repeated 02:00.
    (
        "30 2 * * *",
        "Europe/Paris",
        "2026-10-24T12:00:00Z",
        ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
    ),
    (
        "0 * * * *",
        "Europe/Paris",
        "2026-10-24T23:30:00Z",
        ["2026-10-25T00:00:00.000Z", "2026-10-25T02:00:00.000Z", "2026-10-25T03:00:00.000Z"],
    ),
    # America/New_York: spring 2026-03-08 07:00Z (02:00 EST -> 03:00 EDT),
    # fall 2026-11-01 06:00Z (02:00 EDT -> 01:00 EST).
    (
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T12:00:00Z",
        ["2026-03-08T07:00:00.000Z", "2026-03-09T06:30:00.000Z"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2026-10-31T12:00:00Z",
        ["2026-11-01T05:30:00.000Z", "2026-11-02T06:30:00.000Z"],
    ),
    (
        "*/30 * * * * *",
        "America/New_York",
        "2026-11-01T05:59:00Z",
        ["2026-11-01T05:59:30.000Z", "2026-11-01T07:00:00.000Z"],
    ),
    # Australia/Lord_Howe: a 30-minute shift. Start 2026-10-04 02:00 -> 02:30 (+10:30 ->
    # +11) at 2026-10-03T15:30Z; end 2026-04-05 02:00 -> 01:30 (+11 -> +10:30) at 15:00Z.
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-02T00:00:00Z",
        ["2026-10-02T15:45:00.000Z", "2026-10-03T15:30:00.000Z", "2026-10-04T15:15:00.000Z"],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-03T00:00:00Z",
        ["2026-04-03T14:45:00.000Z", "2026-04-04T14:45:00.000Z", "2026-04-05T15:15:00.000Z"],
    ),
    (
        "*/20 * * * *",
        "Australia/Lord_Howe",
        "2026-04-04T14:00:00Z",
        ["2026-04-04T14:20:00.000Z", "2026-04-04T14:40:00.000Z", "2026-04-04T15:30:00.000Z"],
    ),
    # Europe/Dublin (IST is its standard time in zoneinfo, winter a negative DST):
    # 2026-03-29 01:00Z (01:00 GMT -> 02:00 IST), 2026-10-25 01:00Z (02:00 IST -> 01:00).
    (
        "30 1 * * *",
        "Europe/Dublin",
        "2026-03-28T12:00:00Z",
        ["2026-03-29T01:00:00.000Z", "2026-03-30T00:30:00.000Z"],
    ),
    (
        "30 1 * * *",
        "Europe/Dublin",
        "2026-10-24T12:00:00Z",
        ["2026-10-25T00:30:00.000Z", "2026-10-26T01:30:00.000Z"],
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), CASES)
def test_cron_fire_times_follow_the_dst_policy(
    expr: str, zone: str, after: str, expected: list[str]
) -> None:
    assert _walk(expr, zone, after, len(expected)) == expected


def test_jobs_sharing_an_expression_share_one_computation() -> None:
    a = JobSchedule("a", cron="*/5 * * * *", timezone="Europe/Paris")
    b = JobSchedule("b", cron="*/5 * * * *", timezone="Europe/Paris")
    assert a.times is b.times
    t = _ms("2026-11-22T10:01:00Z")
    assert a.slot_after(t) == b.slot_after(t) == _ms("2026-11-22T10:05:00Z")
    assert a.times is not None
    assert a.times._last_after == t  # the second job reused the first one's answer


def test_interval_slots_are_anchored_not_relative_to_now() -> None:
    job = JobSchedule("i", every_ms=90_000, anchor_ms=_ms("2026-11-22T10:00:10Z"))
    assert job.slot_after(_ms("2026-11-22T10:00:00Z")) == _ms("2026-11-22T10:00:10Z")
    assert job.slot_after(_ms("2026-11-22T10:00:10Z")) == _ms("2026-11-22T10:01:40Z")
    assert job.slot_after(_ms("2026-11-22T10:02:00Z")) == _ms("2026-11-22T10:03:10Z")
    # before the anchor the phase is the same (slot k may be negative)
    assert job.slot_after(_ms("2026-11-22T09:58:00Z")) == _ms("2026-11-22T09:58:40Z")


def test_bounds_limit_slots_inclusively() -> None:
    job = JobSchedule(
        "b",
        every_ms=60_000,
        start_ms=_ms("2026-11-22T10:00:00Z"),
        end_ms=_ms("2026-11-22T10:02:00Z"),
    )
    assert job.slot_after(0) == _ms("2026-11-22T10:00:00Z")
    assert job.slot_after(_ms("2026-11-22T10:01:00Z")) == _ms("2026-11-22T10:02:00Z")
    assert job.slot_after(_ms("2026-11-22T10:02:00Z")) is None


def test_one_time_job_has_exactly_one_slot() -> None:
    at = _ms("2026-11-22T10:00:00Z")
    job = JobSchedule("o", at_ms=at)
    assert job.slot_after(at - 1) == at
    assert job.slot_after(at) is None


def test_jitter_is_deterministic_and_bounded() -> None:
    offsets = {jitter_offset(f"job-{i}", 5000) for i in range(500)}
    assert all(0 <= o <= 5000 for o in offsets)
    assert len(offsets) > 100  # spread, not one value
    assert jitter_offset("job-1", 5000) == jitter_offset("job-1", 5000)
    job = JobSchedule("job-1", every_ms=60_000, jitter_ms=5000, misfire=Misfire())
    slot = job.slot_due_after(0)
    assert slot is not None
    assert slot % 60_000 == 0
    assert slot + job.jitter > 0
