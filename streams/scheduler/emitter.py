"""What the scheduler writes: run requests for due slots and timers, MISSED/SKIPPED
history records for slots a misfire policy does not run, cancels of runs emitted ahead
for jobs paused or deleted since, and dead letters.

Run requests of scheduled slots are encoded from each job's ``RunTemplate`` (the
definition is encoded once, the slot's fields per fire) and produced with no delivery
report wait; ``Checkpointer.checkpoint`` flushes before it commits. Every run request
carries its due time (``due_at``); one emitted ahead of it (the lookahead) also has a
``due_at`` header and is remembered in ``ahead`` until due.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cronstream.runtime import metrics
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    JOB_PAUSED,
    ControlAction,
    ControlCommand,
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    TimerReason,
    TimerRequest,
    Trigger,
    from_ms,
    iso,
)
from cronstream.schemas.headers import run_request_headers
from cronstream.schemas.ids import run_id_for, slot_run_id
from cronstream.schemas.tenancy import OPERATORS
from cronstream.streams.core.ahead import AheadRuns
from cronstream.streams.core.misfire import Action, Fire, Record
from cronstream.streams.scheduler.definitions import Definitions, Prepared

log = logging.getLogger("cronstream.scheduler")
_TRIGGER_BYTES = {t: t.value.encode() for t in Trigger}


def _instant(ms: int) -> bytes:
    """A due time as header bytes, when jitter moved it off its slot (whose bytes the
    slot's run id already made; not cached: jittered due times are all different, and
    they would push the shared slots out of ``slot_text``'s cache)."""
    return iso(from_ms(ms)).encode()


class Emitter:
    def __init__(
        self, publisher: Publisher, *, topics: Topics, definitions: Definitions, name: str
    ) -> None:
        self.topics = topics
        self.publisher = publisher
        self.definitions = definitions
        self.name = name
        self.ahead = AheadRuns()
        # Fires due at or before this were possibly emitted already, ahead of their due
        # time, before a rewind reloaded the partitions (``flag_through``).
        self.flagged_through = 0
        codec = publisher.codec
        self._run_schema = {
            p: codec.writer_id(f"{self.topics.runs(p)}-value", RunRequest) for p in Priority
        }
        self._runs_topic = {p: self.topics.runs(p) for p in Priority}
        # Every other schema it writes, resolved now: from here on emitting never needs
        # the registry (a MISSED record or a dead letter written while it is down).
        codec.writer_id(f"{self.topics.history}-value", RunOutcome)
        codec.writer_id(f"{self.topics.timers}-value", TimerRequest)
        codec.writer_id(f"{self.topics.dlq}-value", DeadLetter)
        codec.writer_id(f"{self.topics.control}-value", ControlCommand)

    def emit(self, actions: list[Action], now: int) -> None:
        """Write what the core decided at ``now``: fires and records."""
        if not actions:
            return
        produce = self.publisher.produce_raw
        prepare = self.definitions.prepare
        skew = metrics.fire_skew.observe
        ahead = self.ahead
        fired: dict[Trigger, int] = {}
        for action in actions:
            if type(action) is Fire:
                if action.timer is not None:
                    self._fire_timer(action, now)
                    continue
                assert action.job is not None
                prepared = prepare(action.job)
                template = prepared.template
                run_id, slot = slot_run_id(action.job_id, action.slot_ms)
                trigger = Trigger(action.trigger)
                due = action.due_ms
                dup = action.possible_duplicate or due <= self.flagged_through
                value = template.encode(
                    self._run_schema[template.priority],
                    run_id,
                    action.slot_ms,
                    now,
                    trigger=trigger,
                    possible_duplicate=dup,
                    due_ms=due,
                )
                early = due > now
                headers = run_request_headers(
                    template.header_job,
                    run_id.encode(),
                    slot,
                    attempt=b"1",
                    trigger=_TRIGGER_BYTES[trigger],
                    possible_duplicate=dup,
                    due_at=(slot if due == action.slot_ms else _instant(due)) if early else None,
                )
                if early:
                    ahead.add(action.job_id, due, run_id)
                produce(self._runs_topic[template.priority], action.job_id, value, headers)
                if prepared.deadline_check is not None:
                    self._deadline(prepared, run_id, action.slot_ms, now)
                fired[trigger] = fired.get(trigger, 0) + 1
                skew(max(0, now - action.due_ms) / 1000)
            else:
                assert type(action) is Record
                self._record(action, now)
        for trigger, count in fired.items():  # one labelled update per batch, not per fire
            metrics.fires.labels(trigger.value).inc(count)

    def _deadline(self, prepared: Prepared, run_id: str, slot_ms: int, now: int) -> None:
        """The timer of a fired run's deadline check, at slot + the job's deadline: due,
        it fires a run request with trigger DEADLINE that the worker owning the job's
        partition answers (alert or not) instead of executing. Written with the run
        request, flushed before the checkpoint that covers the slot. The check and the
        deadline were kept when the job was prepared (``Prepared``): filling in the check
        costs 5 us, decoding the whole definition again for it cost 29 us of the 67 us
        this took (a 200-byte payload, the fake producer)."""
        assert prepared.deadline_check is not None
        assert prepared.deadline_ms is not None
        created = from_ms(now)
        check = replace(
            prepared.deadline_check, run_id=run_id, scheduled_at=from_ms(slot_ms), fired_at=created
        )
        self.publisher.publish(
            self.topics.timers,
            TimerRequest(
                timer_id=f"{run_id}:deadline",
                job_id=check.job_id,
                due_at=from_ms(slot_ms + prepared.deadline_ms),
                reason=TimerReason.DEADLINE,
                created_at=created,
                run=check,
            ),
        )

    def _fire_timer(self, action: Fire, now: int) -> None:
        request: TimerRequest = action.timer.body
        check = request.run.trigger is Trigger.DEADLINE  # its fired_at stays its deadline
        run = replace(
            request.run,
            fired_at=from_ms(action.due_ms if check else now),
            possible_duplicate=request.run.possible_duplicate or action.possible_duplicate,
            due_at=from_ms(action.due_ms),
        )
        self.publisher.publish(self.topics.runs(run.priority), run)
        metrics.fires.labels(run.trigger.value).inc()
        if not check:
            metrics.fire_skew.observe(max(0, now - action.due_ms) / 1000)

    def _record(self, action: Record, now: int) -> None:
        """Slots a misfire policy (or a pause) does not run: MISSED or SKIPPED in history,
        under the job's tenant (the tenant's history and API list them). A summary of
        many slots (``Record.slots``) is one outcome under its first slot's run id; its
        error names the count and the first and last slot, and so do its headers
        ``slots`` and ``last_slot`` (kcat, and the chaos counters, read them)."""
        if action.timer is not None:
            run: RunRequest = action.timer.body.run
            run_id, scheduled, attempt = run.run_id, run.scheduled_at, run.attempt
            trigger, tenant = run.trigger, run.tenant
        else:
            scheduled = from_ms(action.slot_ms)
            run_id = run_id_for(action.job_id, scheduled)
            attempt, trigger = 1, Trigger.SCHEDULE
            tenant = OPERATORS if action.job is None else action.job.tenant
        error, extra = action.reason, []
        if action.slots > 1:
            assert action.last_ms is not None
            last = iso(from_ms(action.last_ms))
            error = (
                f"{action.slots:,} slots from {iso(scheduled)} to {last} not run, "
                f"recorded once here: {error}"
            )
            extra = [("slots", str(action.slots).encode()), ("last_slot", last.encode())]
        outcome = RunOutcome(
            run_id=run_id,
            job_id=action.job_id,
            status=RunStatus(action.status),
            scheduled_at=scheduled,
            recorded_at=from_ms(now),
            attempt=attempt,
            trigger=trigger,
            error=error,
            worker=self.name,
            tenant=tenant,
        )
        topic, publisher = self.topics.history, self.publisher
        publisher.produce_raw(
            topic, outcome.key(), publisher.codec.encode(topic, outcome), outcome.headers() + extra
        )
        metrics.misfires.labels(action.status).inc(action.slots)

    def flag_through(self, due_ms: int) -> None:
        """Every fire due at or before ``due_ms`` is flagged ``possible_duplicate`` from
        now on. A rewind (``Scheduler._rewind``) reloads the partitions from their last
        checkpoint while runs emitted ahead (the lookahead) may already be out: the
        catch-up flags the slots due by now, and this the ones due within the lookahead,
        which the wheel fires again (a broker restart test saw the 40 runs of one slot
        emitted twice, the second unflagged)."""
        self.flagged_through = max(self.flagged_through, due_ms)

    def cancel_ahead(self, job_id: str, reason: str, now: int) -> int:
        """Cancel the runs of ``job_id`` emitted ahead and not due yet (the job was paused
        or deleted since): the worker holding each records it SKIPPED (paused) or
        CANCELED. Returns how many."""
        runs = self.ahead.take(job_id, now)
        for run_id in runs:
            self.publisher.publish(
                self.topics.control,
                ControlCommand(
                    command_id=f"{run_id}:{reason}",
                    action=ControlAction.CANCEL,
                    run_id=run_id,
                    job_id=job_id,
                    issued_at=from_ms(now),
                    reason=reason,
                ),
            )
        if runs:
            log.info(
                "job %r %s: %d runs emitted ahead cancelled",
                job_id,
                "paused" if reason == JOB_PAUSED else "deleted",
                len(runs),
            )
        return len(runs)

    def dead_letter(self, letter: DeadLetter) -> None:
        log.warning(
            "dead-lettering %s/%d@%d: %s",
            letter.source_topic,
            letter.source_partition,
            letter.source_offset,
            letter.reason,
        )
        self.publisher.publish(self.topics.dlq, letter)
