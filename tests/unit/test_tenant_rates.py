"""Per-tenant fire rates in the scheduling core: excess fires are deferred
at the rate, never dropped, and the checkpoint stays before the earliest one."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter

from cronstream.streams.core.misfire import Fire, Record
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.schedule import JobSchedule, Misfire

MIN = 60_000
T0 = 1_800_000_000_000 - (1_800_000_000_000 % MIN)


def test_reserve_books_at_most_the_rate_in_any_second() -> None:
    """Found by review: a token bucket let 19 fires out in the first second at 10/s (a
    second's burst, then the refill); now a window of one second holds 10 at most."""
    rates = TenantRates(10)
    moments = [rates.reserve("acme", T0) for _ in range(23)]
    assert moments[:10] == [T0] * 10
    assert moments[10:20] == [T0 + 1000] * 10
    assert moments[20:] == [T0 + 2000] * 3
    assert rates.deferred == Counter({"acme": 13})
    for start in range(T0, T0 + 3000, 50):  # any one-second window
        assert sum(start <= m < start + 1000 for m in moments) <= 10
    assert rates.reserve("acme", T0 + 5000) == T0 + 5000  # idle since: at once again
    slow = TenantRates(0.5)  # under one a second: one per two seconds
    assert [slow.reserve("acme", T0) for _ in range(3)] == [T0, T0 + 2000, T0 + 4000]
    assert rates.reserve("beta", T0) == T0  # another tenant's bucket
    assert not rates.limited("default")
    assert not TenantRates(0).limited("acme")
    assert TenantRates(10, overrides={"acme": 0}).limited("beta")
    half = TenantRates(10)
    half.share = 0.5  # the processor owns half the partitions: half the rate
    assert [half.reserve("acme", T0) for _ in range(6)][-1] == T0 + 1000


def test_ready_at_tells_when_the_next_fire_may_happen_without_booking_it() -> None:
    rates = TenantRates(10)
    assert rates.ready_at("acme", T0) == T0
    for _ in range(10):
        rates.reserve("acme", T0)
    assert rates.ready_at("acme", T0) == T0 + 1000  # the second's ten are spent
    assert rates.ready_at("acme", T0) == T0 + 1000  # asked again: nothing was booked
    assert rates.ready_at("acme", T0 + 1000) == T0 + 1000
    assert rates.reserve("acme", T0 + 1000) == T0 + 1000
    assert rates.ready_at("beta", T0) == T0


def burst(core: PartitionScheduler, tenant: str, count: int) -> None:
    for i in range(count):
        core.put(JobSchedule(f"{tenant}/j{i}", every_ms=MIN, tenant=tenant), now=T0)


def test_a_burst_over_the_rate_is_spread_and_every_slot_fires_once() -> None:
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(100))
    burst(core, "acme", 1000)
    burst(core, "default", 50)
    fired: list[Fire] = []
    first = core.due(T0 + MIN)
    fired += [a for a in first if type(a) is Fire]
    assert sum(1 for f in fired if f.job_id.startswith("acme/")) == 100
    assert sum(1 for f in fired if f.job_id.startswith("default/")) == 50  # not limited
    assert core.fired_through == T0 + MIN - 1  # held before the deferred slot
    for ms in range(100, 10_001, 100):
        fired += [a for a in core.due(T0 + MIN + ms) if type(a) is Fire]
    acme = [f for f in fired if f.job_id.startswith("acme/")]
    assert Counter(f.job_id for f in acme) == Counter(f"acme/j{i}" for i in range(1000))
    assert {f.slot_ms for f in acme} == {T0 + MIN}
    assert {f.due_ms for f in acme} == {T0 + MIN}  # lateness shows as skew, from the due
    assert not core.deferred
    assert core.fired_through == T0 + MIN + 10_000
    # The next minute's slots were scheduled all along: nothing skipped.
    nxt = [a for a in core.due(T0 + 2 * MIN) if type(a) is Fire]
    assert len(nxt) == 150
    assert sum(core.deferred.values()) == 900


def test_a_deferred_fire_of_a_job_paused_or_deleted_meanwhile() -> None:
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(1))
    burst(core, "acme", 3)
    assert len([a for a in core.due(T0 + MIN) if type(a) is Fire]) == 1
    core.put(JobSchedule("acme/j1", every_ms=MIN, tenant="acme", paused=True), now=T0 + MIN)
    core.delete("acme/j2")
    later = core.due(T0 + MIN + 5_000)
    # Paused: its deferred slot is recorded SKIPPED (it vanished without a record before,
    # the paused version settling from the held checkpoint again); deleted: dropped.
    assert [(a.job_id, a.slot_ms, a.status) for a in later if type(a) is Record] == [
        ("acme/j1", T0 + MIN, "SKIPPED")
    ]
    assert [a for a in later if type(a) is Fire] == []
    assert not core.deferred  # the checkpoint free again
    assert core.fired_through == T0 + MIN + 5_000


def test_a_definition_changed_while_its_fires_wait_for_the_rate_repeats_none() -> None:
    """While one tenant's fires wait, the checkpoint is held behind them: another
    tenant's changed definition settled from there again and emitted the slots its job
    had emitted since a second time, unflagged."""
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(2))
    for i in range(30):  # a minute's burst over the rate: ~30 s to drain
        core.put(JobSchedule(f"acme/w{i}", every_ms=MIN, tenant="acme"), now=T0)
    core.put(JobSchedule("beta/j", every_ms=S, tenant="beta"), now=T0)
    fired: list[Fire] = []
    for ms in range(S, MIN + 5 * S + 1, S):
        fired += [a for a in core.due(T0 + ms) if type(a) is Fire]
    assert core.fired_through < T0 + MIN  # held behind the fires still deferred
    changed = JobSchedule("beta/j", every_ms=S, tenant="beta", jitter_ms=0)
    fired += [a for a in core.put(changed, now=T0 + MIN + 5 * S) if type(a) is Fire]
    fired += run_until(core, T0 + MIN + 5 * S, T0 + 3 * MIN, step=S)
    slots = Counter((f.job_id, f.slot_ms) for f in fired)
    assert max(slots.values()) == 1, [k for k, n in slots.items() if n > 1][:5]
    mine = sorted(slot for job_id, slot in slots if job_id == "beta/j")
    assert mine[:5] == [T0 + k * S for k in range(1, 6)]  # none skipped either


# -- catch-up: the slots an outage owes go through the same rate ---------------------------
S = 1000
HOUR = 3600 * S
OUTAGE = 2 * HOUR


def catchup_jobs(count: int, tenant: str = "acme") -> list[JobSchedule]:
    """Jobs every 10 s with misfire ``all`` (5 catch-up runs) over a 3-hour window: a
    2-hour outage owes each 6 late slots (the 60 s threshold) and 5 catch-up runs."""
    return [
        JobSchedule(
            f"{tenant}/c{i}", every_ms=10 * S, tenant=tenant, misfire=Misfire("ALL", 5, 3 * HOUR)
        )
        for i in range(count)
    ]


def recovered(core: PartitionScheduler, jobs: list[JobSchedule], now: int) -> list[Fire]:
    """The fires of recovering ``jobs`` (known at the checkpoint) at ``now``."""
    out: list[Fire] = []
    for job in jobs:
        out += [a for a in core.recover(job, now=now, known=True, arrived_ms=T0) if type(a) is Fire]
    return out


def unrated_fires(count: int, now: int) -> list[Fire]:
    """What the same recovery emits without a rate: what must come out, all of it."""
    return recovered(PartitionScheduler(0, fired_through=T0), catchup_jobs(count), now)


def run_until(core: PartitionScheduler, start: int, until: int, step: int = 100) -> list[Fire]:
    """``due`` every ``step`` ms over (start, until]; the checkpoint never claims a
    deferred fire on the way."""
    fired: list[Fire] = []
    for now in range(start + step, until + 1, step):
        fired += [a for a in core.due(now) if type(a) is Fire]
        if core.deferred:
            assert core.fired_through < min(core.deferred)
    return fired


def test_a_catchup_after_an_outage_is_deferred_by_the_tenants_rate_never_dropped() -> None:
    """Recovered after 2 hours: 20 jobs owe 220 fires (100 CATCHUP, 120 late). At 10/s
    the first second emits 10; the rest leave at the rate, each as settled (trigger,
    slot, due, flagged), a job's slots oldest first; the checkpoint stays before the
    earliest waiting; once drained, nothing was lost and nothing ran twice."""
    now = T0 + OUTAGE
    jobs = catchup_jobs(20)
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(10))
    first: list[Fire] = []
    for job in jobs:
        actions = core.recover(job, now=now, known=True, arrived_ms=T0)
        first += [a for a in actions if type(a) is Fire]
        records = [a for a in actions if type(a) is Record]
        assert [(r.status, r.slots) for r in records] == [("MISSED", 720 - 6 - 5)]
    assert len(first) == 10
    assert sum(core.deferred.values()) == 210
    assert core.fired_through < min(core.deferred) < now - 60 * S  # a catch-up slot waits
    later = run_until(core, now, now + 40 * S)
    assert len([f for f in later if f.slot_ms <= now]) == 210
    catchup = [f for f in first + later if f.slot_ms <= now]
    expected = unrated_fires(20, now)
    key = attrgetter("job_id", "slot_ms", "due_ms", "trigger", "possible_duplicate")
    assert sorted(map(key, catchup)) == sorted(map(key, expected))
    for job in jobs:
        slots = [f.slot_ms for f in catchup if f.job_id == job.job_id]
        assert slots == sorted(slots)
    assert min(core.deferred, default=now + 1) > now  # only live slots wait, as they do


def test_a_deferred_catchup_survives_a_crash_after_the_checkpoint() -> None:
    """Killed while the catch-up drains: the checkpoint it left owes every fire not
    emitted yet; the next owner settles them again (flagged): no slot of the first
    settlement is lost, before or after the crash."""
    now = T0 + OUTAGE
    first = PartitionScheduler(0, fired_through=T0, rates=TenantRates(10))
    fired = recovered(first, catchup_jobs(20), now)
    fired += run_until(first, now, now + 5 * S)  # about 50 of 220 out, then kill -9
    checkpoint = first.fired_through
    assert first.deferred
    assert checkpoint < min(first.deferred)
    crash = now + 5 * S
    second = PartitionScheduler(0, fired_through=checkpoint, rates=TenantRates(10))
    again = recovered(second, catchup_jobs(20), crash + S)
    again += run_until(second, crash + S, crash + 60 * S)
    assert all(f.possible_duplicate for f in again if f.slot_ms <= crash + S)
    owed = {(f.job_id, f.slot_ms) for f in unrated_fires(20, now)}
    emitted = {(f.job_id, f.slot_ms) for f in fired + again}
    assert owed <= emitted, "a deferred catch-up slot was lost in the crash"


def test_a_changed_definition_settles_its_owed_slots_through_the_rate() -> None:
    """A put of a known job owes the slots since the checkpoint (``put``): they too wait
    for the rate."""
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(1))
    job = JobSchedule("acme/j", every_ms=S, tenant="acme")
    core.put(job, now=T0)
    core.fired_through = T0  # the processor stalled 5 s (a GC pause, a slow flush)
    late = core.put(JobSchedule("acme/j", every_ms=S, tenant="acme"), now=T0 + 5 * S)
    assert [a.slot_ms for a in late if type(a) is Fire] == [T0 + S]
    assert sum(core.deferred.values()) == 4
    core.due(T0 + 5 * S)
    assert core.fired_through == T0 + 2 * S - 1  # before the first deferred
    rest = run_until(core, T0 + 5 * S, T0 + 20 * S)
    assert [f.slot_ms for f in rest][:4] == [T0 + k * S for k in range(2, 6)]


def test_a_partition_behind_its_batches_never_checkpoints_past_a_deferred_fire() -> None:
    """``due(now, limit)`` returning a partial batch moved ``fired_through`` to what the
    wheel drained, past fires still deferred: a crash then lost them."""
    core = PartitionScheduler(0, fired_through=T0, rates=TenantRates(1))
    burst(core, "acme", 5)
    assert len([a for a in core.due(T0 + MIN) if type(a) is Fire]) == 1
    waiting = min(core.deferred)
    core.due(T0 + MIN + 2500, limit=1)  # one deferred fire out, one more waiting behind it
    assert core.deferred
    assert core.fired_through < waiting
