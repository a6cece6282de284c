"""Standby stores: warm copies of the far tier of the jobs partitions this process does
not own (``cronstream scheduler --state-dir``; on by default there, ``--no-standby``), so
that when a partition's owner is lost with its disk, a process that already has the
partition's store on its own disk takes it over as fast as a restart on the owner's disk
(the standby replicas of Kafka Streams' state stores).

A standby store has an owner's format (``streams.scheduler.state``), so the owner's path for a
store found on its disk applies unchanged when the partition is assigned here:

- **definitions**, read from the jobs topic as the owner reads them (``applying.store``);
- **entries**: each job's first slot due after the owner's last committed checkpoint
  (its ``fired_through``, read from the group's committed offsets every REFRESH_S by a
  thread). Every due time up to the checkpoint was emitted, so that slot is a lower bound
  of the job's next slot not emitted (``streams.core.far``). When a newer checkpoint
  passes an entry, the entry moves to the job's next slot after it (about one entry per
  fire of the owner), and the old one is deleted once the new one is written;
- **meta**: the jobs offset read to, and the checkpoint the entries are computed from.

When the group assigns the partition here, the standby store passes, open, to the
``Loader`` as its own: the jobs partition is read from the lower of the store's and the
checkpoint's offsets, and each job is loaded when its entry comes near. When the
partition goes to another process, the store (still open) becomes a standby store again.

**Joining when warm.** A process with standby stores joins the scheduler group only once
they are warm (read to the end the jobs topic had when they were opened): a process on a
new host (an empty disk) copies the stores first, then takes partitions over from them,
instead of rebuilding partitions it owns already (the cooperative-sticky assignor gives
a joining member its share at once). A restart on the same disk is warm after reading
what was written while it was down.

What it costs: every scheduler process reads the whole jobs topic, and keeps a store of
every partition on its disk (44 bytes per job here, docs/scaling.md); the entries of the
partitions it does not own move once per fire of their owner, in the loop, a batch per
iteration (about what the owner spends keeping its own far tier).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cronstream.runtime import metrics
from cronstream.runtime.kafka.clients import (
    OFFSET_BEGINNING,
    KafkaError,
    KafkaException,
    TopicPartition,
    kafka_consumer,
)
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.runtime.kafka.records import ConsumedMessage, is_record, text_key
from cronstream.runtime.settings import Settings
from cronstream.schemas.errors import CronError, DecodeError, RegistryUnavailable, ZoneError
from cronstream.streams.scheduler.applying import store
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.state import PartitionState, Stores

log = logging.getLogger("cronstream.scheduler")
REFRESH_S = 5.0  # how often the owners' checkpoints are read
# Per step at most, while partitions are live here (a few milliseconds: the owned
# partitions' fires wait for the step), and while none is (warming, or owning nothing):
READ_BATCH, WARM_BATCH = 200, 20_000  # records read
MOVE_BATCH, WARM_MOVE_BATCH = 200, 5_000  # entries moved, per partition
STEP_S = 0.005  # moving stops after this long while partitions are live
STEP_EVERY_S = 0.01  # and steps come at most this often (not every turn of a busy loop)
RETRY_S = 2.0  # after the registry refused a decode, or a broker an end offset
ADOPT_TIMEOUT_S = 2.0  # an end offset asked for in the loop waits this long at most


@dataclass(slots=True)
class StandbyCopy:
    """The standby store of one jobs partition."""

    state: PartitionState
    next: int  # the next jobs offset to read
    end: int  # warm once read to here (the end offset when opened)
    fired: int  # every entry is a slot due after this checkpoint's fired_through
    warm: bool = False
    # Moving the entries a newer checkpoint passed: (its fired_through, the last entry
    # moved), across steps.
    moving: tuple[int, tuple[int, str] | None] | None = None


class Standby:
    def __init__(
        self,
        settings: Settings,
        config: SchedulerConfig,
        *,
        definitions: Definitions,
        stores: Stores,
        partitions: int,
        now_ms: Callable[[], int],
    ) -> None:
        self.consumer = kafka_consumer(
            settings,
            **{
                "group.id": config.group,  # only to read the owners' checkpoints: never joins
                "client.id": f"{config.name}.standby",
                "enable.partition.eof": True,
            },
        )
        self.stores = stores  # the loader's
        self.topic = stores.root.name  # the jobs topic (DIR/<jobs topic>)
        self.partitions = partitions
        self.definitions = definitions
        self.now_ms = now_ms
        self.copies: dict[int, StandbyCopy] = {}
        self.warm = False
        self.started = time.monotonic()
        self._next_step = 0.0  # live: a step at most every STEP_EVERY_S; or a retry
        self._adopting: dict[int, PartitionState] = {}  # handed over, read from next step
        # The owners' committed checkpoints, read by a thread (a call to the group
        # coordinator may wait seconds when a broker is away: never in the loop).
        self._checkpoints: dict[int, Checkpoint] = {}
        self._stop = threading.Event()
        self._reader = threading.Thread(
            target=self._read_checkpoints, daemon=True, name="standby-checkpoints"
        )

    def start(self, owned: set[int]) -> None:
        """Open a standby store for every jobs partition not in ``owned`` (its entries
        computed from the owners' checkpoints as they are now)."""
        self._fetch_checkpoints()
        starts = [self._open(p, None) for p in range(self.partitions) if p not in owned]
        # Assigned together: a partition fetching holds the broker connection for up to
        # fetch.wait.max.ms, and the next one's end offset waited behind it (0.5 s each).
        self.consumer.incremental_assign(starts)
        self._reader.start()
        self._check_warm()

    # -- partitions moving --------------------------------------------------------------
    def adopt(self, partition: int, state: PartitionState) -> None:
        """Keep ``partition``'s store warm (handed over by this process: ``state``, its
        store as the owner left it, still open): read from the next ``step``, not in the
        group's callback (its end offset may wait for a broker)."""
        if self._stop.is_set():  # the process stops: nothing to keep warm
            state.close()
        elif partition not in self.copies:
            self._adopting[partition] = state

    def _adopt_waiting(self) -> None:
        for partition, state in sorted(self._adopting.items()):
            try:
                start = self._open(partition, state, timeout=ADOPT_TIMEOUT_S)
            except (RuntimeError, KafkaException) as exc:  # no end offset: tried again later
                log.warning("standby store of partition %d not opened yet: %s", partition, exc)
                self._next_step = time.monotonic() + RETRY_S
                return
            del self._adopting[partition]
            self.consumer.incremental_assign([start])

    def _open(
        self, partition: int, state: PartitionState | None, *, timeout: float = 120.0
    ) -> TopicPartition:
        """Open ``partition``'s standby store (or take ``state``, open already); where to
        read the jobs partition from."""
        if state is None:
            state = self.stores.open(partition, self.now_ms())
        meta = state.meta()
        try:
            low, high = watermarks(
                self.consumer, TopicPartition(self.topic, partition), timeout=timeout
            )
        except (RuntimeError, KafkaException):
            if partition not in self._adopting:
                state.close()
            raise
        start = max(low, meta.jobs_offset) if meta is not None else low
        # Entries are slots after the lower of the store's point and the owner's last
        # checkpoint (now, for a partition with neither).
        checkpoint = self._checkpoints.get(partition)
        points = [p.fired_through for p in (meta, checkpoint) if p is not None]
        fired = min(points, default=self.now_ms())
        self.copies[partition] = StandbyCopy(state, start, high, fired, warm=start >= high)
        log.info(
            "standby store of partition %d: reading %d definitions", partition, max(0, high - start)
        )
        return TopicPartition(self.topic, partition, start if start > low else OFFSET_BEGINNING)

    def release(self, partition: int) -> PartitionState | None:
        """``partition`` is assigned here: its standby store, still open, for the loader
        (None: it has none)."""
        adopting = self._adopting.pop(partition, None)
        if adopting is not None:  # handed over and back before the standby read it
            return adopting
        copy = self.copies.pop(partition, None)
        if copy is None:
            return None
        self.consumer.incremental_unassign([TopicPartition(self.topic, partition)])
        copy.state.flush(copy.fired, copy.next)
        log.info(
            "partition %d taken over from its standby store (read to offset %d%s)",
            partition,
            copy.next,
            "" if copy.warm else ", not warm yet",
        )
        return copy.state

    # -- the loop ------------------------------------------------------------------------
    def step(self, *, live: bool) -> None:
        """Read what the jobs topic has for the standby stores, and move the entries a
        newer checkpoint passed; ``live``: partitions are live here, so a step is short."""
        began = time.monotonic()
        if began < self._next_step:
            return
        if live:
            self._next_step = began + STEP_EVERY_S
        if self._adopting:
            self._adopt_waiting()
        if not self.copies:
            return
        batch = READ_BATCH if live or self.warm else WARM_BATCH
        try:
            msgs = self.consumer.consume(num_messages=batch, timeout=0 if live else 0.05)
        except KafkaException as exc:
            log.warning("standby reading refused for now (%s)", exc)
            msgs = []
        for i, msg in enumerate(msgs):
            try:
                self._read(msg)
            except RegistryUnavailable as exc:
                self._again(msgs[i:], exc)
                return
        self._check_warm()
        self._move_some(live, began)

    def _move_some(self, live: bool, began: float) -> None:
        """Move the entries newer checkpoints passed, a batch per partition; while
        partitions are live here, only until the step has taken STEP_S."""
        for partition, copy in list(self.copies.items()):
            if live and time.monotonic() - began > STEP_S:
                return
            checkpoint = self._checkpoints.get(partition)
            if (
                copy.moving is None
                and checkpoint is not None
                and (checkpoint.fired_through > copy.fired)
            ):
                copy.moving = (checkpoint.fired_through, None)
            if copy.moving is not None:
                move_entries(copy, MOVE_BATCH if live else WARM_MOVE_BATCH)

    def _read(self, msg: ConsumedMessage) -> None:
        partition, offset = msg.partition(), msg.offset()
        copy = self.copies.get(partition) if partition is not None else None
        if copy is None:
            return
        if not is_record(msg):  # the end of the partition, or a transient fetch error
            error = msg.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                copy.warm = True
            return
        if offset is None:
            return
        key = text_key(msg.key())
        value = msg.value()
        if key:  # a record the owner refuses (no key) changes nothing
            self._hold(copy, key, value)  # RegistryUnavailable: read again later
            store(copy.state, key, offset, msg.timestamp()[1], value)
        copy.next = offset + 1
        if copy.next >= copy.end:
            copy.warm = True

    def _hold(self, copy: StandbyCopy, key: str, value: bytes | None) -> None:
        """An entry for the job at its first slot after the checkpoint; none for a
        delete, or a definition the owner dead-letters (the store keeps it as read)."""
        if value is None:
            return
        try:
            job = self.definitions.schedule(key, value)
        except (DecodeError, CronError, ZoneError):
            return
        slot = job.slot_due_after(copy.fired)
        if slot is not None:
            copy.state.hold(key, slot + job.jitter, None)

    def _again(self, rest: Sequence[ConsumedMessage], exc: RegistryUnavailable) -> None:
        """The registry is away: the partitions are read again from the first record
        not stored, after RETRY_S."""
        firsts: dict[int, int] = {}
        for msg in rest:
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None and is_record(msg):
                firsts.setdefault(partition, offset)
        for partition, offset in firsts.items():
            if partition in self.copies:
                self.consumer.seek(TopicPartition(self.topic, partition, offset))
        self._next_step = time.monotonic() + RETRY_S
        log.warning("standby stores wait for the registry: %s", exc)

    def gauge(self) -> None:
        """The standby partitions, warm and warming; how far behind the owners' last
        checkpoints their entries are."""
        warm = sum(1 for c in self.copies.values() if c.warm)
        metrics.standby_partitions.labels("warm").set(warm)
        metrics.standby_partitions.labels("warming").set(len(self.copies) - warm)
        behind = [
            cp.fired_through - c.fired
            for p, c in self.copies.items()
            if (cp := self._checkpoints.get(p)) is not None
        ]
        metrics.standby_behind.set(max(0, max(behind, default=0)))

    def _check_warm(self) -> None:
        if not self.warm and all(c.warm for c in self.copies.values()):
            self.warm = True
            log.info(
                "standby stores warm: %d partitions in %.1fs",
                len(self.copies),
                time.monotonic() - self.started,
            )

    def _read_checkpoints(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._fetch_checkpoints()

    def _fetch_checkpoints(self) -> None:
        partitions = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            found = self.consumer.committed(partitions, timeout=10)
        except KafkaException as exc:
            log.warning("standby: the owners' checkpoints not read (%s)", exc)
            return
        checkpoints = {}
        for tp in found:
            checkpoint = Checkpoint.from_metadata(tp.metadata)
            if checkpoint is not None:
                checkpoints[tp.partition] = checkpoint
        self._checkpoints = checkpoints

    def close(self) -> None:
        self._stop.set()
        if self._reader.is_alive():
            self._reader.join(timeout=15)
        for copy in self.copies.values():
            copy.state.flush(copy.fired, copy.next)
            copy.state.close()
        for state in self._adopting.values():
            state.close()
        self.copies.clear()
        self._adopting.clear()
        self.consumer.close()


def move_entries(copy: StandbyCopy, limit: int) -> None:
    """Move up to ``limit`` entries due by the newer checkpoint (``copy.moving``) to each
    job's first slot after it, from where the last call stopped; once none is left, the
    moved entries are deleted and the store says it is computed from that checkpoint."""
    assert copy.moving is not None
    through, after = copy.moving
    state = copy.state
    entries = state.entries(after, through + 1, -(1 << 62), limit)
    for due, job_id in entries:
        job = state.load(job_id)
        slot = None if job is None else job.slot_due_after(through)
        if job is None or slot is None:
            state.forget(job_id, due)
        else:
            state.hold(job_id, slot + job.jitter, due)
    if len(entries) >= limit:
        copy.moving = (through, entries[-1])
        # The owner's checkpoint covers the moved ones: they go now (a boundary shared by
        # millions of jobs would otherwise keep them all in memory until the last batch).
        state.drop_superseded(through)
        return
    copy.moving = None
    copy.fired = through
    state.flush(through, copy.next)  # the moved entries go, the meta says so
