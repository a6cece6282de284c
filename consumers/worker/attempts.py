"""Starting attempts on the run threads and judging them when they end.

Up to ``concurrency`` attempts run at once on a ``RunPool`` and finish in any order. What
becomes of each (start or not, retry, cancel, dead letter, time-out) is decided by
``consumers.core.verdict``; the ``Outbox`` publishes it, with what the attempt printed or
returned when there is any (``kept_output``: docs/run-output.md).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue

from cronstream.consumers.core.bulkhead import Admission
from cronstream.consumers.core.concurrency import ConcurrencyGate
from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.output import Dropped, Output, fit, kept
from cronstream.consumers.core.verdict import after_failure, before_start, retry_timer
from cronstream.consumers.errors import (
    Cancelled,
    ExecutionFailed,
    InternalError,
    TargetInvalid,
    TimedOut,
)
from cronstream.consumers.executors.base import Executor, Result, RunContext
from cronstream.consumers.executors.pool import Done, RunPool
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.outbox import Outbox
from cronstream.consumers.worker.pending import Pending
from cronstream.consumers.worker.runners import Runners
from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import (
    Concurrency,
    DeadLetter,
    Priority,
    RunRequest,
    RunStatus,
    Target,
    TimerRequest,
    Trigger,
    run_identity,
    to_ms,
)
from cronstream.schemas.redact import redact_text
from cronstream.schemas.tenancy import OPERATORS

log = logging.getLogger("cronstream.worker")
STAGE = "worker"
ABANDON_AFTER_S = 1.0  # past the deadline, an attempt that ignores its timeout is given up


class Attempts:
    def __init__(
        self,
        settings: Settings,
        config: WorkerConfig,
        *,
        outbox: Outbox,
        dedup: Dedup,
        cancels: dict[str, int],
        tally: metrics.Tally,
        cancel_reasons: dict[str, str] | None = None,
    ) -> None:
        self.concurrency = config.concurrency
        # A run's STARTED outcome is published once it has executed this long
        # (``_announce``); a run that ends sooner leaves its final outcome alone, which
        # carries its start (0: at its start).
        self.started_after_ms = config.started_after_ms
        self.output_limit = config.output_limit  # bytes of an attempt's output kept
        self.outbox = outbox
        self.dedup = dedup
        self.cancels = cancels  # run id -> when the cancel was issued (``ControlFeed``)
        self.cancel_reasons = {} if cancel_reasons is None else cancel_reasons
        self.tally = tally
        self.running: set[Pending] = set()
        self.running_ids: dict[str, Pending] = {}
        # Jobs' concurrency policies: runs executing or queued per job, and the queued
        # runs whose turn came (started before anything new is taken).
        self.gate: ConcurrencyGate[Pending] = ConcurrencyGate()
        self.released: deque[Pending] = deque()
        self.replaced: dict[str, str] = {}  # run id -> the run that replaced it
        self.finished: SimpleQueue[Done[Pending]] = SimpleQueue()
        self.pool = RunPool(config.concurrency, self.finished)
        runners = Runners(settings, config, outbox.publisher.codec.encode)
        self.runners = runners
        self.policy, self.executors = runners.policy, runners.executors
        self.destinations, self.starters = runners.destinations, runners.starters
        self._next_deadline_check = 0.0
        self.faults = RecordFaults(STAGE)  # a run that makes starting it raise
        # Due-to-start skew per priority: each series found once here (all three exist
        # from the start, at 0), so a start costs a dict lookup, not a labels() call.
        self.start_skew = {p: metrics.start_skew.labels(p.value) for p in Priority}

    def __len__(self) -> int:
        return len(self.running)

    # -- starting -----------------------------------------------------------------------
    def start_some(self, capacity: int, take: Callable[[], Pending | None]) -> int:
        """Start up to ``capacity`` runs: first runs whose destination's slot came
        (``Destinations``), then queued runs whose turn came (a job's ``concurrency``
        policy), then runs from ``take``; returns how many it took."""
        taken = 0
        ready = self.destinations.ready
        while capacity > 0:
            deadline: float | None = None
            released = False
            pending: Pending | None
            if ready:
                pending, deadline = ready.popleft()
            else:
                released = bool(self.released)
                pending = self.released.popleft() if released else take()
                if pending is None:
                    break
            taken += 1
            try:
                if deadline is None:
                    capacity -= self._start_one(pending, released)
                else:
                    capacity -= self._resume(pending, deadline)
            except Exception as exc:  # a bug this run reaches before its executor
                self._unstartable(pending, exc)
            else:
                self.faults.ok()
        return taken

    def _resume(self, pending: Pending, deadline: float) -> int:
        """Start a run whose destination's slot came (``Destinations.ready``); 1 if it
        took a run slot. One whose wait used its time up is not started at all (a record
        produced now would land after its attempt was given up)."""
        if deadline <= time.monotonic():
            self.fail(pending, TimedOut(self.destinations.timeout(pending.destination)))
            self._ended(pending)
            return 0
        # the grants may have changed while it waited: asked again
        return 1 if self._launch(pending, deadline, self._refusal(pending.run)) else 0

    def _start_one(self, pending: Pending, released: bool) -> int:
        """Start ``pending`` or settle it at once; 1 if it took a run thread."""
        run = pending.run
        if run.trigger is Trigger.DEADLINE:  # not a run: the check of its deadline
            self.outbox.check_deadline(pending, running=self._here(run.run_id))
            return 0
        cancelled = run.run_id in self.cancels
        verdict = before_start(
            cancelled=cancelled,
            duplicate=self._here(run.run_id) or self.dedup.seen(run.run_id, run.attempt),
            reason=self.cancel_reasons.get(run.run_id) if cancelled else None,
        )
        if verdict is not None:
            self.outbox.finish(pending, verdict.status, verdict.error)
            if released:
                self._release(run.job_id)
            return 0
        if not released and run.concurrency is not Concurrency.ALLOW and not self._admit(pending):
            return 0
        return 1 if self._start(pending) else 0

    def _here(self, run_id: str) -> bool:
        """Whether ``run_id`` executes here, or waits here for its destination's slot."""
        return run_id in self.running_ids or run_id in self.destinations.waiting

    def _unstartable(self, pending: Pending, exc: Exception) -> None:
        """A bug ``pending``'s run reaches before its executor (``runtime.faults``): the
        run DEAD_LETTERED with the error and a DLQ record, or the DLQ record alone when
        its outcome cannot be written either; the other runs go on."""
        run = pending.run
        fault = self.faults.fault(
            exc,
            topic=pending.topic,
            partition=pending.partition,
            offset=pending.offset,
            key=run.job_id,
            tenant=run.tenant,
        )
        if self.running_ids.get(run.run_id) is pending:
            self.running.discard(pending)
            del self.running_ids[run.run_id]
        self.destinations.ended(pending)
        if run.concurrency is not Concurrency.ALLOW:  # the job's next queued run goes on
            if self.gate.running.get(run.job_id, {}).get(run.run_id) is pending:
                self._ended(pending)
            else:
                self._release(run.job_id)
        letter = fault.letter(STAGE, job_id=run.job_id, run_id=run.run_id, attempt=run.attempt)
        try:
            self.outbox.finish(
                pending,
                RunStatus.DEAD_LETTERED,
                fault.reason,
                extra=(self.outbox.topics.dlq, letter),
            )
        except Exception:
            log.exception(
                "run %s: its outcome cannot be written; the dead letter alone", run.run_id
            )
            self.outbox.checked.append((pending, [(self.outbox.topics.dlq, letter)]))

    def _admit(self, pending: Pending) -> bool:
        """The job's concurrency policy on a new run: start it (replacing the runs
        executing, for REPLACE), skip it (FORBID) or queue it (QUEUE)."""
        run = pending.run
        decision = self.gate.admit(
            run.job_id, run.run_id, attempt=run.attempt, policy=run.concurrency.value, item=pending
        )
        if decision.skip_reason is not None:
            self.outbox.finish(pending, RunStatus.SKIPPED, decision.skip_reason)
            self.tally.add(metrics.runs_finished, "SKIPPED", run.target.type)
        for run_id in decision.cancel:
            other = self.running_ids.get(run_id)
            if other is not None and other.context is not None:
                self.replaced[run_id] = run.run_id
                self.cancels.setdefault(run_id, int(time.time() * 1000))  # CANCELED, no retry
                other.context.cancelled.set()
        return decision.start

    def _release(self, job_id: str) -> None:
        """A run of ``job_id`` ended, or a queued one did not start: the next queued."""
        item = self.gate.release(job_id)
        if item is not None:
            self.released.append(item)

    def _ended(self, pending: Pending) -> None:
        """An attempt ended: its destination's slot and its job's turn go to the next."""
        self.destinations.ended(pending)
        run = pending.run
        if run.concurrency is not Concurrency.ALLOW:
            self.replaced.pop(run.run_id, None)
            item = self.gate.ended(run.job_id, run.run_id)
            if item is not None:
                self.released.append(item)

    def drop_unstarted(self, gone: set[tuple[str, int]]) -> None:
        """Revoked partitions: their queued runs are left for the next owner to read."""

        def revoked(pending: Pending) -> bool:
            return (pending.topic, pending.partition) in gone

        for pending in self.destinations.drop(revoked):
            self._ended(pending)  # its job's turn: to a queued run, dropped below if revoked
        self.gate.drop_queued(revoked)
        self.released = deque(p for p in self.released if not revoked(p))

    def _start(self, pending: Pending) -> bool:
        """Start the attempt, or have it wait for a slot of its destination
        (``Destinations``: False, no slot taken) or refuse it there."""
        run = pending.run
        refusal = self._refusal(run)
        if not refusal and self.destinations.where:
            admission, where = self.destinations.admit(pending, time.monotonic())
            if admission is Admission.WAIT:  # it holds its job's turn meanwhile
                if run.concurrency is not Concurrency.ALLOW:
                    policy = run.concurrency.value
                    self.gate.started(run.job_id, run.run_id, policy=policy, item=pending)
                return False
            if admission is Admission.FULL:
                self.fail(pending, ExecutionFailed(self.destinations.refusal(where)))
                if run.concurrency is not Concurrency.ALLOW:
                    self._release(run.job_id)
                return False
        return self._launch(pending, None, refusal)

    def _refusal(self, run: RunRequest) -> str:
        """Why the run may not start here ("" when it may)."""
        if run.target.type not in self.executors:
            return f"unknown target type {run.target.type!r}"
        if run.tenant == OPERATORS:  # not bounded by the tenants' policy: not asked
            return ""
        return "; ".join(self.policy.current().problems(run.tenant, run.job_id, run.target))

    def _launch(self, pending: Pending, deadline: float | None, refusal: str) -> bool:
        """The attempt (its STARTED outcome now, or later: ``_announce``) on a run
        thread or its executor's loop; False when ``refusal`` says it may not start
        (failed at once, no thread taken). ``deadline``: of a run that waited for its
        destination's slot (else from now)."""
        run = pending.run
        now_ms, now = int(time.time() * 1000), time.monotonic()
        executor = self.executors.get(run.target.type)
        context = RunContext(
            **run_identity(run),
            payload=run.payload,
            deadline=now + run.timeout_ms / 1000 if deadline is None else deadline,
        )
        pending.context = context
        pending.started_ms = now_ms
        if not self.started_after_ms:
            self.outbox.announce(pending, now_ms)
        self.tally.add(metrics.runs_started, run.target.type)
        metrics.fire_to_start.observe(max(0, now_ms - to_ms(run.fired_at)) / 1000)
        if run.due_at is not None:
            self.start_skew[run.priority].observe(max(0, now_ms - to_ms(run.due_at)) / 1000)
        if refusal or executor is None:
            self.fail(pending, TargetInvalid(refusal))
            if deadline is not None:  # it held its destination's slot and its job's turn
                self._ended(pending)
            elif run.concurrency is not Concurrency.ALLOW:
                self._release(run.job_id)
            return False
        self.running.add(pending)
        self.running_ids[run.run_id] = pending
        if run.concurrency is not Concurrency.ALLOW:
            self.gate.started(run.job_id, run.run_id, policy=run.concurrency.value, item=pending)
        starter = self.starters.get(run.target.type)
        # Without a thread when its executor can (http, kafka); otherwise a run thread.
        if starter is None or not starter(pending, run.target, context, self.finished):
            pending.on_thread = True
            self.pool.submit(pending, _execute, executor, run.target, context)
        return True

    def cancel(self, run_id: str) -> None:
        """A cancel arrived: stop the run if it is executing here."""
        running = self.running_ids.get(run_id)
        if running is not None and running.context is not None:
            running.context.cancelled.set()
            return
        waiting = self.destinations.cancel(run_id)
        if waiting is not None:  # not started yet: ends at once
            reason = self.cancel_reasons.get(run_id)
            verdict = before_start(cancelled=True, duplicate=False, reason=reason)
            assert verdict is not None
            self.outbox.finish(waiting, verdict.status, verdict.error)
            self._ended(waiting)

    # -- finishing ----------------------------------------------------------------------
    def collect(self, wait: float) -> int:
        """Finish the attempts that completed (waiting up to ``wait`` s for one), and
        give up on those that ignore their deadline. Returns how many finished."""
        finished = self.finished
        block = bool(wait and self.running)
        count = 0
        heard_at = time.monotonic()  # when the attempts collected here were answered
        while True:
            try:
                pending, output, error = (
                    finished.get(timeout=wait) if block else finished.get_nowait()
                )
            except Empty:
                break
            block = False
            if pending not in self.running:
                continue  # given up on at its deadline; its result is discarded
            self.running.remove(pending)
            count += 1
            del self.running_ids[pending.run.run_id]
            if pending.destination is not None and not isinstance(error, TimedOut):
                self.destinations.heard(pending, heard_at)  # it answered
            if isinstance(error, ExecutionFailed):
                self.fail(pending, error)
            elif error is not None:  # an executor's bug: this run's outcome, not our end
                trace = "".join(traceback.format_exception(error)).rstrip()
                log.error(
                    "run %s: an exception escaped its executor\n%s",
                    pending.run.run_id,
                    _scrub(pending, trace),
                )
                self.fail(pending, InternalError(f"the worker failed running it: {error!r}"))
            else:  # a cancel that came while it ran could not stop it: it succeeded
                kept_text = None if output is None else self.kept_output(pending, output)
                self.outbox.finish(pending, RunStatus.SUCCEEDED, None, output=kept_text)
            self._ended(pending)
        now = time.monotonic()
        if now >= self._next_deadline_check:
            self._next_deadline_check = now + 0.1
            count += self._abandon_overdue(now)
            for pending, where in self.destinations.expired(now):
                self.fail(pending, TimedOut(self.destinations.timeout(where)))
                self._ended(pending)  # its job's turn (it held no slot)
                count += 1
            metrics.runs_waiting_destination.set(len(self.destinations))
            self._announce()
            metrics.in_flight.set(len(self.running))
        return count

    def _announce(self) -> None:
        """The STARTED outcome of each attempt executing for ``--started-after``:
        what runs longer is seen running within 100 ms of that."""
        if not self.started_after_ms:
            return
        now_ms = int(time.time() * 1000)
        since = now_ms - self.started_after_ms
        for pending in self.running:
            if not pending.announced and pending.started_ms <= since:
                self.outbox.announce(pending, now_ms)

    def _abandon_overdue(self, now: float) -> int:
        """Give up on attempts past their deadline whose executor ignores it (a python
        callable); each one's thread stays stuck in the call, so another takes its
        place, up to twice the concurrency in all."""
        count = 0
        for pending in list(self.running):
            context = pending.context
            assert context is not None
            if now > context.deadline + ABANDON_AFTER_S:
                context.cancelled.set()
                self.running.remove(pending)
                del self.running_ids[pending.run.run_id]
                self.fail(pending, TimedOut("timed out; the callable did not stop"))
                self._ended(pending)
                count += 1
                if not pending.on_thread:
                    continue  # on its executor's loop (http, kafka): no thread is stuck
                if len(self.pool) < 2 * self.concurrency:
                    self.pool.add_thread()
                else:
                    log.warning(
                        "%d run threads, many stuck in calls given up on: starts may wait",
                        len(self.pool),
                    )
        return count

    def fail(self, pending: Pending, exc: ExecutionFailed) -> None:
        """Settle an attempt that did not succeed, as ``verdict.after_failure`` decides."""
        run = pending.run
        context = pending.context
        now_ms = int(time.time() * 1000)
        by = self.replaced.get(run.run_id)
        verdict = after_failure(
            RunStatus(exc.status),
            f"replaced by run {by} (concurrency replace)"
            if by is not None
            else redact_text(_scrub(pending, f"{type(exc).__name__}: {exc}")),
            retriable=exc.retriable,
            cancel_requested=context is not None
            and context.cancelled.is_set()
            and run.run_id in self.cancels,
            policy=run.retry,
            attempt=run.attempt,
            now_ms=now_ms,
        )
        extra: tuple[str, TimerRequest | DeadLetter] | None = None
        if verdict.retry_at_ms is not None:
            extra = (self.outbox.topics.timers, retry_timer(run, verdict.retry_at_ms, now_ms))
            self.tally.add(metrics.runs_finished, "RETRIED", run.target.type)
            tenant = metrics.worker_tenant_label(run.tenant)
            self.tally.add(metrics.worker_tenant_runs, tenant, "RETRIED")
        elif verdict.dead_letter:
            assert verdict.error is not None
            extra = (self.outbox.topics.dlq, self.outbox.run_letter(run, verdict.error))
        output = None if exc.output is None else self.kept_output(pending, exc.output)
        self.outbox.finish(
            pending,
            verdict.status,
            verdict.error,
            next_attempt_ms=verdict.retry_at_ms,
            extra=extra,
            output=output,
        )

    def kept_output(
        self, pending: Pending, output: Output | str | bytes
    ) -> tuple[str, Dropped | None] | None:
        """(text, what was dropped) of what an attempt printed or returned, as it is
        published: at most ``--output-limit`` bytes (``consumers.core.output.kept``)
        with the secret values resolved for the attempt scrubbed and URLs redacted, as
        its error text is (a secret cut at either edge too: ``schemas.redact.scrub``);
        None when there is nothing to keep."""
        found = kept(output, self.output_limit)
        if found is None:
            return None
        text, dropped = found
        clean = redact_text(_scrub(pending, text))
        if clean is text:
            return found
        return fit(clean, self.output_limit, dropped)  # a mask may outgrow what it hides

    def close(self) -> None:
        self.pool.shutdown()
        self.runners.close(self.executors)


def _scrub(pending: Pending, text: str) -> str:
    """``text`` about an attempt without the secret values resolved for it: every error
    text and log line of an attempt passes here before it is published or logged."""
    return text if pending.context is None else pending.context.revealed.scrub(text)


def _execute(executor: Executor, target: Target, context: RunContext) -> Result:
    """What a run thread calls: the attempt, unless it was cancelled or ran out of time
    while it waited for a thread (then it never reaches the target)."""
    if context.cancelled.is_set():
        raise Cancelled("cancelled before it started")
    if context.remaining() <= 0:
        raise TimedOut("timed out before it started (every run thread was busy)")
    return executor.execute(target, context)
