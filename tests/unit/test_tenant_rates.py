"""Per-tenant fire rates in the scheduling core (issue 16): excess fires are deferred
at the rate, never dropped, and the checkpoint stays before the earliest one."""

from __future__ import annotations

from collections import Counter

from streams.core.misfire import Fire, Record
from streams.core.partition import PartitionScheduler
from streams.core.rates import TenantRates
from streams.core.schedule import JobSchedule

MIN = 60_000
T0 = 1_800_000_000_000 - (1_800_000_000_000 % MIN)


def test_reserve_books_one_moment_per_fire_after_a_seconds_burst() -> None:
    rates = TenantRates(10)
    moments = [rates.reserve("acme", T0) for _ in range(13)]
    assert moments[:10] == [T0] * 10
    assert moments[10:] == [T0 + 100, T0 + 200, T0 + 300]
    assert rates.deferred == Counter({"acme": 3})
    assert rates.reserve("beta", T0) == T0  # another tenant's bucket
    assert not rates.limited("default")
    assert not TenantRates(0).limited("acme")
    assert TenantRates(10, overrides={"acme": 0}).limited("beta")
    half = TenantRates(10)
    half.share = 0.5  # the processor owns half the partitions: half the rate
    assert [half.reserve("acme", T0) for _ in range(6)][-1] == T0 + 200


def test_ready_at_tells_when_the_next_fire_may_happen_without_booking_it() -> None:
    rates = TenantRates(10)
    assert rates.ready_at("acme", T0) == T0
    for _ in range(10):
        rates.reserve("acme", T0)
    assert rates.ready_at("acme", T0) == T0 + 100  # the burst is spent
    assert rates.ready_at("acme", T0) == T0 + 100  # asked again: nothing was booked
    assert rates.ready_at("acme", T0 + 100) == T0 + 100
    assert rates.reserve("acme", T0 + 100) == T0 + 100
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
    assert [(a.job_id, a.status) for a in later if type(a) is Record] == []
    assert [a for a in later if type(a) is Fire] == []
    assert not core.deferred  # replaced and deleted: dropped, the checkpoint free again
    assert core.fired_through == T0 + MIN + 5_000
