"""The worker's outbox: what finished runs leave behind (outcomes, what an attempt printed
or returned, retry timers, dead letters, and the records of the outcome observers:
``consumers.worker.observers``), made durable before any offset moves past them.
``Outbox.settle`` is the worker's one commit procedure."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple, Protocol, overload

from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.core.output import Dropped
from cronstream.consumers.worker.observers import OutcomeObserver, Record
from cronstream.consumers.worker.pending import UNDECODABLE, Pending, outcome_headers
from cronstream.runtime import metrics
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.member import commit
from cronstream.runtime.kafka.publisher import Mark, Publisher
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    DeadLetter,
    RunOutcome,
    RunRequest,
    RunStatus,
    from_ms,
    run_identity,
)
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from cronstream.schemas.templates import LetterWriter, OutcomeTemplate

log = logging.getLogger("cronstream.worker")
STAGE = "worker"
COMMIT_EVERY_S = 0.2  # flush + asynchronous commit this often (synchronous at handover)


# Delivery is checked without waiting (``settle``, every COMMIT_EVERY_S): what was
# published since the last round is closed under a mark (``Publisher.mark``: a delivery
# report per record counts it), and runs are committed once their mark is answered in
# full. Waiting in the loop for a flush held every start for the ack's round trip each
# round, and for up to a second per round while a partition of history changed leader
# (a broker lost: seconds of no start at all, for every destination).
# A broker outage must not fail a delivery: librdkafka keeps every record and goes on
# trying (message.timeout.ms 0: no limit), and ``settle`` commits nothing meanwhile. A
# worker fetches nothing while the broker is away, so what waits is bounded by what was
# executing.
OUTBOX_PRODUCER: dict[str, Any] = {"linger.ms": 25, "message.timeout.ms": 0}
WARN_AFTER_S = 5.0  # records unacknowledged this long: logged (every WARN_AFTER_S)


class _Round(NamedTuple):
    """What one round of ``settle`` published, under its mark."""

    mark: Mark
    ready: list[Pending]  # runs settled once the mark is answered in full
    held: list[Pending]  # runs whose outcomes are published then (their timer is durable)
    closed: float  # when (monotonic)


def outbox_publisher(settings: Settings, codec: Codec) -> Publisher:
    """The publisher an ``Outbox`` needs: its records counted under marks, served by
    ``settle``."""
    return Publisher(settings, codec=codec, serve_each=False, track_acks=True, **OUTBOX_PRODUCER)


class OffsetCommitter(Protocol):
    """What the outbox asks of the worker's group consumer (confluent-kafka's ``Consumer``
    is one; unit tests pass a fake that records the commits): commit offsets, without
    waiting or waiting for the answer (through ``runtime.kafka.member.commit``)."""

    @overload
    def commit(self, *, offsets: list[TopicPartition], asynchronous: Literal[True]) -> None: ...
    @overload
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]: ...


class Outbox:
    def __init__(
        self,
        publisher: Publisher,
        *,
        topics: Topics,
        name: str,
        consumer: OffsetCommitter,
        trackers: dict[tuple[str, int], OffsetTracker],
        dedup: Dedup,
        tally: metrics.Tally,
        observers: Sequence[OutcomeObserver],
    ) -> None:
        self.topics = topics
        self.publisher = publisher  # ``outbox_publisher``: flushed by ``settle`` only
        self._prefix = publisher.codec.wire_prefix(topics.history, RunOutcome)
        self._dlq = topics.dlq
        self._dlq_prefix = publisher.codec.wire_prefix(self._dlq, DeadLetter)
        self._run_output = topics.run_output
        self._letters = LetterWriter(STAGE)
        self.name = name
        self.consumer = consumer
        self.trackers = trackers  # the worker's: partition -> its runs' offsets
        self.dedup = dedup
        self.tally = tally
        self.done: list[Pending] = []  # finished, records not published yet
        # Records that are no usable run, their DLQ records not published yet.
        self.rejected: list[tuple[ConsumedMessage, int, OffsetTracker, str]] = []
        self.published: list[Pending] = []  # records published since the last mark
        self.held: list[Pending] = []  # outcomes waiting for their timer/DLQ record's ack
        self.awaiting: deque[_Round] = deque()  # marks not answered in full, oldest first
        self._warned = 0.0
        self.observers = tuple(observers)  # asked in this order; their records go so
        # Deadline checks answered, with the records the observers left (none: the run
        # succeeded); a run settled by its dead letter alone (``Attempts._unstartable``).
        self.checked: list[tuple[Pending, Sequence[Record]]] = []
        self._next_commit = 0.0

    # -- what a run leaves ------------------------------------------------------------
    def announce(self, pending: Pending, now_ms: int) -> None:
        """Publish the STARTED outcome of ``pending``'s attempt (not a settlement): at
        its start, or once it has run ``--started-after`` (``Attempts``)."""
        pending.announced = True
        self._outcome(pending, RunStatus.STARTED, None, now_ms, final=False)

    def finish(
        self,
        pending: Pending,
        status: RunStatus,
        error: str | None,
        *,
        next_attempt_ms: int | None = None,
        extra: Record | None = None,
        output: tuple[str, Dropped | None] | None = None,
    ) -> None:
        """Settle ``pending`` with its final outcome for this attempt (and a retry timer
        or a DLQ record that must be durable first, then the observers' records).
        ``output``: (text, what was dropped) the attempt printed or returned, redacted
        (``Attempts.kept_output``): a RunOutput published with the outcome."""
        now_ms = int(time.time() * 1000)
        self._outcome(pending, status, error, now_ms, next_attempt_ms=next_attempt_ms)
        if output is not None:
            pending.output = self._output(pending, status, output, now_ms)
        if extra is not None:
            pending.extra.append(extra)
        retrying = next_attempt_ms is not None
        for observer in self.observers:
            records = observer.settled(pending.run, status, error, retrying=retrying, now_ms=now_ms)
            if records:
                pending.extra.extend(records)
        self.done.append(pending)

    def reject(
        self, msg: ConsumedMessage, offset: int, tracker: OffsetTracker, reason: str
    ) -> None:
        """Settle a consumed record that is not a usable run (``tracker`` has started
        its ``offset``): a DLQ record, no outcome (``settle`` publishes it)."""
        self.rejected.append((msg, offset, tracker, reason))

    def check_deadline(self, pending: Pending, *, running: bool) -> None:
        """Answer a deadline check (``consumers.core.deadlines``) with the observers'
        records (an alert when its run has not succeeded); settled like a run (its
        offset moves once they are flushed)."""
        now_ms = int(time.time() * 1000)
        records: list[Record] = []
        for observer in self.observers:
            records.extend(observer.checked(pending.run, running=running, now_ms=now_ms))
        self.checked.append((pending, records))

    def forget(self, before: datetime) -> None:
        """Let the observers drop what they keep about runs before ``before``."""
        for observer in self.observers:
            observer.forget(before)

    def run_letter(self, run: RunRequest, reason: str) -> DeadLetter:
        """The DLQ record of a run that is given up on."""
        return dead_letter(
            stage=STAGE,
            reason=reason,
            topic=self.topics.runs(run.priority),
            partition=-1,
            offset=-1,
            job_id=run.job_id,
            run_id=run.run_id,
            attempt=run.attempt,
        )

    def _outcome(
        self,
        pending: Pending,
        status: RunStatus,
        error: str | None,
        now_ms: int,
        *,
        final: bool = True,
        next_attempt_ms: int | None = None,
    ) -> None:
        run = pending.run
        started_ms = pending.started_ms
        ran = started_ms > 0 and status is not RunStatus.STARTED
        template = pending.template
        if template is None:
            template = pending.template = OutcomeTemplate(
                **run_identity(run),
                trigger=run.trigger,
                target_type=run.target.type,
                worker=self.name,
            )
        value = self._prefix + template.encode(
            status,
            now_ms,
            started_ms=started_ms or None,
            finished_ms=now_ms if ran else None,
            duration_ms=max(0, now_ms - started_ms) if ran else None,
            error=error[:2000] if error else None,
            next_attempt_ms=next_attempt_ms,
        )
        headers = outcome_headers(pending, status)
        if final:
            pending.outcome.append((value, headers))
            self.dedup.note(run.run_id, run.attempt, status.value)
            self.tally.add(metrics.runs_finished, status.value, run.target.type)
            tenant = metrics.worker_tenant_label(run.tenant)
            self.tally.add(metrics.worker_tenant_runs, tenant, status.value)
            metrics.worker_failure_streaks.note(run.job_id, status.value)
            if ran:
                metrics.run_duration.observe((now_ms - started_ms) / 1000)
        else:
            self.publisher.produce_raw(self.topics.history, run.job_id, value, headers)

    def _output(
        self,
        pending: Pending,
        status: RunStatus,
        output: tuple[str, Dropped | None],
        now_ms: int,
    ) -> tuple[bytes, list[tuple[str, bytes]]]:
        """The encoded RunOutput of ``pending``'s attempt (its value and headers)."""
        run = pending.run
        record = RunOutput(
            **run_identity(run),
            status=status.value,
            recorded_at=from_ms(now_ms),
            output=output[0],
            dropped=output[1],
            target_type=run.target.type,
            worker=self.name,
        )
        return self.publisher.codec.encode(self._run_output, record), record.headers()

    # -- the commit procedure -----------------------------------------------------------
    def settle(self, *, wait: bool = False) -> None:
        """Make finished runs durable and move the committed offsets. In order:

        1. Publish each finished run's records: its outcome (and its output, when it
           has one); or, for a run that leaves a retry timer or a DLQ record, that
           record, its outcome (and output) waiting for step 2. A record that is no
           usable run leaves its DLQ record alone.
        2. Acknowledged: every record published up to a mark is acknowledged by Kafka
           (a delivery report per record counts them; nothing waits). A failed
           delivery raises here, before anything is committed. Then publish the
           outcomes that waited, and commit them once their own mark is: an outcome is
           what dedup trusts, so it is never durable without the timer or DLQ record
           that goes with it.
        3. Commit, per partition, the first offset not settled yet (never past a run
           whose records were not acknowledged), with the time of that run as metadata.

        Steps 2 and 3 run every COMMIT_EVERY_S (asynchronous commit), and with ``wait``
        at once, waiting for the acknowledgements (synchronous commit: a handover, a
        shutdown: ``_settle_all``).

        A crash before step 3 leaves the runs uncommitted: another worker reads them
        again, finds their outcomes in history, and records DUPLICATE instead of
        executing them a second time.
        """
        self._publish()
        if wait:
            self._settle_all()
            return
        now = time.monotonic()
        if now < self._next_commit or not (self.published or self.held or self.awaiting):
            return
        self._next_commit = now + COMMIT_EVERY_S
        settled = self._round(now, wait=0.0)
        if self.awaiting:
            self._warn_unanswered(now - self.awaiting[0].closed, now)
        if settled:
            self._commit(settled, wait=False)

    def _round(self, now: float, *, wait: float) -> list[Pending]:
        """Step 2: close what was published since the last round under a mark, wait up
        to ``wait`` s for acknowledgements (0: serve what came), and return the runs of
        every round answered in full, oldest first (a later round is never settled
        before an earlier one). A held run's outcome is published once its round is
        answered: it goes into the next round."""
        if self.published or self.held:
            self.awaiting.append(_Round(self.publisher.mark(), self.published, self.held, now))
            self.published, self.held = [], []
        if wait > 0:
            self.publisher.settled(wait)
        else:
            self.publisher.serve()
        settled: list[Pending] = []
        awaiting, acknowledged = self.awaiting, self.publisher.acknowledged
        while awaiting and acknowledged(awaiting[0].mark):
            answered = awaiting.popleft()
            settled.extend(answered.ready)
            for pending in answered.held:  # 2. their timers and letters are durable
                self._produce_outcomes(pending)
            self.published.extend(answered.held)
        return settled

    def _warn_unanswered(self, age: float, now: float) -> None:
        """Log, every WARN_AFTER_S at most, records unanswered for over WARN_AFTER_S."""
        if age > WARN_AFTER_S and now - self._warned > WARN_AFTER_S:
            self._warned = now
            log.warning(
                "the broker has not acknowledged outcomes of %.0f s ago yet; "
                "committing none of them until it does",
                age,
            )

    def _settle_all(self) -> None:
        """``settle(wait=True)``, at a handover or a stop: a round waiting up to the
        publisher's flush wait for everything published, a second for the outcomes
        that waited for their timer or letter, then a synchronous commit of what Kafka
        acknowledged. What it did not acknowledge in that time (the broker away, a
        partition cut off) stays awaiting, uncommitted, as between rounds: logged, not
        raised. The partitions' next owner reads those runs again and dedups them by
        their outcomes; a later round commits those of partitions still owned once the
        broker answers. (Raised, it ended the worker inside its revoke, with every
        record its producer still held: found by the chaos suite, a partition leader
        cut off.) A record Kafka refused for good still raises, before any commit."""
        wait = self.publisher.flush_wait_s
        settled = self._round(time.monotonic(), wait=wait)
        if self.published:  # the outcomes that waited, published by that round
            settled += self._round(time.monotonic(), wait=wait)
        if self.awaiting:
            waiting = sum(len(r.ready) + len(r.held) for r in self.awaiting)
            log.warning(
                "%d finished runs' records not acknowledged within %.0f s; their runs stay "
                "uncommitted (read again and deduped by the next owner)",
                waiting,
                wait,
            )
        self._commit(settled, wait=True)

    def _publish(self) -> None:
        """Step 1 of ``settle``."""
        if self.rejected:
            self._publish_letters()
        if self.checked:
            for pending, records in self.checked:
                for topic, event in records:
                    self.publisher.publish(topic, event)
                self.published.append(pending)
            self.checked = []
        for pending in self.done:
            if pending.extra:
                for topic, event in pending.extra:
                    self.publisher.publish(topic, event)
                self.held.append(pending)  # its outcome waits for step 2
            else:
                self._produce_outcomes(pending)
                self.published.append(pending)
        self.done = []

    def _publish_letters(self) -> None:
        """Step 1 of ``settle`` for the rejected records: one tight loop, a flood of
        malformed records costs a letter each (``LetterWriter``)."""
        write, produce, published = self._letters.write, self.publisher.produce_raw, self.published
        dlq, prefix, now_ms = self._dlq, self._dlq_prefix, int(time.time() * 1000)
        for msg, offset, tracker, reason in self.rejected:
            topic, partition, key = msg.topic() or "", msg.partition() or 0, msg.key()
            key, body, headers = write(
                reason,
                topic,
                partition,
                offset,
                key if isinstance(key, bytes) else None,
                msg.value(),
                now_ms,
            )
            produce(dlq, key, prefix + body, headers)
            published.append(Pending(topic, partition, offset, UNDECODABLE, tracker))
        self.tally.add(metrics.dead_letters, STAGE, count=len(self.rejected))
        self.rejected = []

    def _produce_outcomes(self, pending: Pending) -> None:
        """The attempt's outcomes, then its output: in one flush, before the commit. (A
        crash between their acknowledgements loses the output, never the outcome: the
        run, read again, is a DUPLICATE and not executed again.)"""
        history, key = self.topics.history, pending.run.job_id
        for value, headers in pending.outcome:
            self.publisher.produce_raw(history, key, value, headers)
        if pending.output is not None:
            self.publisher.produce_raw(self._run_output, key, *pending.output)

    def _commit(self, settled: list[Pending], *, wait: bool) -> None:
        """Step 3 of ``settle``: commit past the runs whose records were acknowledged."""
        touched = set()
        for pending in settled:
            key = (pending.topic, pending.partition)
            # A run still executing when its partition was revoked may finish after the
            # partition came back: the new tracker is not its (the run is read again).
            if self.trackers.get(key) is pending.tracker:
                pending.tracker.finish(pending.offset)
                touched.add(key)
        offsets = []
        for topic, partition in touched:
            tracker = self.trackers[(topic, partition)]
            point = tracker.commit_point()
            if point is not None:
                # The metadata dates the oldest run left unsettled: a next owner reads
                # history for dedup from then on (``Worker._assigned``).
                since = str(tracker.commit_time())
                offsets.append(TopicPartition(topic, partition, point, metadata=since))
        if not offsets:
            return
        commit(
            self.consumer,
            offsets,
            wait=wait,
            log=log,
            then="those runs will be read again and deduped",
        )

    def close(self) -> None:
        self.publisher.close()
