"""`cronstream runs backfill`'s pure parts: which slots a range holds, which of them
ran already, how progress reads, and its pacing by the tenant's fire rate."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from cronstream.backfill import (
    MAX_SLOTS,
    Backfill,
    Pace,
    Progress,
    backfill_slots,
    ran_already,
)
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import (
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    from_ms,
    to_ms,
)
from cronstream.streams.core.rates import TenantRates
from tests.fakes import FakeProducer
from tests.processors import TOPICS, decoded, fake_publisher, new_codec

T0 = to_ms(datetime(2026, 11, 20, tzinfo=UTC))
HOUR = 3_600_000


def job(**spec: object) -> JobDefinition:
    return job_from_spec(
        {"id": "j", "target": "python", "callable": "m:f", **spec}, max_payload_bytes=65536
    )


def test_the_range_holds_the_slots_the_scheduler_would_fire_start_included_end_not() -> None:
    hourly = job(cron="0 * * * *")
    slots = backfill_slots(hourly, T0, T0 + 24 * HOUR, now_ms=T0 + 48 * HOUR)
    assert slots == [T0 + h * HOUR for h in range(24)]
    assert backfill_slots(hourly, T0 + 1, T0 + HOUR + 1, now_ms=T0 + 48 * HOUR) == [T0 + HOUR]


def test_a_zoned_cron_keeps_its_wall_time_across_the_dst_change() -> None:
    daily = job(cron="30 2 * * *", tz="Europe/Berlin")
    start = to_ms(datetime(2026, 10, 24, tzinfo=UTC))
    slots = backfill_slots(daily, start, start + 3 * 24 * HOUR, now_ms=start + 10 * 24 * HOUR)
    assert [from_ms(s).isoformat() for s in slots] == [
        "2026-10-24T00:30:00+00:00",  # CEST
        "2026-10-25T00:30:00+00:00",  # the repeated hour: its first occurrence
        "2026-10-26T01:30:00+00:00",  # CET
    ]


@pytest.mark.parametrize(
    ("start", "end", "now", "problem"),
    [
        (T0, T0, T0 + HOUR, "--from must be before --to"),
        (T0, T0 + 2 * HOUR, T0 + HOUR, "--to is in the future"),
    ],
)
def test_a_bad_range_is_refused_naming_the_flag(
    start: int, end: int, now: int, problem: str
) -> None:
    with pytest.raises(SpecError) as refused:
        backfill_slots(job(every="1m"), start, end, now_ms=now)
    assert any(problem in p for p in refused.value.problems)


def test_a_manual_only_job_has_nothing_to_backfill() -> None:
    with pytest.raises(SpecError, match="backfill j") as refused:
        backfill_slots(job(), T0, T0 + HOUR, now_ms=T0 + 2 * HOUR)
    assert "manual only" in refused.value.problems[0]


def test_more_slots_than_the_limit_is_refused_before_anything_is_sent() -> None:
    every_second = job(every="1s")
    end = T0 + (MAX_SLOTS + 1) * 1000
    with pytest.raises(SpecError) as refused:
        backfill_slots(every_second, T0, end, now_ms=end)
    assert f"more than {MAX_SLOTS:,} slots" in refused.value.problems[0]
    assert len(backfill_slots(every_second, T0, T0 + MAX_SLOTS * 1000, now_ms=end)) == MAX_SLOTS


def _outcome(run_id: str, status: RunStatus) -> RunOutcome:
    at = from_ms(T0)
    return RunOutcome(run_id=run_id, job_id="j", scheduled_at=at, status=status, recorded_at=at)


def test_a_slot_ran_unless_its_only_records_say_missed_or_skipped() -> None:
    records = [
        _outcome("j@a", RunStatus.SUCCEEDED),
        _outcome("j@b", RunStatus.MISSED),
        _outcome("j@c", RunStatus.SKIPPED),
        _outcome("j@d", RunStatus.FAILED),  # an attempt failed: a retry is on its way
        _outcome("j@e", RunStatus.DEAD_LETTERED),
        _outcome("j@f", RunStatus.STARTED),
    ]
    assert ran_already(records) == {"j@a", "j@d", "j@e", "j@f"}


def test_progress_says_what_ended_how_and_what_is_left() -> None:
    progress = Progress(total=10, left_alone=3, sent=6, ended=Counter(SUCCEEDED=4, DEAD_LETTERED=1))
    assert progress.line("j") == (
        "backfill j: 5/10 ended (1 dead_lettered, 4 succeeded), 1 running, 4 to send"
    )


def _paced(definition: JobDefinition) -> list[int]:
    """A backfill of 100 hourly slots, 1,000 in flight allowed, a tenant rate of 10/s,
    sending every 100 ms of a virtual clock for 10 s: how many were sent by each tick
    (checked: each slot once, in order)."""
    codec, producer = new_codec(), FakeProducer()
    b = object.__new__(Backfill)
    b.client = SimpleNamespace(topics=TOPICS, publisher=fake_publisher(codec, producer))  # type: ignore[assignment]
    b.job, b.priority, b.key, b.in_flight = definition, Priority.LOW, None, set()
    b.pace = Pace(max_parallel=1000, rates=TenantRates(10))
    slots = [T0 + i * HOUR for i in range(100)]
    b.todo, b.progress = deque(slots), Progress(total=100, left_alone=0)
    clock = [T0 + 200 * HOUR]
    b.clock = lambda: clock[0]
    sent: list[int] = []
    for tick in range(0, 10_001, 100):
        clock[0] = T0 + 200 * HOUR + tick
        b._send()
        sent.append(b.progress.sent)
    requests = decoded(codec, producer, TOPICS.runs(Priority.LOW), RunRequest)
    assert [to_ms(r.scheduled_at) for r in requests] == slots
    return sent


def test_a_tenants_backfill_is_sent_at_its_fire_rate_and_no_slot_is_skipped() -> None:
    """10 a second (ticks every 100 ms), none skipped; an operator's job (tenant
    default) is paced by --max-parallel alone."""
    sent = _paced(replace(job(every="1h"), job_id="acme/j", tenant="acme"))
    assert sent[:11] == [10] * 10 + [20]
    assert sent[-1] == 100
    assert _paced(job(every="1h"))[0] == 100
