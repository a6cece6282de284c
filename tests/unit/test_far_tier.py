"""The partition scheduler with a far tier (``streams.core.far``), a virtual clock and an
in-memory stand-in for the store: memory holds only what is due within the horizon;
every slot fires exactly as without the tier; a takeover from a checkpoint (the store
as the checkpoint left it, entries deleted only once covered) misses no slot."""

from __future__ import annotations

import bisect
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.streams.core.misfire import Fire
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.schedule import JobSchedule

MIN = 60_000
T0 = 1_800_000_000_000 - (1_800_000_000_000 % MIN)


class MemoryFar:
    """What ``streams.scheduler.state.PartitionState`` does, in memory."""

    def __init__(self, defs: dict[str, dict[str, Any]]) -> None:
        self.defs = defs  # job id -> JobSchedule keyword arguments
        self.stored: list[tuple[int, str]] = []  # sorted
        self.superseded: list[tuple[int, str]] = []
        self.loads = 0

    def hold(self, job_id: str, due_ms: int | None, previous: int | None) -> None:
        if due_ms == previous:
            return
        if due_ms is not None:
            entry = (due_ms, job_id)
            at = bisect.bisect_left(self.stored, entry)
            if at == len(self.stored) or self.stored[at] != entry:
                self.stored.insert(at, entry)
        if previous is not None:
            self.superseded.append((previous, job_id))

    def forget(self, job_id: str, due_ms: int) -> None:
        self.superseded.append((due_ms, job_id))

    def flush(self, fired_through: int) -> None:
        covered = {e for e in self.superseded if e[0] <= fired_through}
        self.stored = [e for e in self.stored if e not in covered]
        self.superseded = [e for e in self.superseded if e[0] > fired_through]

    def entries(
        self, after: tuple[int, str] | None, before_ms: int, urgent_ms: int, budget: int
    ) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        start = 0 if after is None else bisect.bisect_right(self.stored, after)
        for entry in self.stored[start:]:
            if entry[0] >= before_ms or (entry[0] > urgent_ms and len(out) >= budget):
                break
            out.append(entry)
        return out

    def load(self, job_id: str) -> JobSchedule | None:
        self.loads += 1
        kwargs = self.defs.get(job_id)
        return None if kwargs is None else JobSchedule(job_id, **kwargs)

    def copy(self) -> MemoryFar:
        twin = MemoryFar(self.defs)
        twin.stored, twin.superseded = list(self.stored), list(self.superseded)
        return twin


def slots(defs: dict[str, dict[str, Any]], start: int, end: int) -> set[tuple[str, int]]:
    """Every (job, slot) of interval ``defs`` in (start, end]."""
    out: set[tuple[str, int]] = set()
    for job_id, kw in defs.items():
        every, anchor = kw["every_ms"], kw.get("anchor_ms", 0)
        first = anchor + ((start - anchor) // every + 1) * every
        out.update((job_id, slot) for slot in range(first, end + 1, every))
    return out


def run(core: PartitionScheduler, start: int, end: int, step: int = 1000) -> list[Fire]:
    fired: list[Fire] = []
    for now in [*range(start, end, step), end]:
        fired.extend(a for a in core.due(now) if type(a) is Fire)
    return fired


def put_all(core: PartitionScheduler, defs: dict[str, dict[str, Any]], now: int) -> None:
    for job_id, kwargs in defs.items():
        core.put(JobSchedule(job_id, **kwargs), now=now)


def hourly_defs(count: int) -> dict[str, dict[str, Any]]:
    rng = random.Random(7)
    return {
        f"j{i}": {"every_ms": 60 * MIN, "anchor_ms": rng.randrange(60 * MIN)} for i in range(count)
    }


def test_memory_holds_only_the_jobs_due_within_the_horizon() -> None:
    defs = hourly_defs(600)  # ten a minute on average
    far = MemoryFar(defs)
    core = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN, far=far)
    put_all(core, defs, T0)
    fired = run(core, T0, T0 + 2 * 60 * MIN, 5000)
    assert sorted((f.job_id, f.slot_ms) for f in fired) == sorted(slots(defs, T0, T0 + 120 * MIN))
    assert len(core.jobs) < 60, f"{len(core.jobs)} jobs held for ~20 due within the horizon"
    assert len(far.stored) >= len(defs)  # every job keeps an entry


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([5, 7, 30, 90, 600, 1800]), st.integers(0, 3600)),
        min_size=1,
        max_size=20,
    )
)
def test_the_far_tier_fires_exactly_what_memory_alone_fires(jobs: list[tuple[int, int]]) -> None:
    defs = {
        f"j{i}": {"every_ms": every * 1000, "anchor_ms": anchor * 1000}
        for i, (every, anchor) in enumerate(jobs)
    }
    plain = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN)
    tiered = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN, far=MemoryFar(defs))
    put_all(plain, defs, T0)
    put_all(tiered, defs, T0)
    end = T0 + 40 * MIN
    expected = sorted((f.job_id, f.slot_ms) for f in run(plain, T0, end, 7000))
    assert sorted((f.job_id, f.slot_ms) for f in run(tiered, T0, end, 7000)) == expected
    assert set(expected) == slots(defs, T0, end)


def test_a_takeover_from_the_checkpoint_misses_no_slot() -> None:
    defs = {**hourly_defs(300), "often": {"every_ms": 5000}, "minutely": {"every_ms": MIN}}
    far = MemoryFar(defs)
    first = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN, far=far)
    put_all(first, defs, T0)
    fired = run(first, T0, T0 + 30 * MIN, 2500)
    far.flush(first.fired_through)  # the checkpoint: emitted through here, acknowledged
    checkpoint = first.fired_through
    # ... it goes on firing 40 s (its entries move on, unflushed), then is killed
    fired += run(first, checkpoint + 1000, checkpoint + 40_000)
    store = far.copy()
    second = PartitionScheduler(0, fired_through=checkpoint, horizon_ms=MIN, far=store)
    refired = run(second, checkpoint + 45_000, T0 + 2 * 60 * MIN, 2500)
    expected = slots(defs, T0, T0 + 2 * 60 * MIN)
    got = {(f.job_id, f.slot_ms) for f in fired + refired}
    assert expected - got == set(), "slots missed across the takeover"
    assert got <= expected
    # What the first fired after its checkpoint is fired again, flagged.
    again = [f for f in refired if f.slot_ms <= checkpoint + 40_000]
    assert again
    assert all(f.possible_duplicate for f in again)
    assert not [f for f in refired if f.slot_ms <= checkpoint], "fired before the checkpoint"


def test_a_deleted_job_entry_is_forgotten_and_a_timer_finds_a_far_job() -> None:
    defs = {"far": {"every_ms": 60 * MIN}, "gone": {"every_ms": 60 * MIN}}
    far = MemoryFar(defs)
    core = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN, far=far)
    put_all(core, defs, T0)
    assert core.jobs == {}  # both next due in an hour
    assert core.job("far") is not None  # a retry timer of it checks it exists, is not paused
    del defs["gone"]
    core.delete("gone")
    fired = run(core, T0, T0 + 61 * MIN, 10_000)
    assert [(f.job_id, f.slot_ms) for f in fired] == [("far", T0 + 60 * MIN)]
    far.flush(core.fired_through)
    assert {job_id for _, job_id in far.stored} == {"far"}


def test_an_entry_is_deleted_only_once_the_checkpoint_covers_its_slot() -> None:
    """A tenant's fires deferred by its rate hold the checkpoint back: their jobs' old
    entries must outlive it, or a takeover before the deferred fires would lose them
    (their new entries point an hour later)."""
    defs = {
        f"t{i}": {"every_ms": 60 * MIN, "anchor_ms": 30 * MIN, "tenant": "t"} for i in range(10)
    }
    far = MemoryFar(defs)
    first = PartitionScheduler(0, fired_through=T0, horizon_ms=MIN, far=far, rates=TenantRates(2.0))
    put_all(first, defs, T0)
    slot = T0 + 30 * MIN
    fired = run(first, T0, slot, 5000)
    assert 0 < len(fired) < 10  # the rest deferred, two a second
    far.flush(first.fired_through)  # the checkpoint, then the process is killed
    assert first.fired_through < slot
    second = PartitionScheduler(
        0, fired_through=first.fired_through, horizon_ms=MIN, far=far.copy()
    )
    refired = run(second, slot + 1000, slot + MIN, 1000)
    assert {f.job_id for f in fired + refired} == set(defs), "a deferred slot was lost"
