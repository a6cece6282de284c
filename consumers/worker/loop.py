"""The worker's loop and partition ownership: one ``Worker`` per process, a member of
the consumer group ``<prefix>.workers`` on ``runs.high``, ``runs.normal`` and
``runs.low`` (KIP-848's protocol with the broker's range assignor: every worker gets its
share of each priority's partitions, moved incrementally; manual commits). Its parts:

- ``Intake`` (``intake.py``): run requests in, priority backlogs, flow control;
- ``HistoryReplay`` and ``ControlFeed`` (``replay.py``): dedup after an assignment,
  cancels;
- ``Attempts`` (``attempts.py``): the run threads, and the verdict on each attempt
  (``consumers.core.verdict``);
- ``Outbox`` (``outbox.py``): outcomes, retry timers and dead letters published, then
  offsets committed: ``Outbox.settle`` is the commit procedure;
- the outcome observers (``observers/``), registered here (``outcome_observers``):
  what else a settled run tells (flows, deadline alerts).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.core.pacing import pause_s
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.intake import Intake, Key
from cronstream.consumers.worker.lookups import SchemaLookups
from cronstream.consumers.worker.observers import OutcomeObserver
from cronstream.consumers.worker.observers.deadlines import DeadlineAlerts
from cronstream.consumers.worker.observers.flows import FlowNodes
from cronstream.consumers.worker.outbox import Outbox, outbox_publisher
from cronstream.consumers.worker.replay import ControlFeed, HistoryReplay, side_consumer
from cronstream.runtime import metrics, stop
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.member import GroupMember
from cronstream.runtime.kafka.offsets import committed, consumer_lag, watermarks
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.kafka.stall import Backoff, Held
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.events import DeadLetter, RunOutcome, TimerRequest, from_ms
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import AnyEvent

log = logging.getLogger("cronstream.worker")
# History is read from this long before the oldest run an earlier owner left uncommitted
# (the commit metadata): clock skew, and a flagged re-emission's first emission.
DEDUP_MARGIN_MS = 120_000
# A step's fixed costs are paid at most this often when there is other work: reading
# ``control``, and fetching while the backlog holds enough to start (each costs about
# 10 us a call, more than a no-op run; a busy worker steps every few microseconds).
INPUT_EVERY_S = 0.01


class Worker:
    def __init__(
        self, settings: Settings, config: WorkerConfig
    ) -> None:  # long: the worker's parts, wired in the order they use each other
        self.config = config
        topics = Topics(settings)
        codec = Codec(registry_client(settings))
        self.dedup = Dedup(config.lookback_ms, config.dedup_capacity, now_ms=_now_ms())
        observers = outcome_observers(topics, self.dedup, name=config.name)
        _resolve_writers(codec, topics, observers)  # before anything else
        self.trackers: dict[Key, OffsetTracker] = {}
        self.tally = metrics.Tally()
        cancels: dict[str, int] = {}
        cancel_reasons: dict[str, str] = {}
        # Prefetch a few MB at most, and fetch again soon once there is room (the
        # default backoff is a second; a parked fetch waits for data this long).
        prefetch: dict[str, Any] = {
            "queued.max.messages.kbytes": 4096,
            "fetch.queue.backoff.ms": 20,
            "fetch.wait.max.ms": 50,
        }
        # Per topic: each worker gets its share of every priority's partitions (with
        # count balance one of three workers kept all of runs.normal).
        self.member = GroupMember(
            settings,
            config,
            balance="per-topic",
            log=log,
            **prefetch,
        )
        self.consumer = self.member.consumer
        self.outbox = Outbox(
            outbox_publisher(settings, codec),
            topics=topics,
            name=config.name,
            consumer=self.consumer,
            trackers=self.trackers,
            dedup=self.dedup,
            tally=self.tally,
            observers=observers,
        )
        self.attempts = Attempts(
            settings,
            config,
            outbox=self.outbox,
            dedup=self.dedup,
            cancels=cancels,
            tally=self.tally,
            cancel_reasons=cancel_reasons,
        )
        # History's offsets are looked up by its own reader, not the group consumer: a
        # topic the group consumer does not read, asked in its assignment hook, where a
        # stale leader's metadata cannot be asked again (``refresh_metadata``).
        reader = side_consumer(settings, config, "history")
        self.history = HistoryReplay(reader, topic=topics.history, dedup=self.dedup, lookup=reader)
        self.control = ControlFeed(
            side_consumer(settings, config, "control"),
            topic=topics.control,
            codec=codec,
            lookup=self.consumer,
            lookback_ms=config.lookback_ms,
            cancels=cancels,
            on_cancel=self.attempts.cancel,
            reasons=cancel_reasons,
        )
        self.intake = Intake(
            config,
            topics=topics,
            consumer=self.consumer,
            codec=codec,
            trackers=self.trackers,
            history=self.history,
            outbox=self.outbox,
            lookups=SchemaLookups(codec, registry_client(settings)),
        )
        self.stall = Backoff(log, "run requests held, fetching paused until it answers")
        self.held = Held(self.consumer)  # what waits for the registry
        self._next_input = 0.0
        self._stop_deadline: float | None = None  # set by ``drain``
        self._maintenance = 0.0
        self.control.catch_up()
        # Lost: what is settled is committed if the group still lets it.
        self.member.subscribe(
            list(self.intake.priority_of),
            assigned=self._assigned,
            revoking=self._revoking,
            lost=self._revoking,
        )

    # -- ownership ----------------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        now = _now_ms()
        self.intake.resume_gained(partitions)
        history_ends: dict[int, int] = {}
        for tp in committed(self.consumer, partitions):
            partition = tp.partition
            low, high = watermarks(self.consumer, TopicPartition(tp.topic, partition))
            if partition not in history_ends:
                history = TopicPartition(self.history.topic, partition)
                history_ends[partition] = watermarks(self.history.lookup, history)[1]
            # Runs before ``high`` may have been executed by an earlier owner, which
            # published their outcomes before this assignment: they wait until history
            # is read up to its end as of now (once, not chasing later outcomes), from
            # the time of the oldest run the earlier owner left uncommitted.
            self.intake.assigned(
                (tp.topic, partition),
                committed=tp.offset if tp.offset >= 0 else low,
                runs_end=high,
                history_end=history_ends[partition],
            )
            since = _metadata_time(tp.metadata)
            floor = now - self.config.lookback_ms
            since = floor if since is None else max(floor, since - DEDUP_MARGIN_MS)
            self.history.need(partition, since, history_ends[partition])

    def _revoking(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.intake.drop_unstarted(gone)
        self.attempts.drop_unstarted(gone)
        self.held.drop(gone)
        # Stopping (SIGTERM): ``drain`` already gave running attempts the grace period.
        deadline = self._stop_deadline or time.monotonic() + self.config.grace_s
        while any((p.topic, p.partition) in gone for p in self.attempts.running):
            if time.monotonic() > deadline:
                log.warning("revoked with runs still executing; the next owner dedups them")
                break
            self.attempts.collect(wait=0.1)
        self.outbox.settle(wait=True)
        self.intake.forget(gone)
        self.history.keep_only({p for _, p in self.trackers})

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

        It waits when it has little to do: for input when nothing runs or waits; after
        a step that handled few events while runs are under way and none waits for a
        slot, until PACE_S after the step began (``consumers.core.pacing``: events
        gather and the next step takes them together); otherwise (no input, no start,
        no completion) up to 5 ms for a completion, or for history when the backlog
        waits for it. Reading ``control``, applying the run counters and fetching while
        the backlog can fill the free slots happen at most every INPUT_EVERY_S: a busy
        worker steps once per run or two, and those calls cost more than a no-op run."""
        now = time.monotonic()
        due = now >= self._next_input
        if due:
            self._next_input = now + INPUT_EVERY_S
            self.control.read()
            self.tally.apply()  # the run counters, in bulk
        self.history.read()
        attempts, intake = self.attempts, self.intake
        if intake.delayed:
            intake.release_due(time.time() * 1000)
        capacity = self.config.concurrency - len(attempts)
        messages = self._input(due, capacity)
        started = attempts.start_some(capacity, intake.take) if capacity > 0 else 0
        if messages or due:
            intake.flow_control(len(attempts.destinations))
        completed = attempts.collect(wait=0)
        worked = len(messages) + started + completed
        pause = pause_s(
            worked=worked,
            running=len(attempts.running),
            waiting=len(intake),
            began=now,
            now=time.monotonic(),
        )
        if pause:
            time.sleep(pause)  # arrivals and completions gather (consumers.core.pacing)
        if not worked:
            if attempts.running:
                attempts.collect(wait=0.005)
            else:  # the backlog waits for history
                self.history.read(timeout=0.005)
        self.outbox.settle()
        if time.monotonic() >= self._maintenance:
            self._maintain()

    def _input(self, due: bool, capacity: int) -> list[ConsumedMessage]:
        """Fetch and accept run requests; while the registry is unavailable, hold them
        and every one after them, with every partition paused, and try them again with
        backoff (``runtime.kafka.stall``). Returns the records read."""
        stall, held, intake = self.stall, self.held, self.intake
        if not stall.stalled:
            messages = intake.looked_up()
            messages += self._fetch(due, capacity)
        elif held and stall.due():
            messages = held.take() + intake.looked_up()
        else:
            held.poll(0.05)
            messages = []
        for i, msg in enumerate(messages):
            try:
                intake.accept(msg)
            except RegistryUnavailable as exc:
                if not stall.stalled:
                    held.pause_all()
                held.hold(messages[i:])
                stall.failed(exc)
                return messages[:i]
        if stall.stalled and not held:
            paused, waiting = intake.paused, intake.waiting
            held.resume(
                [
                    tp
                    for tp in self.consumer.assignment()
                    if intake.priority_of.get(tp.topic) not in paused
                    and (tp.topic, tp.partition) not in waiting
                ]
            )
            stall.passed()
        return messages

    def _fetch(self, due: bool, capacity: int) -> list[ConsumedMessage]:
        """Read only what the backlog has room for, but poll at least every
        INPUT_EVERY_S (membership, rebalances); a priority whose backlog overflows
        anyway is paused (``Intake.flow_control``). A transient refusal from the broker
        (restarting, a leader moving) skips this fetch (``GroupMember``)."""
        backlog = len(self.intake) + len(self.attempts.destinations)  # all read ahead
        fetch = max(1, self.intake.limit - backlog)
        if not self.attempts.running and not backlog:
            # Idle: wait for the first run (a batch call would wait for a full batch),
            # or until a held run is due.
            wait = self.intake.wait_s(time.time() * 1000, 0.1)
            return self.member.consume(fetch, wait, ready=True)
        if due or backlog < capacity:
            return self.member.consume(fetch, 0)
        return []

    def drain(self) -> None:
        """SIGTERM: stop fetching, let running attempts finish within the grace period."""
        deadline = self._stop_deadline = time.monotonic() + self.config.grace_s
        while self.attempts.running and time.monotonic() < deadline:
            self.control.read()
            self.attempts.collect(wait=0.1)
            self.outbox.settle()
        if self.attempts.running:
            log.warning("%d runs still executing after the grace period", len(self.attempts))

    def close(self) -> None:
        if stop.requested():  # the runs had their grace: handing over gets the usual 10 s
            stop.arm(stop.STOP_BUDGET_S)
        try:
            self.outbox.settle(wait=True)
        finally:
            self.tally.apply()
            self.member.close()
            self.history.close()
            self.control.close()
            self.attempts.close()
            self.outbox.close()
            if self.intake.lookups is not None:
                self.intake.lookups.close()

    def _maintain(self) -> None:
        self._maintenance = time.monotonic() + 5
        now_ms = _now_ms()
        # While runs that may be replays are unread or wait for history, everything read
        # from history stays: dropping it would let them execute again.
        hold = bool(self.intake.replaying or self.history.assigned)
        forgotten = self.dedup.prune(now_ms, hold=hold or self.intake.waiting_for_history())
        if forgotten:
            if self.dedup.forgotten == forgotten:  # the first time
                log.warning(
                    "dedup holds more than --dedup-capacity %d run ids: forgetting the "
                    "oldest before the %d s lookback (a flagged re-emission of one of them "
                    "executes again; counted in cronstream_worker_dedup_forgotten_total)",
                    self.config.dedup_capacity,
                    self.config.lookback_ms // 1000,
                )
            metrics.dedup_forgotten.inc(forgotten)
        metrics.dedup_run_ids.set(len(self.dedup))
        metrics.runs_held.set(len(self.intake.delayed))
        self.control.forget_before(now_ms - self.config.lookback_ms)
        self.outbox.forget(from_ms(now_ms - self.config.lookback_ms))
        owned = [TopicPartition(t, p) for (t, p) in self.trackers]
        for tp, lag in consumer_lag(self.consumer, owned):
            metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(lag)


def outcome_observers(topics: Topics, dedup: Dedup, *, name: str) -> list[OutcomeObserver]:
    """The outcome observers a worker is built with, in the order their records are
    published: a late success's cleared deadline alert, then a flow node's outcome."""
    return [DeadlineAlerts(topics, dedup, name=name), FlowNodes(topics)]


def _resolve_writers(codec: Codec, topics: Topics, observers: list[OutcomeObserver]) -> None:
    """Every schema the worker writes with (its own records', its observers'), resolved
    before anything else: from then on publishing never needs the registry
    (RegistryUnavailable here: the caller waits for it, ``cronstream.foreground.run_member``)."""
    written: list[tuple[str, type[AnyEvent]]] = [
        (topics.history, RunOutcome),
        (topics.timers, TimerRequest),
        (topics.dlq, DeadLetter),
        (topics.run_output, RunOutput),
    ]
    for observer in observers:
        written.extend(observer.written())
    for topic, event_type in written:
        codec.writer_id(f"{topic}-value", event_type)


def _metadata_time(metadata: str | None) -> int | None:
    """The timestamp a worker's commit left in the offset metadata (``Outbox.settle``)."""
    try:
        return int(metadata) if metadata else None
    except ValueError:
        return None


def _now_ms() -> int:
    return int(time.time() * 1000)
