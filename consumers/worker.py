"""The worker: executes run requests at least once, with one visible effect per run id.

One process runs one ``Worker``: a member of the consumer group ``<prefix>.workers`` on
``runs.high``, ``runs.normal`` and ``runs.low`` (cooperative-sticky, manual commits).

- **Concurrency.** Up to ``concurrency`` attempts run at once in a thread pool and finish
  in any order; a partition's committed offset never passes a run that has not finished
  (``consumers.core.offsets``). Fetched runs wait in one backlog per priority; the
  worker reads only what the backlogs have room for, a backlog that overflows anyway
  pauses its partitions, and polling goes on, so a long run never breaks group
  membership.
- **Priority.** Starts take high first, then normal, then low; every ``low_share``-th
  start goes to the lowest non-empty backlog, so low priority is never starved.
- **Dedup.** For each runs partition it owns, a worker also reads the same partition of
  ``history`` (same key, same partition count) and remembers final outcomes by run id
  (``consumers.core.dedup``: a day, at most ``dedup_capacity`` run ids).
  A run already settled, or an attempt already finished, is not executed again: it is
  recorded DUPLICATE. Runs that were already on the partition when it was assigned,
  and runs flagged ``possible_duplicate``, wait until that history partition is read
  up to its end as of the assignment: an earlier owner published what it executed
  before the partition moved, and what this worker executed it knows already.
- **Cancellation.** Every worker reads all of ``control`` (the last day of it on
  start): a cancelled run that is running is stopped (CANCELED), one not started yet
  never starts.
- **Outcomes** go to ``history``: STARTED, then SUCCEEDED, FAILED (with the next
  attempt's time; the retry itself is a TimerRequest on ``timers``, held by the
  scheduler), TIMED_OUT, CANCELED, DEAD_LETTERED (+ a DLQ record) or DUPLICATE.

The commit procedure is ``Worker.settle``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from queue import Empty, SimpleQueue
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition

from consumers.core.backoff import next_attempt_due
from consumers.core.dedup import Dedup
from consumers.core.offsets import OffsetTracker
from consumers.executors.base import (
    Cancelled,
    ExecutionFailed,
    Executor,
    RunContext,
    TargetInvalid,
    TimedOut,
)
from consumers.executors.http import HttpExecutor
from consumers.executors.kafka import KafkaExecutor
from consumers.executors.pool import Done, RunPool
from consumers.executors.python import PythonExecutor
from consumers.executors.shell import ShellExecutor
from cronstream import metrics
from cronstream.connect import group_consumer, kafka_consumer, kafka_producer
from cronstream.records import (
    consumer_lag,
    dead_letter,
    dead_letter_for,
    is_record,
    partition_names,
)
from cronstream.settings import Settings
from producers.client import watermarks
from producers.publisher import Publisher
from schemas.catalog import Topics
from schemas.events import (
    EPOCH,
    ControlCommand,
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
    TimerReason,
    TimerRequest,
    Trigger,
    from_ms,
    run_headers,
    text_headers,
    to_ms,
)
from schemas.registry import RegistryClient
from schemas.serde import Codec, DecodeError
from schemas.templates import OutcomeTemplate

log = logging.getLogger("cronstream.worker")
Headers = list[tuple[str, bytes]]
STAGE = "worker"
DAY_MS = 86_400_000
# History is read from this long before the oldest run an earlier owner left uncommitted
# (the commit metadata): clock skew, and a flagged re-emission's first emission.
DEDUP_MARGIN_MS = 120_000
ABANDON_AFTER_S = 1.0  # past the deadline, an attempt that ignores its timeout is given up
COMMIT_EVERY_S = 0.2  # flush + asynchronous commit this often (synchronous at handover)
# A step's fixed costs are paid at most this often when there is other work: reading
# ``control``, and fetching while the backlog holds enough to start (each costs about
# 10 us a call, more than a no-op run; a busy worker steps every few microseconds).
INPUT_EVERY_S = 0.01


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    group: str
    name: str = "worker"
    concurrency: int = 32
    low_share: int = 8
    grace_s: float = 30.0
    lookback_ms: int = DAY_MS
    http_allow: tuple[str, ...] = ()
    shell_allow: tuple[str, ...] = ()
    session_timeout_ms: int = 10_000
    dedup_capacity: int = 2_000_000


@dataclass(slots=True, eq=False)
class Pending:
    """A run request read from Kafka and not yet settled."""

    topic: str
    partition: int
    offset: int
    run: RunRequest
    tracker: OffsetTracker  # its partition's, as of when it was read
    history_needed: int | None = None  # history offset to have read before deciding
    context: RunContext | None = None
    started: float = 0.0
    outcome: list[tuple[bytes, Headers]] = field(default_factory=list)  # encoded, unpublished
    template: OutcomeTemplate | None = None  # what its outcomes have in common, encoded
    headers: Headers | None = None  # its outcomes' headers but the status (the last one)
    extra: list[tuple[str, TimerRequest | DeadLetter]] = field(default_factory=list)


class Worker:
    def __init__(self, settings: Settings, config: WorkerConfig) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self.codec = Codec(RegistryClient(settings.registry_url))
        # Delivery is checked by flushing before each commit (``settle``, every
        # COMMIT_EVERY_S); a report per record would cost more than the record. The
        # flush sends at once, so a longer linger only makes fewer, larger requests
        # (STARTED records keep their produce time as timestamp).
        tuned: dict[str, Any] = {"delivery.report.only.error": True, "linger.ms": 25}
        self.publisher = Publisher(settings, codec=self.codec, serve_each=False, **tuned)
        self._outcome_prefix = self.codec.wire_prefix(self.topics.history, RunOutcome)
        self.priority_of = {self.topics.runs(p): p for p in Priority}
        self.backlog: dict[Priority, deque[Pending]] = {p: deque() for p in Priority}
        self.paused: set[Priority] = set()
        self.running: set[Pending] = set()
        self.running_ids: dict[str, Pending] = {}
        self.finished: SimpleQueue[Done[Pending]] = SimpleQueue()
        self.done: list[Pending] = []  # finished, records not published yet
        self.published: list[Pending] = []  # records published, not flushed yet
        self.held: list[Pending] = []  # outcomes waiting for their timer/DLQ record's flush
        self._next_commit = 0.0
        self._next_input = 0.0
        self._stop_deadline: float | None = None  # set by ``drain``
        self._next_deadline_check = 0.0
        self.trackers: dict[tuple[str, int], OffsetTracker] = {}
        self.replay_until: dict[tuple[str, int], tuple[int, int]] = {}
        self.replaying: set[tuple[str, int]] = set()  # runs before the high mark unread
        # History partitions read for dedup: the next offset to read, where reading
        # began, how far it must go (the end as of the assignment), which are assigned.
        self.history_read: dict[int, int] = {}
        self.history_from: dict[int, int] = {}
        self.history_until: dict[int, int] = {}
        self.history_assigned: set[int] = set()
        self.dedup = Dedup(config.lookback_ms, config.dedup_capacity, now_ms=_now_ms())
        self.cancels: dict[str, int] = {}
        self.starts = 0
        self.tally = metrics.Tally()
        # Runs read ahead of execution: enough to choose by priority, and to go on
        # starting runs while a paused priority is fetched again.
        self._backlog_limit = max(512, 8 * config.concurrency)
        self._maintenance = 0.0
        self.pool = RunPool(config.concurrency, self.finished)
        self._target_producer = kafka_producer(settings)
        self.executors: dict[str, Executor] = {
            "http": HttpExecutor(allow=config.http_allow),
            "kafka": KafkaExecutor(self._target_producer),
            "python": PythonExecutor(),
            "shell": ShellExecutor(enabled=bool(config.shell_allow), allowlist=config.shell_allow),
        }
        self.consumer = group_consumer(
            settings,
            group=config.group,
            name=config.name,
            session_timeout_ms=config.session_timeout_ms,
            # Prefetch a few MB at most, and fetch again soon once there is room (the
            # default backoff is a second; a parked fetch waits for data this long).
            **{
                "queued.max.messages.kbytes": 4096,
                "fetch.queue.backoff.ms": 20,
                "fetch.wait.max.ms": 50,
            },
        )
        self.history = kafka_consumer(settings, **{"group.id": f"{config.group}.history"})
        self.control = kafka_consumer(settings, **{"group.id": f"{config.group}.control"})
        self._control_next = 0  # the next control offset to read
        self._assign_control()
        self.consumer.subscribe(
            list(self.priority_of),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    # -- ownership ----------------------------------------------------------------------
    def _on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        now = _now_ms()
        # New partitions of a paused priority would be fetched freely: resume that
        # priority instead (``_flow_control`` pauses all of it again if it overflows).
        for priority in {self.priority_of[tp.topic] for tp in partitions} & self.paused:
            self.consumer.resume([TopicPartition(t, p) for (t, p) in self.trackers
                                  if self.priority_of.get(t) is priority])  # fmt: skip
            self.paused.discard(priority)
        history_ends: dict[int, int] = {}
        committed = self.consumer.committed(partitions, timeout=30)
        for tp in committed:
            key, partition = (tp.topic, tp.partition), tp.partition
            self.trackers[key] = OffsetTracker()
            low, high = watermarks(self.consumer, TopicPartition(tp.topic, partition))
            if (tp.offset if tp.offset >= 0 else low) < high:
                self.replaying.add(key)  # until the run at ``high - 1`` is read
            if partition not in history_ends:
                history = TopicPartition(self.topics.history, partition)
                history_ends[partition] = watermarks(self.consumer, history)[1]
            # Runs before ``high`` may have been executed by an earlier owner, which
            # published their outcomes before this assignment: they wait until history
            # is read up to its end as of now (once, not chasing later outcomes), from
            # the time of the oldest run the earlier owner left uncommitted.
            self.replay_until[key] = (high, history_ends[partition])
            since = _metadata_time(tp.metadata)
            floor = now - self.config.lookback_ms
            since = floor if since is None else max(floor, since - DEDUP_MARGIN_MS)
            self._need_history(partition, since, history_ends[partition])
        log.info("assigned %s", partition_names(partitions))

    def _need_history(self, partition: int, since_ms: int, until: int) -> None:
        """Read history partition ``partition`` from ``since_ms`` up to offset ``until``
        (then it is let go: ``_read_history``)."""
        self.history_until[partition] = max(self.history_until.get(partition, 0), until)
        start = min(self._offset_since(self.topics.history, partition, since_ms), until)
        read_from = self.history_from.get(partition)
        if read_from is None or start < read_from:
            self.history_from[partition] = start
            self.history_read[partition] = start
            if partition in self.history_assigned:
                self.history.seek(TopicPartition(self.topics.history, partition, start))
        # else: read from far enough back already; go on from where reading stopped.
        position = self.history_read[partition]
        if partition not in self.history_assigned and position < until:
            self.history.incremental_assign(
                [TopicPartition(self.topics.history, partition, position)]
            )
            self.history_assigned.add(partition)

    def _on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        for queue in self.backlog.values():  # not started: the next owner reads them again
            kept = [p for p in queue if (p.topic, p.partition) not in gone]
            queue.clear()
            queue.extend(kept)
        # Stopping (SIGTERM): ``drain`` already gave running attempts the grace period.
        deadline = self._stop_deadline or time.monotonic() + self.config.grace_s
        while any((p.topic, p.partition) in gone for p in self.running):
            if time.monotonic() > deadline:
                log.warning("revoked with runs still executing; the next owner dedups them")
                break
            self._collect(wait=0.1)
        self.settle(wait=True)
        for key in gone:
            self.trackers.pop(key, None)
            self.replay_until.pop(key, None)
            self.replaying.discard(key)
        still = {p for _, p in self.trackers}
        dropped = [p for p in self.history_read if p not in still]
        self._let_go_of_history([p for p in dropped if p in self.history_assigned])
        for p in dropped:
            del self.history_read[p], self.history_from[p], self.history_until[p]
        log.info("revoked %s", partition_names(partitions))

    def _on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        log.warning("partitions lost: %s", partition_names(partitions))
        self._on_revoke(consumer, partitions)

    def _assign_control(self) -> None:
        """All of ``control`` from ``lookback_ms`` ago, read up to its end before any run
        starts: recent cancels are honoured."""
        topic = self.topics.control
        start = self._offset_since(topic, 0, _now_ms() - self.config.lookback_ms)
        self.control.assign([TopicPartition(topic, 0, start)])
        self._control_next = start
        end = watermarks(self.consumer, TopicPartition(topic, 0))[1]
        deadline = time.monotonic() + 60
        while self._control_next < end:
            if time.monotonic() > deadline:
                log.warning("control not read to its end in 60 s; going on reading it")
                break
            self._read_control(timeout=0.1)

    def _offset_since(self, topic: str, partition: int, since_ms: int) -> int:
        """The first offset written at or after ``since_ms`` (the end if none was)."""
        wanted = TopicPartition(topic, partition, since_ms)
        located = self.consumer.offsets_for_times([wanted], timeout=30)[0].offset
        if located >= 0:
            return int(located)
        return watermarks(self.consumer, TopicPartition(topic, partition))[1]

    # -- the loop -----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                self.step()
            self.drain()
        finally:
            self.close()

    def step(self) -> None:
        """One iteration: read side topics, fetch, start what fits, settle what finished.

        It waits only when it has nothing to do: for input when nothing runs or waits;
        otherwise (no input, no start, no completion) up to 5 ms for a completion, or
        for history when the backlog waits for it. Reading ``control``, applying the
        run counters and fetching while the backlog can fill the free slots happen at
        most every INPUT_EVERY_S: a busy worker steps once per run or two, and those
        calls cost more than a no-op run."""
        now = time.monotonic()
        due = now >= self._next_input
        if due:
            self._next_input = now + INPUT_EVERY_S
            self._read_control()
            self.tally.apply()  # the run counters, in bulk
        self._read_history()
        capacity = self.config.concurrency - len(self.running)
        backlog = sum(len(q) for q in self.backlog.values())
        # Read only what the backlog has room for, but poll at least every
        # INPUT_EVERY_S (membership, rebalances); a priority whose backlog overflows
        # anyway is paused.
        fetch = max(1, self._backlog_limit - backlog)
        messages: list[Message] = []
        if not self.running and not backlog:
            # Idle: wait for the first run (a batch call would wait for a full batch).
            first = self.consumer.poll(0.1)
            if first is not None:
                messages.append(first)
                fetch -= 1
        if fetch > 0 and (due or backlog < capacity):
            messages.extend(self.consumer.consume(num_messages=fetch, timeout=0))
        for msg in messages:
            self._accept(msg)
        started = self._start_some(capacity) if capacity > 0 else 0
        if messages or due:
            self._flow_control()
        completed = self._collect(wait=0)
        if not (messages or started or completed):
            if self.running:
                self._collect(wait=0.005)
            else:  # the backlog waits for history
                self._read_history(timeout=0.005)
        self.settle()
        if time.monotonic() >= self._maintenance:
            self._maintain()

    def drain(self) -> None:
        """SIGTERM: stop fetching, let running attempts finish within the grace period."""
        deadline = self._stop_deadline = time.monotonic() + self.config.grace_s
        while self.running and time.monotonic() < deadline:
            self._read_control()
            self._collect(wait=0.1)
            self.settle()
        if self.running:
            log.warning("%d runs still executing after the grace period", len(self.running))

    def close(self) -> None:
        try:
            self.settle(wait=True)
        finally:
            self.tally.apply()
            self.consumer.close()
            self.history.close()
            self.control.close()
            self.pool.shutdown()
            self.publisher.close()
            self._target_producer.flush(10)
            http = self.executors["http"]
            if isinstance(http, HttpExecutor):
                http.close()

    # -- input --------------------------------------------------------------------------
    def _accept(self, msg: Message) -> None:
        if not is_record(msg):
            return
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        tracker = self.trackers.get((topic, partition))
        if tracker is None:
            return
        tracker.start(offset, msg.timestamp()[1])
        try:
            run = self.codec.decode_run(msg.value())
        except DecodeError as exc:
            pending = Pending(topic, partition, offset, _placeholder(msg), tracker)
            letter = dead_letter_for(msg, stage=STAGE, reason=f"undecodable run: {exc}")
            pending.extra.append((self.topics.dlq, letter))
            self.done.append(pending)
            return
        pending = Pending(topic, partition, offset, run, tracker)
        runs_high, history_end = self.replay_until.get((topic, partition), (0, 0))
        if offset >= runs_high - 1:
            self.replaying.discard((topic, partition))
        if offset < runs_high or run.possible_duplicate:
            # An earlier owner may have executed it (or, when flagged, the run's first
            # emission, earlier on this partition): it published the outcome before
            # this assignment. What this worker executed itself, ``dedup`` knows.
            pending.history_needed = history_end
        self.backlog[self.priority_of[topic]].append(pending)

    def _let_go_of_history(self, partitions: list[int]) -> None:
        if partitions:
            self.history.incremental_unassign(
                [TopicPartition(self.topics.history, p) for p in partitions]
            )
            self.history_assigned.difference_update(partitions)

    def _read_history(self, timeout: float = 0) -> None:
        if not self.history_assigned:
            return
        for msg in self.history.consume(num_messages=5000, timeout=timeout):
            if not is_record(msg):
                continue
            self.history_read[msg.partition() or 0] = (msg.offset() or 0) + 1
            h = text_headers(msg.headers())
            try:
                self.dedup.note(h["run_id"], int(h["attempt"]), h["status"])
            except (KeyError, ValueError):
                continue  # not a cronstream outcome record
        self._let_go_of_history(
            [p for p in self.history_assigned if self.history_read[p] >= self.history_until[p]]
        )

    def _read_control(self, timeout: float = 0) -> None:
        for msg in self.control.consume(num_messages=1000, timeout=timeout):
            if not is_record(msg):
                continue
            self._control_next = (msg.offset() or 0) + 1
            try:
                command = self.codec.decode(msg.value(), ControlCommand)
            except DecodeError as exc:
                log.warning("ignoring undecodable control record: %s", exc)
                continue
            self.cancels[command.run_id] = to_ms(command.issued_at)
            running = self.running_ids.get(command.run_id)
            if running is not None and running.context is not None:
                running.context.cancelled.set()

    # -- starting -----------------------------------------------------------------------
    def _next(self) -> Pending | None:
        order = [Priority.HIGH, Priority.NORMAL, Priority.LOW]
        self.starts += 1
        if self.starts % self.config.low_share == 0:
            order.reverse()  # the lowest non-empty backlog gets this start
        for priority in order:
            queue = self.backlog[priority]
            if queue and self._history_ready(queue[0]):
                return queue.popleft()
        return None

    def _history_ready(self, pending: Pending) -> bool:
        needed = pending.history_needed
        return needed is None or self.history_read.get(pending.partition, -1) >= needed

    def _start_some(self, capacity: int) -> int:
        """Start up to ``capacity`` runs; returns how many left the backlog."""
        taken = 0
        while capacity > 0:
            pending = self._next()
            if pending is None:
                break
            taken += 1
            run = pending.run
            now_ms = _now_ms()
            if run.run_id in self.cancels:
                self._finish(pending, RunStatus.CANCELED, "cancelled before it started")
                continue
            if run.run_id in self.running_ids or self.dedup.seen(run.run_id, run.attempt):
                self._finish(pending, RunStatus.DUPLICATE, "already executed (see history)")
                continue
            executor = self.executors.get(run.target.type)
            context = RunContext(
                run_id=run.run_id, job_id=run.job_id, attempt=run.attempt,
                scheduled_at=run.scheduled_at, payload=run.payload, tenant=run.tenant,
                deadline=time.monotonic() + run.timeout_ms / 1000,
            )  # fmt: skip
            pending.context = context
            pending.started = time.monotonic()
            self._publish_outcome(pending, RunStatus.STARTED, None, final=False)
            self.tally.add(metrics.runs_started, run.target.type)
            metrics.fire_to_start.observe(max(0, now_ms - to_ms(run.fired_at)) / 1000)
            if executor is None:
                self._fail(pending, TargetInvalid(f"unknown target type {run.target.type!r}"))
                continue
            self.running.add(pending)
            self.running_ids[run.run_id] = pending
            self.pool.submit(pending, _execute, executor, run.target, context)
            capacity -= 1
        return taken

    def _flow_control(self) -> None:
        """Pause a priority whose backlog overflows (every slot busy with long runs while
        polling goes on reads one run per step); resume it once the backlog is back to
        what fetching fills. Pausing drops what librdkafka prefetched, so it is kept for
        that case only."""
        limit = self._backlog_limit
        for priority, queue in self.backlog.items():
            if priority not in self.paused and len(queue) < 2 * limit:
                continue
            parts = [TopicPartition(t, p) for (t, p) in self.trackers
                     if self.priority_of.get(t) is priority]  # fmt: skip
            if not parts:
                continue
            if priority not in self.paused:
                self.consumer.pause(parts)
                self.paused.add(priority)
            elif len(queue) < limit:
                self.consumer.resume(parts)
                self.paused.discard(priority)

    # -- finishing ----------------------------------------------------------------------
    def _collect(self, wait: float) -> int:
        """Finish the attempts that completed (waiting up to ``wait`` s for one), and
        give up on those that ignore their deadline. Returns how many finished."""
        finished = self.finished
        block = bool(wait and self.running)
        count = 0
        while True:
            try:
                pending, detail, error = (
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
            context = pending.context
            assert context is not None
            if isinstance(error, ExecutionFailed):
                self._fail(pending, error)
                continue
            if error is not None:
                raise error  # an executor's bug, not the target's failure
            if context.cancelled.is_set() and pending.run.run_id in self.cancels:
                self._finish(pending, RunStatus.SUCCEEDED, detail + " (cancel came late)")
            else:
                self._finish(pending, RunStatus.SUCCEEDED, detail)
        now = time.monotonic()
        if now >= self._next_deadline_check:
            self._next_deadline_check = now + 0.1
            for pending in list(self.running):
                context = pending.context
                assert context is not None
                if now > context.deadline + ABANDON_AFTER_S:
                    # The executor ignores its deadline (a python callable): give up on it.
                    context.cancelled.set()
                    self.running.remove(pending)
                    del self.running_ids[pending.run.run_id]
                    self._fail(pending, TimedOut("timed out; the callable did not stop"))
                    count += 1
                    # Its thread stays stuck in the call: another takes its place, up to
                    # twice the concurrency in all.
                    if len(self.pool) < 2 * self.config.concurrency:
                        self.pool.add_thread()
                    else:
                        log.warning("%d run threads, many stuck in calls given up on: "
                                    "starts may wait", len(self.pool))  # fmt: skip
            metrics.in_flight.set(len(self.running))
        return count

    def _fail(self, pending: Pending, exc: ExecutionFailed) -> None:
        run = pending.run
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, Cancelled) or (
            pending.context is not None and pending.context.cancelled.is_set()
            and run.run_id in self.cancels
        ):  # fmt: skip
            self._finish(pending, RunStatus.CANCELED, error)
            return
        status = RunStatus.TIMED_OUT if isinstance(exc, TimedOut) else RunStatus.FAILED
        due = next_attempt_due(run.retry, run.attempt, _now_ms()) if exc.retriable else None
        if due is None:
            # Out of attempts: DEAD_LETTERED. Hopeless from the start (unknown target
            # type, refused address, HTTP 404): FAILED without a next attempt. Both leave
            # a DLQ record with the error.
            if exc.retriable:
                final, why = RunStatus.DEAD_LETTERED, f"{error} (no attempts left)"
            else:
                final, why = RunStatus.FAILED, f"{error} (not retried: retrying cannot help)"
            self._finish(pending, final, why)
            pending.extra.append((self.topics.dlq, self._run_letter(run, why)))
            return
        self._publish_outcome(pending, status, error, next_attempt_ms=due)
        retry = replace(
            run, attempt=run.attempt + 1, trigger=Trigger.RETRY, possible_duplicate=False,
            fired_at=from_ms(due),
        )  # fmt: skip
        timer = TimerRequest(
            timer_id=f"{run.run_id}#{retry.attempt}", job_id=run.job_id, due_at=from_ms(due),
            reason=TimerReason.RETRY, created_at=from_ms(_now_ms()), run=retry,
        )  # fmt: skip
        pending.extra.append((self.topics.timers, timer))
        self.tally.add(metrics.runs_finished, "RETRIED", run.target.type)
        self.done.append(pending)

    def _finish(self, pending: Pending, status: RunStatus, detail: str | None) -> None:
        error = None if status is RunStatus.SUCCEEDED else detail
        self._publish_outcome(pending, status, error)
        self.done.append(pending)

    def _publish_outcome(
        self,
        pending: Pending,
        status: RunStatus,
        error: str | None,
        *,
        final: bool = True,
        next_attempt_ms: int | None = None,
    ) -> None:
        run = pending.run
        now_ms = _now_ms()
        started_ms = now_ms - int((time.monotonic() - pending.started) * 1000)
        ran = pending.started > 0 and status is not RunStatus.STARTED
        template = pending.template
        if template is None:
            template = pending.template = OutcomeTemplate(
                run_id=run.run_id, job_id=run.job_id, tenant=run.tenant, attempt=run.attempt,
                trigger=run.trigger, scheduled_ms=to_ms(run.scheduled_at),
                target_type=run.target.type, worker=self.config.name,
            )  # fmt: skip
        value = self._outcome_prefix + template.encode(
            status, now_ms,
            started_ms=started_ms if pending.started else None,
            finished_ms=now_ms if ran else None,
            duration_ms=now_ms - started_ms if ran else None,
            error=error[:2000] if error else None,
            next_attempt_ms=next_attempt_ms,
        )  # fmt: skip
        headers = _headers(pending, status)
        if final:
            pending.outcome.append((value, headers))
            self.dedup.note(run.run_id, run.attempt, status.value)
            self.tally.add(metrics.runs_finished, status.value, run.target.type)
            if ran:
                metrics.run_duration.observe((now_ms - started_ms) / 1000)
        else:
            self.publisher.produce_raw(self.topics.history, run.job_id, value, headers)

    def settle(self, *, wait: bool = False) -> None:
        """Make finished runs durable and move the committed offsets. In order:

        1. Publish each finished run's records: its outcome; or, for a run that leaves a
           retry timer or a DLQ record, that record, its outcome waiting for step 2.
        2. Flush: every record published so far is acknowledged by Kafka. A failed
           delivery raises here, before anything is committed. Then publish the
           outcomes that waited, and flush again: an outcome is what dedup trusts, so
           it is never durable without the timer or DLQ record that goes with it.
        3. Commit, per partition, the first offset not settled yet (never past a run
           whose records were not flushed), with the time of that run as metadata.

        Steps 2 and 3 run every COMMIT_EVERY_S (asynchronous commit), and at once with
        ``wait`` (synchronous commit: a handover, a shutdown).

        A crash before step 3 leaves the runs uncommitted: another worker reads them
        again, finds their outcomes in history, and records DUPLICATE instead of
        executing them a second time.
        """
        # 1. publish
        for pending in self.done:
            if pending.extra:
                for topic, event in pending.extra:
                    self.publisher.publish(topic, event)
                self.held.append(pending)
            else:
                self._produce_outcomes(pending)
        self.published.extend(self.done)
        self.done = []
        now = time.monotonic()
        if not wait and (now < self._next_commit or not self.published):
            return
        self._next_commit = now + COMMIT_EVERY_S
        # 2. flush
        self.publisher.flush()
        if self.held:
            for pending in self.held:
                self._produce_outcomes(pending)
            self.held = []
            self.publisher.flush()
        # 3. commit
        touched = set()
        for pending in self.published:
            key = (pending.topic, pending.partition)
            # A run still executing when its partition was revoked may finish after the
            # partition came back: the new tracker is not its (the run is read again).
            if self.trackers.get(key) is pending.tracker:
                pending.tracker.finish(pending.offset)
                touched.add(key)
        self.published = []
        offsets = []
        for topic, partition in touched:
            tracker = self.trackers[(topic, partition)]
            point = tracker.commit_point()
            if point is not None:
                # The metadata dates the oldest run left unsettled: a next owner reads
                # history for dedup from then on (``_on_assign``).
                since = str(tracker.commit_time())
                offsets.append(TopicPartition(topic, partition, point, metadata=since))
        if not offsets:
            return
        try:
            if wait:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            log.warning("commit refused (%s); those runs will be read again and deduped", exc)

    def _produce_outcomes(self, pending: Pending) -> None:
        history, key = self.topics.history, pending.run.job_id
        for value, headers in pending.outcome:
            self.publisher.produce_raw(history, key, value, headers)

    # -- bad input and housekeeping -----------------------------------------------------
    def _run_letter(self, run: RunRequest, reason: str) -> DeadLetter:
        return dead_letter(
            stage=STAGE, reason=reason, topic=self.topics.runs(run.priority), partition=-1,
            offset=-1, job_id=run.job_id, run_id=run.run_id, attempt=run.attempt,
        )  # fmt: skip

    def _maintain(self) -> None:
        self._maintenance = time.monotonic() + 5
        now_ms = _now_ms()
        # While runs that may be replays are unread or wait for history, everything read
        # from history stays: dropping it would let them execute again.
        waiting = any(p.history_needed is not None for q in self.backlog.values() for p in q)
        hold = bool(self.replaying or self.history_assigned) or waiting
        forgotten = self.dedup.prune(now_ms, hold=hold)
        if forgotten:
            if self.dedup.forgotten == forgotten:  # the first time
                log.warning(
                    "dedup holds more than --dedup-capacity %d run ids: forgetting the "
                    "oldest before the %d s lookback (a flagged re-emission of one of them "
                    "executes again; counted in cronstream_worker_dedup_forgotten_total)",
                    self.config.dedup_capacity, self.config.lookback_ms // 1000,
                )  # fmt: skip
            metrics.dedup_forgotten.inc(forgotten)
        metrics.dedup_run_ids.set(len(self.dedup))
        cut = now_ms - self.config.lookback_ms
        self.cancels = {k: v for k, v in self.cancels.items() if v >= cut}
        owned = [TopicPartition(t, p) for (t, p) in self.trackers]
        for tp, lag in consumer_lag(self.consumer, owned):
            metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(lag)


def _execute(executor: Executor, target: Target, context: RunContext) -> str:
    """What a run thread calls: the attempt, unless it was cancelled or ran out of time
    while it waited for a thread (then it never reaches the target)."""
    if context.cancelled.is_set():
        raise Cancelled("cancelled before it started")
    if context.remaining() <= 0:
        raise TimedOut("timed out before it started (every run thread was busy)")
    return executor.execute(target, context)


def _headers(pending: Pending, status: RunStatus) -> Headers:
    """The readable headers of an outcome of ``pending``'s attempt (``run_headers``; all
    but the status, which comes last, are built once per attempt)."""
    if pending.headers is None:
        run = pending.run
        headers = run_headers(
            "RunOutcome", run_id=run.run_id, job_id=run.job_id,
            scheduled_at=run.scheduled_at, attempt=run.attempt, status=status.value,
        )  # fmt: skip
        assert headers[-1][0] == "status", headers
        pending.headers = headers[:-1]
        return headers
    return [*pending.headers, ("status", status.value.encode())]


def _placeholder(msg: Message) -> RunRequest:
    """Stands in for a run that could not be decoded (only its offset matters)."""
    key = msg.key()
    job = key.decode("utf-8", "replace") if isinstance(key, bytes) else "?"
    return RunRequest(run_id=f"{job}@undecodable", job_id=job, scheduled_at=EPOCH,
                      fired_at=EPOCH, target=Target(type="none"))  # fmt: skip


def _metadata_time(metadata: str | None) -> int | None:
    """The timestamp a worker's commit left in the offset metadata (see ``settle``)."""
    try:
        return int(metadata) if metadata else None
    except ValueError:
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)
