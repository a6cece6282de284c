"""Counting slots without walking them (``streams.core.span``, ``JobSchedule.count_slots``
and ``latest_slots``) agrees with walking them one by one (``slot_after``, itself held to
the reference in test_cron_properties): random expressions, zones with odd transitions,
ranges aimed at the transitions; intervals and one-time jobs with bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronstream.schemas.errors import CronError
from cronstream.streams.core.schedule import JobSchedule
from tests.unit.test_cron_properties import (
    SETTINGS,
    ZONES,
    _changes,
    expressions,
    rare_days,
    starts,
)

HOUR = 3_600_000
WALK_LIMIT = 3000  # slots walked per example: a dense expression gets a shorter range
DAY = 86_400_000


def _walk(job: JobSchedule, after: int, through: int) -> tuple[list[int], int]:
    """The slots in (after, through] by ``slot_after``; a range holding more than
    WALK_LIMIT is cut at the last one walked (returned with it)."""
    out: list[int] = []
    slot = job.slot_after(after)
    while slot is not None and slot <= through:
        out.append(slot)
        if len(out) == WALK_LIMIT:
            return out, slot
        slot = job.slot_after(slot)
    return out, through


def _agrees(job: JobSchedule, after: int, through: int, n: int) -> None:
    walked, through = _walk(job, after, through)
    assert job.count_slots(after, through) == len(walked)
    assert job.latest_slots(after, through, n) == walked[-n:]


@SETTINGS
@given(expr=st.one_of(expressions(), rare_days()), zone=st.sampled_from(ZONES), data=st.data())
def test_cron_counts_and_latest_slots_match_the_walk(
    expr: str, zone: str, data: st.DataObject
) -> None:
    try:
        job = JobSchedule("c", cron=expr, timezone=zone)
    except CronError:
        return  # never fires: refused, as the reference test pins
    after = data.draw(starts(zone))
    slot = job.slot_after(after)
    if slot is not None:  # a settlement starts at a slot fired: the next may be 1 s on
        after = data.draw(st.sampled_from([after, slot, slot - 1, slot - 1000]))
    span = data.draw(st.one_of(st.integers(0, 3_600_000), st.integers(0, 60 * DAY)))
    _agrees(job, after, after + span, data.draw(st.integers(1, 12)))


@SETTINGS
@given(
    every=st.one_of(st.integers(1, 5000), st.integers(1, 10 * DAY)),
    anchor=st.integers(-(10**13), 10**13),
    after=st.integers(1_700_000_000_000, 1_900_000_000_000),
    span=st.integers(0, 30 * DAY),
    bounds=st.tuples(st.none() | st.integers(-DAY, 30 * DAY), st.none() | st.integers(0, 30 * DAY)),
    n=st.integers(1, 12),
)
def test_interval_counts_and_latest_slots_match_the_walk(
    every: int, anchor: int, after: int, span: int, bounds: tuple[int | None, int | None], n: int
) -> None:
    start, end = (None if b is None else after + b for b in bounds)
    job = JobSchedule("i", every_ms=every, anchor_ms=anchor, start_ms=start, end_ms=end)
    _agrees(job, after, after + span, n)


def test_a_one_time_job_counts_its_instant_inside_the_range_only() -> None:
    job = JobSchedule("o", at_ms=5000)
    assert [job.count_slots(a, b) for a, b in ((4999, 5000), (5000, 9000), (0, 4999))] == [1, 0, 0]
    assert job.latest_slots(0, 5000, 3) == [5000]
    assert JobSchedule("m").count_slots(0, 10**12) == 0  # manual: no slots


@pytest.mark.parametrize(
    "zone",
    ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Antarctica/Troll"],
)
@pytest.mark.parametrize(
    "expr", ["30 2 * * *", "* * * * *", "0,30 */10 * * * *", "15 0-3 * * *", "0 0 * * *"]
)
def test_counts_match_the_walk_from_every_side_of_each_transition(zone: str, expr: str) -> None:
    """Ranges 3 hours long starting every 11 minutes from 3 h before to 3 h after a
    transition (the gap's one slot, a start inside a repeated hour): the zone's first
    two transitions of 2011-2030 and its last four."""
    job = JobSchedule("c", cron=expr, timezone=zone)
    changes = _changes(zone)
    for change in {*changes[:2], *changes[-4:]}:
        for after in range(change * 1000 - 3 * HOUR, change * 1000 + 3 * HOUR, 11 * 60_000):
            _agrees(job, after, after + 3 * HOUR, 3)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Paris"])
@pytest.mark.parametrize("expr", ["0 0 * * *", "0 */5 * * * *", "30 2 * * *", "0 0 L * *"])
def test_a_range_opening_on_a_slot_counts_it(zone: str, expr: str) -> None:
    """A settlement's range opens just before a slot (fired_through + 1 s is a slot of
    a job firing every second): whole days after a part of one."""
    job = JobSchedule("c", cron=expr, timezone=zone)
    for month in range(12):
        slot = job.slot_after(1_767_225_600_000 + month * 30 * DAY)  # from 2026-01-01
        assert slot is not None
        for after in (slot - 1, slot - 1000, slot):
            _agrees(job, after, slot + 3 * DAY + 1000, 3)


def test_a_spring_forward_gap_is_one_slot_and_a_fall_back_repeat_is_not_counted_twice() -> None:
    """Europe/Paris 2026: 03-29 01:00Z skips 02:00-02:59 (CET -> CEST), 10-25 01:00Z
    repeats 02:00-02:59 (CEST -> CET). Minutely: the 60 skipped wall minutes and 03:00
    are one slot at the transition; the repeated hour fires once."""
    job = JobSchedule("c", cron="* * * * *", timezone="Europe/Paris")
    spring, fall = 1_774_746_000_000, 1_792_890_000_000
    assert job.count_slots(spring - 3_600_000, spring + 3_600_000) == 60 + 60
    assert job.count_slots(fall - 3_600_000, fall + 3_600_000) == 60
    assert job.latest_slots(spring - 60_000, spring + 60_000, 3) == [spring, spring + 60_000]
    # From inside the repeated hour: its walls fired in the first one, before the range.
    assert job.count_slots(fall + 1_800_000, fall + 7_200_000) == 61
    daily = JobSchedule("d", cron="30 2 * * *", timezone="Europe/Paris")  # 02:30 is skipped
    assert daily.count_slots(spring - 3_600_000, spring + 3_600_000) == 1
    assert daily.latest_slots(spring - 30 * DAY, spring + DAY, 2) == [
        spring,
        spring + DAY - HOUR // 2,
    ]
