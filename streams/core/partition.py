"""The scheduling state of one jobs partition, driven by plain values and ``now``.

A processor owns some partitions of ``cronstream.jobs`` (and the same partitions of
``cronstream.timers``); for each it keeps one ``PartitionScheduler``: the job
definitions, the pending retry/delay timers and a timing wheel. Two methods change it
(``put``/``delete`` a definition, ``add_timer``) and one advances it (``due(now)``);
each returns the actions to emit. It never reads a clock and never does I/O.

The checkpoint is one number: ``fired_through`` — every due time <= it has been
emitted. Together with the jobs and timers offsets read at that moment (kept by the
adapter) it is enough to recover cron, interval and one-time state after a crash:

- a definition read before the checkpoint owes the slots due after ``fired_through``;
  one-time jobs due at or before it are done;
- a definition that arrived after the checkpoint owes the slots due after the later of
  ``fired_through`` and its arrival; a one-time job owes its instant unless it is known
  to be done. Whatever is re-emitted for those carries ``possible_duplicate``;
- a timer read before the checkpoint and due at or before ``fired_through`` has fired.

With a far tier (``streams.core.far``) only the jobs due within the horizon are held
here; the rest wait in the durable store and are loaded as their entries come near.

**Every fire goes through its tenant's rate** (``streams.core.rates``), whichever way it
came due: a slot of the wheel, and the catch-up and late slots that ``settle`` returns
for a definition put, recovered or loaded from the far tier (``_apply``). A fire beyond
the rate is deferred, not dropped: it waits in the wheel (``Deferred``) until the moment
the rate booked for it, then is emitted as it was decided (trigger, slot, due time,
``possible_duplicate``); the booked moments of one tenant only grow, so its fires leave
in the order they were decided (a job's slots oldest first). Timers (retries, delays,
deadline checks) are not counted: the fire they continue was.

Why a deferred fire survives a crash: ``deferred`` counts the deferred fires by their
due time, and ``fired_through`` is never above the earliest of them minus one (lowered
when a fire is deferred, capped whenever it advances: ``_advance``). So a checkpoint
taken while fires wait does not claim them; after a crash every slot due after it is
owed again and settled by the rules above, the fires flagged ``possible_duplicate``
(the workers run a run id once). A deferred catch-up slot is then settled again by its
job's misfire policy, exactly as a deferred scheduled slot is once it is older than the
threshold: it runs again (flagged) or is recorded MISSED/SKIPPED; none is silent, and
the bounds of ``streams.core.misfire`` hold for each settlement. The cost: while a long
catch-up drains at the rate, the checkpoint stays at its earliest slot, so a crash
meanwhile settles the partition's jobs from there again (the runs already emitted come
again flagged, at the rate); so does, for its own job, a far entry loaded meanwhile
(it settles from ``fired_through``, flagged). A changed definition put meanwhile does
not: a job remembers through which due time its slots were decided (``decided``: fired,
deferred or recorded), the new version settles from there, and the old version's
deferred fires still leave as decided (as runs emitted ahead do).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any

from cronstream.streams.core.far import FarTier
from cronstream.streams.core.misfire import Action, Fire, Record, settle
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.schedule import JobSchedule, Kind
from cronstream.streams.core.wheel import TimingWheel

NEVER = -(2**62)
# Dead wheel entries tolerated whatever few jobs are held (a purge visits every entry).
DEAD_FLOOR = 4096
# Far entries loaded per call of ``due`` beyond the ones due by the next tick: a burst on
# one boundary is loaded over the ticks before it (the horizon), not all at once.
FAR_BUDGET = 256


@dataclass(slots=True)
class Timer:
    offset: int
    job_id: str
    due_ms: int
    body: Any
    possible_duplicate: bool = False
    check: bool = False  # a deadline check: fired even for a paused job, never recorded


@dataclass(frozen=True, slots=True)
class Deferred:
    """A fire its tenant's rate deferred, held in the wheel until the moment booked for
    it: the fire as decided."""

    fire: Fire


class PartitionScheduler:
    def __init__(
        self,
        partition: int,
        *,
        fired_through: int,
        threshold_ms: int = 60_000,
        tick_ms: int = 10,
        horizon_ms: int = 60_000,
        rates: TenantRates | None = None,
        far: FarTier | None = None,
    ) -> None:
        self.partition = partition
        self.far = far
        self.horizon_ms = horizon_ms
        self._near_limit = fired_through + horizon_ms  # a slot due before it is held here
        self._far_cursor: tuple[int, str] | None = None  # far entries loaded up to it
        self.rates = rates
        # Fires deferred by their tenant's rate: original due -> how many. The checkpoint
        # stays before the earliest (a crash settles it again, flagged); the heap finds
        # the earliest without scanning (a catch-up defers thousands of due times).
        self.deferred: dict[int, int] = {}
        self._deferred_dues: list[int] = []
        self.fired_through = fired_through
        self.threshold_ms = threshold_ms
        self.jobs: dict[str, JobSchedule] = {}
        self.timers: dict[int, Timer] = {}
        self.once_done: dict[str, int] = {}
        self.wheel = TimingWheel(tick_ms=tick_ms, horizon_ms=horizon_ms)
        # Never reset (not even by a delete), so no stale wheel entry matches a new job.
        self._generations = itertools.count(1)
        self._dead = 0  # wheel entries left by deleted or replaced jobs since the purge

    # -- definitions --------------------------------------------------------------------
    def put(self, job: JobSchedule, *, now: int) -> list[Action]:
        """A definition read live. A new job's cron/interval slots start after ``now``;
        a changed job keeps the slots not emitted yet (due after ``fired_through``).

        With a lookahead (``due(now + ahead)``) ``fired_through`` is ahead of ``now``: a
        change applies from the first slot not emitted yet; runs emitted ahead keep the
        definition they were emitted with (the adapter cancels them on a pause or a
        delete), and a resume fires from the first slot after the lookahead."""
        if job.kind is Kind.ONCE:
            settled = NEVER
        elif job.job_id in self.jobs:
            settled = self.fired_through
        else:
            settled = now
        return self._apply(job, now=now, settled=settled, possible_duplicate=False)

    def recover(
        self, job: JobSchedule, *, now: int, known: bool, arrived_ms: int, replaced: bool = False
    ) -> list[Action]:
        """A definition read while rebuilding the partition after an assignment.

        ``known``: it was read before the checkpoint was taken; ``arrived_ms``: when it
        was written (the record timestamp); ``replaced``: an earlier version of the job
        is in the partition (then the slots after the checkpoint are owed whatever the
        arrival time: the earlier version owed them).
        """
        if known or (replaced and job.kind is not Kind.ONCE):
            settled = self.fired_through
        elif job.kind is Kind.ONCE:
            settled = NEVER
        else:
            settled = max(self.fired_through, arrived_ms)
        once_at = job.at_ms if job.kind is Kind.ONCE else None
        if known and once_at is not None and once_at + job.jitter <= self.fired_through:
            self.once_done[job.job_id] = once_at
        return self._apply(job, now=now, settled=settled, possible_duplicate=True)

    def delete(self, job_id: str) -> bool:
        """Forget a job; its wheel entries die with it. False if it was unknown."""
        self.once_done.pop(job_id, None)
        gone = self.jobs.pop(job_id, None) is not None
        if gone:
            self._orphaned()
        return gone

    def _orphaned(self) -> None:
        """A job's next slot was left in the wheel (deleted or replaced: skipped when it
        comes due). Once such dead entries outnumber the jobs held, they are purged in one
        pass, so memory follows what is scheduled, not how many definitions came and
        went: 200,000 fresh ids put then deleted kept 64 MB for up to a slot's period (a
        year for @yearly); the pass costs under a microsecond an entry (0.26 us measured
        with a trivial test), paid once per as many deletes."""
        self._dead += 1
        if self._dead > max(DEAD_FLOOR, len(self.jobs)):
            self.wheel.purge(self._alive)
            self._dead = 0

    def _alive(self, item: Any) -> bool:
        """Whether a wheel item still matters: a timer or a deferred fire always (their
        own bookkeeping drops them when due), a slot while its job's generation holds."""
        if type(item) is not tuple:
            return True
        job = self.jobs.get(item[0])
        return job is not None and job.gen == item[1]

    def _apply(
        self, job: JobSchedule, *, now: int, settled: int, possible_duplicate: bool
    ) -> list[Action]:
        job.gen = next(self._generations)
        old = self.jobs.get(job.job_id)
        if old is not None:
            self._orphaned()  # the replaced version's next slot
            if job.kind is not Kind.ONCE:
                # What the version it replaces decided stays decided: its deferred fires
                # still leave, and nothing is settled twice when the checkpoint is held
                # behind them (a catch-up draining at the tenant's rate).
                settled = max(settled, old.decided)
        self.jobs[job.job_id] = job
        if job.kind is Kind.ONCE and self.once_done.get(job.job_id) == job.at_ms:
            return []
        outcome = settle(
            job,
            owed_from=settled,
            now=now,
            threshold_ms=self.threshold_ms,
            possible_duplicate=possible_duplicate,
        )
        if job.kind is Kind.ONCE and outcome.actions:
            assert job.at_ms is not None
            self.once_done[job.job_id] = job.at_ms
        actions: list[Action] = []
        for action in outcome.actions:
            if type(action) is Fire:
                self._rated(action, actions, now)
            else:
                actions.append(action)
        job.decided = max(job.decided, now, settled)
        # The walk found the first slot due after max(now, settled) on its way.
        self._hold_slot(job, outcome.next_slot)
        return actions

    def _rated(self, fire: Fire, out: list[Action], now: int) -> None:
        """``fire`` into ``out``, or deferred to the moment its tenant's rate booked for
        it (the module's text: the checkpoint stays before it)."""
        rates, job = self.rates, fire.job
        assert job is not None  # a slot's fire: timers are not counted
        if (
            rates is not None
            and rates.limited(job.tenant)
            and ((at := rates.reserve(job.tenant, now)) > now)
        ):
            self.wheel.add(at, Deferred(fire))
            due = fire.due_ms
            count = self.deferred.get(due, 0)
            if not count:
                heapq.heappush(self._deferred_dues, due)
            self.deferred[due] = count + 1
            self.fired_through = min(self.fired_through, due - 1)
        else:
            out.append(fire)

    def _advance(self, through: int) -> None:
        """``fired_through`` moves up to ``through``, never past a deferred fire."""
        through = max(self.fired_through, through)
        dues, deferred = self._deferred_dues, self.deferred
        while dues and dues[0] not in deferred:
            heapq.heappop(dues)
        if dues:
            through = min(through, dues[0] - 1)
        self.fired_through = through

    def _schedule_next(self, job: JobSchedule, *, after_due: int) -> None:
        self._hold_slot(job, job.slot_due_after(after_due))

    def _hold_slot(self, job: JobSchedule, slot: int | None) -> None:
        far = self.far
        if far is None:
            if slot is not None:
                self._hold(slot + job.jitter, (job.job_id, job.gen, slot))
            return
        due = None if slot is None else slot + job.jitter
        far.hold(job.job_id, due, job.entry_due)  # no more slots: its last entry goes
        job.entry_due = due
        if due is not None and due < self._near_limit:
            self._hold(due, (job.job_id, job.gen, slot))
        elif self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]  # far: loaded again when its entry comes near

    def _hold(self, due_ms: int, item: Any) -> None:
        # fired_through claims every due time up to it was emitted: an item held with an
        # earlier due time (a backlog, a late timer) pulls it back.
        self.fired_through = min(self.fired_through, due_ms - 1)
        self.wheel.add(due_ms, item)

    # -- timers -------------------------------------------------------------------------
    def add_timer(self, timer: Timer, *, fired_through: int = NEVER) -> bool:
        """Hold a retry/delay timer until it is due. ``fired_through``: the checkpoint's,
        when the timer was read before that checkpoint; a timer due by then has fired
        (returns False)."""
        if timer.due_ms <= fired_through:
            return False
        self.timers[timer.offset] = timer
        self._hold(timer.due_ms, timer.offset)
        return True

    def lowest_pending_timer(self) -> int | None:
        return min(self.timers, default=None)

    # -- time ---------------------------------------------------------------------------
    def due(self, now: int, limit: int | None = None) -> list[Action]:
        """What is due at or before ``now``: at most about ``limit`` wheel entries, so an
        overloaded processor still returns to read input and checkpoint. Afterwards
        ``fired_through`` is ``now``, or the point up to which everything was emitted."""
        out: list[Action] = [] if self.far is None else self._load_near(now)
        room = limit
        while True:
            batch, complete = self.wheel.pop_due(now, room)
            self._fire(batch, out, now)
            if not complete:
                self._advance(self.wheel.drained_through)
                return out
            if not batch:
                break
            if room is not None:
                room -= len(batch)
                if room <= 0:
                    # Possibly more due (rescheduled behind the cursor): settle next call.
                    self._advance(self.wheel.drained_through)
                    return out
        self._advance(now)
        return out

    def _load_near(self, now: int) -> list[Action]:
        """Load the far entries that came within the horizon: each job not held yet is
        settled from ``fired_through`` (a takeover's late slots fire, flagged, or go by
        its misfire policy; a stale entry only finds the job's next slot)."""
        assert self.far is not None
        self._near_limit = now + self.horizon_ms
        entries = self.far.entries(
            self._far_cursor, self._near_limit, now + self.wheel.tick_ms, FAR_BUDGET
        )
        out: list[Action] = []
        for due, job_id in entries:
            self._far_cursor = (due, job_id)
            held = self.jobs.get(job_id)
            if held is not None:  # its own slot is in the wheel: a stale entry goes
                if held.entry_due != due:
                    self.far.forget(job_id, due)
                continue
            job = self.far.load(job_id)
            if job is None:
                self.far.forget(job_id, due)
                continue
            job.entry_due = due
            out.extend(
                self._apply(job, now=now, settled=self.fired_through, possible_duplicate=True)
            )
        return out

    def job(self, job_id: str) -> JobSchedule | None:
        """A job held here, or loaded from the far tier (not held)."""
        job = self.jobs.get(job_id)
        if job is None and self.far is not None:
            job = self.far.load(job_id)
        return job

    def _fire(self, batch: list[tuple[int, Any]], out: list[Action], now: int) -> None:
        jobs = self.jobs
        for due_ms, item in batch:
            if type(item) is int:
                self._timer_due(item, out)
                continue
            if type(item) is Deferred:
                self._deferred_due(item, out)
                continue
            job_id, gen, slot = item
            job = jobs.get(job_id)
            if job is None or job.gen != gen:
                continue  # replaced or deleted since this entry was scheduled
            job.decided = max(job.decided, due_ms)
            if job.paused:
                out.append(Record(job_id, slot, "SKIPPED", "job paused", job))
            else:
                self._rated(Fire(job_id, slot, due_ms, "SCHEDULE", False, job), out, now)
            if job.kind is Kind.ONCE:
                self.once_done[job_id] = slot
                if self.far is not None:
                    self._hold_slot(job, None)
            else:
                self._schedule_next(job, after_due=due_ms)

    def _deferred_due(self, item: Deferred, out: list[Action]) -> None:
        """A fire its tenant's rate deferred comes due: emitted now as it was decided,
        also when its job was changed meanwhile (the new version settles from what the
        old one decided: ``_apply``), like a run emitted ahead; skipped if the job is
        paused now, dropped if it was deleted. A job gone to the far tier meanwhile fires
        as it was deferred, unless it was deleted."""
        fire = item.fire
        left = self.deferred[fire.due_ms] - 1
        if left:
            self.deferred[fire.due_ms] = left
        else:
            del self.deferred[fire.due_ms]
        job = self.jobs.get(fire.job_id)
        if job is None and self.far is not None:
            job = None if self.far.load(fire.job_id) is None else fire.job
        if job is None:
            return
        if job.paused:
            out.append(Record(fire.job_id, fire.slot_ms, "SKIPPED", "job paused", job))
        else:
            out.append(fire)

    def _timer_due(self, offset: int, out: list[Action]) -> None:
        timer = self.timers.pop(offset, None)
        if timer is None:
            return
        job = self.job(timer.job_id)
        if timer.check:
            # Not a run: the check that the run succeeded by its deadline (a paused job's
            # runs fired before the pause still have theirs; a deleted job's do not).
            if job is not None:
                out.append(
                    Fire(
                        timer.job_id,
                        timer.due_ms,
                        timer.due_ms,
                        "DEADLINE",
                        timer.possible_duplicate,
                        job,
                        timer,
                    )
                )
        elif job is None:
            out.append(Record(timer.job_id, timer.due_ms, "SKIPPED", "job deleted", None, timer))
        elif job.paused:
            out.append(Record(timer.job_id, timer.due_ms, "SKIPPED", "job paused", job, timer))
        else:
            out.append(
                Fire(
                    timer.job_id,
                    timer.due_ms,
                    timer.due_ms,
                    "RETRY",
                    timer.possible_duplicate,
                    job,
                    timer,
                )
            )
