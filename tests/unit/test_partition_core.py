"""The partition scheduler with a virtual clock: firing, misfire policies, recovery, wheel."""

from __future__ import annotations

from collections import Counter
from typing import Any

from cronstream.streams.core.misfire import Action, Fire, Record
from cronstream.streams.core.partition import DEAD_FLOOR, PartitionScheduler, Timer
from cronstream.streams.core.schedule import JobSchedule, Misfire
from cronstream.streams.core.wheel import TimingWheel

MIN = 60_000
T0 = 1_800_000_000_000 - (1_800_000_000_000 % MIN)  # a minute boundary


def every_minute(job_id: str = "j", **kw: Any) -> JobSchedule:
    return JobSchedule(job_id, every_ms=MIN, **kw)


def fires(actions: list[Action]) -> list[tuple[int, str, bool]]:
    return [(a.slot_ms, a.trigger, a.possible_duplicate) for a in actions if type(a) is Fire]


def records(actions: list[Action]) -> list[tuple[int, str]]:
    return [(a.slot_ms, a.status) for a in actions if type(a) is Record]


def test_live_job_fires_each_slot_once_and_watermark_advances() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    assert core.put(every_minute(), now=T0 + 10) == []
    assert core.due(T0 + MIN - 1) == []
    assert fires(core.due(T0 + MIN)) == [(T0 + MIN, "SCHEDULE", False)]
    assert core.due(T0 + MIN + 5) == []
    assert fires(core.due(T0 + 3 * MIN)) == [
        (T0 + 2 * MIN, "SCHEDULE", False),
        (T0 + 3 * MIN, "SCHEDULE", False),
    ]
    assert core.fired_through == T0 + 3 * MIN


def test_new_definition_does_not_backfill_slots_before_it_arrived() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    assert core.put(every_minute(), now=T0 + 5 * MIN + 1) == []
    assert fires(core.due(T0 + 6 * MIN)) == [(T0 + 6 * MIN, "SCHEDULE", False)]


def test_paused_slots_are_recorded_skipped_and_resume_fires_the_next_slot() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(every_minute(), now=T0)
    core.put(every_minute(paused=True), now=T0 + 1)
    assert records(core.due(T0 + MIN)) == [(T0 + MIN, "SKIPPED")]
    core.put(every_minute(), now=T0 + MIN + 30_000)
    assert fires(core.due(T0 + 2 * MIN)) == [(T0 + 2 * MIN, "SCHEDULE", False)]


def test_with_a_lookahead_a_change_applies_from_the_first_slot_not_emitted() -> None:
    """due(now + ahead) emits ahead; a pause or resume read meanwhile neither emits a
    slot again nor records one already emitted (found by test_lookahead: a paused job's
    slot emitted ahead was also recorded SKIPPED)."""
    core = PartitionScheduler(0, fired_through=T0)
    core.put(JobSchedule("j", every_ms=1000), now=T0)
    assert fires(core.due(T0 + 2000)) == [
        (T0 + 1000, "SCHEDULE", False),
        (T0 + 2000, "SCHEDULE", False),
    ]
    # now = T0 + 500, lookahead 1.5 s: paused, the slots emitted ahead stay as they are
    assert core.put(JobSchedule("j", every_ms=1000, paused=True), now=T0 + 500) == []
    assert records(core.due(T0 + 3000)) == [(T0 + 3000, "SKIPPED")]
    assert core.put(JobSchedule("j", every_ms=1000), now=T0 + 1600) == []
    assert fires(core.due(T0 + 4000)) == [(T0 + 4000, "SCHEDULE", False)]


def test_deleted_job_never_fires_again() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(every_minute(), now=T0)
    assert core.delete("j")
    assert core.due(T0 + 10 * MIN) == []


def test_replaced_definition_drops_the_old_wheel_entry() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(every_minute(), now=T0)
    core.put(JobSchedule("j", every_ms=2 * MIN), now=T0 + 1)
    assert fires(core.due(T0 + 2 * MIN)) == [(T0 + 2 * MIN, "SCHEDULE", False)]


def test_recovery_within_the_threshold_re_emits_every_slot_flagged() -> None:
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=5 * MIN)
    actions = core.recover(every_minute(), now=T0 + 3 * MIN + 1, known=True, arrived_ms=0)
    assert fires(actions) == [(T0 + k * MIN, "SCHEDULE", True) for k in (1, 2, 3)]
    assert records(actions) == []


def _outage(policy: str, **kw: int) -> list[Action]:
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=MIN // 2)
    job = every_minute(misfire=Misfire(policy, kw.get("cap", 10), kw.get("window", 60 * MIN)))
    return core.recover(job, now=T0 + 5 * MIN + 40_000, known=True, arrived_ms=0)


def test_misfire_skip_runs_nothing_and_records_every_slot() -> None:
    actions = _outage("SKIP")
    assert fires(actions) == []
    assert records(actions) == [(T0 + k * MIN, "SKIPPED") for k in range(1, 6)]


def test_misfire_once_runs_the_latest_slot_only() -> None:
    actions = _outage("ONCE")
    assert fires(actions) == [(T0 + 5 * MIN, "CATCHUP", True)]
    assert records(actions) == [(T0 + k * MIN, "SKIPPED") for k in range(1, 5)]


def test_misfire_all_runs_up_to_the_cap_and_records_the_rest_missed() -> None:
    actions = _outage("ALL", cap=3)
    assert fires(actions) == [(T0 + k * MIN, "CATCHUP", True) for k in (3, 4, 5)]
    assert records(actions) == [(T0 + MIN, "MISSED"), (T0 + 2 * MIN, "MISSED")]


def test_misfire_window_bounds_what_can_still_run() -> None:
    actions = _outage("ALL", window=3 * MIN)
    assert fires(actions) == [(T0 + k * MIN, "CATCHUP", True) for k in (3, 4, 5)]
    assert records(actions) == [(T0 + MIN, "MISSED"), (T0 + 2 * MIN, "MISSED")]


def test_a_long_outage_is_one_summary_record_per_status() -> None:
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=1000)
    job = JobSchedule("s", every_ms=1000, misfire=Misfire("SKIP", 1, 60_000))
    actions = core.recover(job, now=T0 + 20_000_000, known=True, arrived_ms=0)
    summaries = [(a.slot_ms, a.status, a.slots, a.last_ms) for a in actions if type(a) is Record]
    assert summaries == [
        (T0 + 1000, "MISSED", 19_940, T0 + 19_940_000),
        (T0 + 19_941_000, "SKIPPED", 59, T0 + 19_999_000),
    ]
    assert fires(actions) == [(T0 + 20_000_000, "SCHEDULE", True)]


def test_one_time_job_fires_once_even_when_put_again() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    job = JobSchedule("o", at_ms=T0 + MIN)
    core.put(job, now=T0)
    assert fires(core.due(T0 + MIN)) == [(T0 + MIN, "SCHEDULE", False)]
    assert core.put(JobSchedule("o", at_ms=T0 + MIN), now=T0 + MIN + 5) == []
    assert core.due(T0 + 2 * MIN) == []


def test_one_time_job_in_the_past_fires_at_once_when_put() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    actions = core.put(JobSchedule("o", at_ms=T0 - 1000), now=T0)
    assert fires(actions) == [(T0 - 1000, "SCHEDULE", False)]


def test_recovered_one_time_job_known_at_checkpoint_is_done() -> None:
    core = PartitionScheduler(0, fired_through=T0 + MIN)
    job = JobSchedule("o", at_ms=T0)
    assert core.recover(job, now=T0 + 2 * MIN, known=True, arrived_ms=0) == []
    assert core.put(JobSchedule("o", at_ms=T0), now=T0 + 3 * MIN) == []


def test_recovered_one_time_job_written_after_checkpoint_is_re_emitted_flagged() -> None:
    core = PartitionScheduler(0, fired_through=T0 + 10_000)
    job = JobSchedule("o", at_ms=T0)
    actions = core.recover(job, now=T0 + 20_000, known=False, arrived_ms=T0 + 15_000)
    assert fires(actions) == [(T0, "SCHEDULE", True)]


def test_definition_written_during_an_outage_owes_slots_after_it_arrived() -> None:
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=10 * MIN)
    actions = core.recover(every_minute(), now=T0 + 5 * MIN, known=False, arrived_ms=T0 + 3 * MIN)
    assert fires(actions) == [(T0 + 4 * MIN, "SCHEDULE", True), (T0 + 5 * MIN, "SCHEDULE", True)]


def test_timers_fire_when_due_and_known_fired_timers_are_not_repeated() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(JobSchedule("j"), now=T0)  # manual-only job
    assert not core.add_timer(Timer(1, "j", T0 - 5, body="old"), fired_through=T0)
    assert core.add_timer(Timer(2, "j", T0 + 500, body="retry"), fired_through=T0)
    assert core.lowest_pending_timer() == 2
    out = core.due(T0 + 500)
    assert [(a.trigger, a.timer.body) for a in out if type(a) is Fire] == [("RETRY", "retry")]
    assert core.lowest_pending_timer() is None


def test_timer_of_a_deleted_job_is_recorded_not_fired() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.add_timer(Timer(7, "gone", T0 + 1, body="x"))
    assert records(core.due(T0 + 1)) == [(T0 + 1, "SKIPPED")]


def test_a_deadline_check_fires_for_a_paused_job_and_is_never_recorded() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(JobSchedule("j", paused=True), now=T0)
    core.add_timer(Timer(3, "j", T0 + 5, body="check", check=True))
    core.add_timer(Timer(4, "gone", T0 + 5, body="check", check=True))
    out = core.due(T0 + 5)
    assert [(a.job_id, a.trigger, a.timer.body) for a in out if type(a) is Fire] == [
        ("j", "DEADLINE", "check")
    ]
    assert records(out) == []  # a deleted job's check is dropped, a run is never SKIPPED


def test_wheel_keeps_far_items_out_of_the_buckets_and_promotes_them_in_budget() -> None:
    wheel = TimingWheel(tick_ms=10, horizon_ms=1000)
    wheel.promote(0)
    for i in range(100):
        wheel.add(5000 + i, i)
    wheel.add(500, "soon")
    assert (wheel.near, wheel.far) == (1, 100)
    assert wheel.pop_due(499) == ([], True)
    assert wheel.pop_due(500) == ([(500, "soon")], True)
    moved = wheel.promote(4500, budget=10)
    assert moved == 10
    assert wheel.near == 10
    due, complete = wheel.pop_due(5200)  # everything due is fired whatever the budget
    assert complete
    assert [item for _, item in due] == list(range(100))
    assert len(wheel) == 0


def test_wheel_purge_drops_refused_items_near_and_far_and_keeps_the_rest_in_order() -> None:
    wheel = TimingWheel(tick_ms=10, horizon_ms=1000)
    wheel.promote(0)
    for i in range(20):
        wheel.add(100 + i, i)  # near
        wheel.add(5000 + i, 100 + i)  # far
    assert wheel.purge(lambda item: item % 2 == 0) == 20
    assert (wheel.near, wheel.far) == (10, 10)
    due, complete = wheel.pop_due(6000)
    assert complete
    assert [item for _, item in due] == [*range(0, 20, 2), *range(100, 120, 2)]
    assert len(wheel) == 0


def test_wheel_fires_items_added_in_the_past_on_the_next_pass() -> None:
    wheel = TimingWheel(tick_ms=10, horizon_ms=1000)
    wheel.pop_due(10_000)
    wheel.add(3, "late")
    assert wheel.pop_due(10_001) == ([(3, "late")], True)


def test_an_overloaded_partition_fires_in_batches_and_never_overstates_progress() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    for i in range(50):
        core.put(JobSchedule(f"j{i}", every_ms=1000), now=T0)
    now = T0 + 3000  # three slots of fifty jobs are due
    first = core.due(now, limit=40)
    assert len(first) <= 40
    assert core.fired_through < T0 + 1000  # the first slot is not fully emitted yet
    emitted = list(first)
    while core.fired_through < now:
        batch = core.due(now, limit=40)
        assert len(batch) <= 40
        emitted.extend(batch)
    slots = Counter((a.job_id, a.slot_ms) for a in emitted)
    assert len(slots) == 150
    assert set(slots.values()) == {1}


def test_a_timer_read_after_the_partition_went_live_is_judged_by_the_checkpoint() -> None:
    core = PartitionScheduler(0, fired_through=T0)  # the checkpoint's watermark
    core.put(JobSchedule("j"), now=T0)
    core.due(T0 + 10_000)  # live for ten seconds before the timer is read back
    assert core.add_timer(Timer(3, "j", T0 + 500, body="r"), fired_through=T0)
    assert core.fired_through < T0 + 500  # no checkpoint may claim it before it fires
    assert [a.timer.body for a in core.due(T0 + 10_001) if type(a) is Fire] == ["r"]


def test_a_job_deleted_and_created_again_fires_once_per_slot() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    core.put(every_minute(), now=T0)
    core.delete("j")
    core.put(every_minute(), now=T0 + 1)
    assert fires(core.due(T0 + MIN)) == [(T0 + MIN, "SCHEDULE", False)]
    assert fires(core.due(T0 + 2 * MIN)) == [(T0 + 2 * MIN, "SCHEDULE", False)]


def test_a_backlog_never_lets_the_watermark_pass_waiting_slots() -> None:
    core = PartitionScheduler(0, fired_through=0)
    for i in range(3):
        core.put(JobSchedule(f"k{i}", every_ms=1000), now=0)
    emitted = core.due(5000, limit=3)
    waiting = min(a.slot_ms for a in emitted) + 1000
    assert core.fired_through < waiting


def test_an_edit_keeps_the_slot_that_was_due_but_not_yet_emitted() -> None:
    core = PartitionScheduler(0, fired_through=T0)
    for i in range(5):
        core.put(every_minute(f"k{i}"), now=T0)
    first = core.due(T0 + MIN, limit=2)
    done = {a.job_id for a in first}
    late = next(f"k{i}" for i in range(5) if f"k{i}" not in done)
    actions = core.put(every_minute(late, jitter_ms=0), now=T0 + MIN + 600)
    actions += core.due(T0 + MIN + 700)
    assert (late, T0 + MIN) in {(a.job_id, a.slot_ms) for a in actions if type(a) is Fire}


def test_a_replaced_definition_owes_the_slots_since_the_checkpoint() -> None:
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=10 * MIN)
    actions = core.recover(
        every_minute(), now=T0 + 3 * MIN, known=False, arrived_ms=T0 + 2 * MIN + 1, replaced=True
    )
    assert [s for s, _, _ in fires(actions)] == [T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]


def test_jobs_put_then_deleted_or_replaced_leave_a_bounded_number_of_dead_wheel_entries() -> None:
    """Found by review: each deleted job's next slot stayed in the wheel until due, so
    put/delete of fresh ids grew the scheduler without bound (a year for @yearly)."""
    core = PartitionScheduler(0, fired_through=T0)
    core.put(every_minute("keeper"), now=T0)
    for i in range(20_000):
        core.put(JobSchedule(f"fresh-{i}", every_ms=3_600_000), now=T0)
        core.delete(f"fresh-{i}")
    for i in range(20_000):
        core.put(JobSchedule("changing", every_ms=3_600_000 + i), now=T0)
    assert len(core.wheel) <= DEAD_FLOOR + 2
    assert fires(core.due(T0 + MIN)) == [(T0 + MIN, "SCHEDULE", False)]  # the live job
