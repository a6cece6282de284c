"""The scheduler processor: owns partitions of cronstream.jobs and fires their runs.

One process runs one ``Processor``. It joins the scheduler consumer group on the jobs
topic (cooperative-sticky, so a membership change moves only the partitions it must);
for every jobs partition it owns it also reads the same partition of the timers topic
(co-partitioned by job id), and keeps a ``PartitionScheduler`` (the pure core). The loop
is two lines of substance: read what arrived, then emit what ``due(now)`` returns.

On assignment a partition is *loading*: the jobs partition is read from its beginning
to the end offset seen at assignment (the compacted topic is the source of truth), the
checkpoint is read from the group's committed offset metadata, and every definition is
recovered against it (misfire policy for what came due meanwhile), SETTLE_BATCH per loop
iteration so that partitions already live keep firing on time. Then it is *live*:
definitions apply within one loop iteration (well under a second) and due runs fire.

Run requests go out through a confluent-kafka producer with pre-encoded templates
(``streams.emitter``); MISSED/SKIPPED slots go to the history topic; records that
cannot be read go to the DLQ with topic/partition/offset and the partition keeps flowing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from runtime import metrics
from runtime.kafka.clients import group_consumer, kafka_consumer
from runtime.kafka.offsets import committed, watermarks
from runtime.kafka.publisher import Publisher
from runtime.kafka.records import ConsumedMessage, dead_letter, dead_letter_for, is_record
from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import TimerRequest, from_ms, iso, to_ms
from schemas.registry import RegistryClient
from schemas.serde import Codec, DecodeError
from streams.checkpoint import Checkpoint
from streams.core.cron import CronError
from streams.core.partition import NEVER, PartitionScheduler, Timer
from streams.core.schedule import JobSchedule
from streams.core.zones import TZDATA_VERSION, ZoneError
from streams.definitions import Definitions
from streams.emitter import Emitter
from streams.loading import Collector, check_zone_database

log = logging.getLogger("cronstream.scheduler")
STAGE = "scheduler"
# Wheel entries fired per partition per loop iteration at most: under overload the loop
# still reads definitions and checkpoints (every few hundred milliseconds at worst).
FIRE_BATCH = 1000
# Definitions settled per loop iteration while a partition loads (a few tens of
# milliseconds): the live partitions fire on time in between.
SETTLE_BATCH = 500


@dataclass(slots=True)
class Owned:
    partition: int
    core: PartitionScheduler
    checkpoint: Checkpoint | None
    load_end: int
    loading: bool = True
    read: bool = False  # loading, and every definition is read: settle it next (``step``)
    settling: list[str] = field(default_factory=list)  # job ids being settled, in order
    settled: int = 0  # how many of ``settling`` are done
    started: float = field(default_factory=time.monotonic)
    # job id -> (offset, timestamp, value, an earlier live version exists) while loading
    pending: dict[str, tuple[int, int, bytes | None, bool]] = field(default_factory=dict)
    jobs_next: int = 0
    timers_next: int = 0


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    group: str
    threshold_ms: int = 60_000
    checkpoint_ms: int = 1_000
    horizon_ms: int = 60_000
    tick_ms: int = 10
    session_timeout_ms: int = 10_000
    name: str = "scheduler"


class Processor:
    def __init__(
        self,
        settings: Settings,
        config: ProcessorConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self.clock = clock
        self.codec = Codec(RegistryClient(settings.registry_url))
        self.definitions = Definitions(self.codec)
        self.emitter = Emitter(
            Publisher(settings, codec=self.codec), topics=self.topics,
            definitions=self.definitions, name=config.name,
        )  # fmt: skip
        self.publisher = self.emitter.publisher
        self.owned: dict[int, Owned] = {}
        self._collector = Collector()
        self._next_checkpoint = 0.0
        # False once the loop failed (e.g. a delivery error): from then on no checkpoint
        # may claim what was emitted, not even the one a handover would take.
        self._healthy = True
        self.consumer = group_consumer(
            settings,
            group=config.group,
            name=config.name,
            session_timeout_ms=config.session_timeout_ms,
            **{"enable.partition.eof": True},  # the end of a partition ends its loading
        )
        self.timers: Consumer = kafka_consumer(
            settings, **{"group.id": f"{config.group}.timers", "client.id": config.name}
        )
        log.info("zone database: tzdata %s", TZDATA_VERSION)
        self.consumer.subscribe(
            [self.topics.jobs],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    # -- ownership ----------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        starts, timer_starts = [], []
        for tp in committed(consumer, partitions):
            checkpoint = Checkpoint.from_metadata(tp.metadata)
            check_zone_database(tp.partition, checkpoint)
            low, high = watermarks(consumer, tp)
            fired_through = checkpoint.fired_through if checkpoint else self._now_ms()
            owned = Owned(
                partition=tp.partition,
                core=PartitionScheduler(
                    tp.partition,
                    fired_through=fired_through,
                    threshold_ms=self.config.threshold_ms,
                    tick_ms=self.config.tick_ms,
                    horizon_ms=self.config.horizon_ms,
                ),
                checkpoint=checkpoint,
                load_end=high,
                jobs_next=low,
            )
            owned.core.wheel.on_near = self._near_hook(owned)
            self.owned[tp.partition] = owned
            self._collector.loading()
            starts.append(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
            timers_from = checkpoint.timers_from if checkpoint else OFFSET_BEGINNING
            timer_starts.append(TopicPartition(self.topics.timers, tp.partition, timers_from))
            if checkpoint:
                owned.timers_next = checkpoint.timers_from
            log.info(
                "partition %d assigned: reading %d definitions, checkpoint %s",
                tp.partition,
                high - low,
                checkpoint,
            )
            if high <= low:
                self._go_live(owned)
        consumer.incremental_assign(starts)
        self.timers.incremental_assign(timer_starts)
        self._gauge_partitions()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        live = [self.owned[tp.partition] for tp in partitions if tp.partition in self.owned]
        self.checkpoint([o for o in live if not o.loading], consumer=consumer)
        self._drop(partitions)
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "partitions %s lost without a clean handover", [p.partition for p in partitions]
        )
        self._drop(partitions)
        consumer.incremental_unassign(partitions)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        gone = [self.owned.pop(tp.partition) for tp in partitions if tp.partition in self.owned]
        self._collector.loaded(any(o.loading for o in self.owned.values()))
        if gone:
            self.timers.incremental_unassign(
                [TopicPartition(self.topics.timers, o.partition) for o in gone]
            )
            log.info("partitions %s handed over", [o.partition for o in gone])
        self._gauge_partitions()

    # -- the loop -----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                self.step()
        except BaseException:
            self._healthy = False
            raise
        finally:
            self.close()

    def step(self) -> None:
        """One iteration: apply what arrived, then fire what is due."""
        # Wait for input only when there is nothing else to do: not while a read
        # partition waits to be settled, little while partitions are live.
        live = any(not o.loading for o in self.owned.values())
        wait = 0 if self._read_partition() else 0.005 if live else 0.1
        for msg in self.consumer.consume(num_messages=5000, timeout=wait):
            self._on_jobs_record(msg)
        # Read partitions are settled SETTLE_BATCH definitions per iteration, one
        # partition at a time, so the ones already live fire on time in between
        # (settling 80,000 definitions takes seconds).
        read = self._read_partition()
        if read is not None:
            self._settle_some(read)
        if self.owned:
            for msg in self.timers.consume(num_messages=2000, timeout=0):
                self._on_timer_record(msg)
        now = self._now_ms()
        for owned in list(self.owned.values()):
            if not owned.loading:
                self.emitter.emit(owned.core.due(now, FIRE_BATCH), now)
        self.publisher.producer.poll(0)
        if time.monotonic() >= self._next_checkpoint:
            self.checkpoint([o for o in self.owned.values() if not o.loading])
            self._gauge_state()

    def checkpoint(self, partitions: list[Owned], *, consumer: Consumer | None = None) -> None:
        """Make the partitions' progress durable. The procedure, in order:

        1. Snapshot each partition's checkpoint (fired-through, jobs and timers offsets).
        2. Flush the producer: every run request and history record emitted up to the
           snapshot is acknowledged by Kafka (a delivery failure raises here).
        3. Commit the snapshot as the jobs partitions' offsets with the checkpoint as
           metadata (synchronously; a fenced commit after losing the group raises).

        A crash before step 3, or a commit the group refuses (rebalance in progress,
        partition already moved), leaves the previous checkpoint: the next owner re-emits
        from there, flagged ``possible_duplicate``. Nothing is skipped.
        """
        self._next_checkpoint = time.monotonic() + self.config.checkpoint_ms / 1000
        if not partitions or not self._healthy:
            return
        # 1. snapshot
        offsets = []
        for owned in partitions:
            lowest = owned.core.lowest_pending_timer()
            snap = Checkpoint(
                fired_through=owned.core.fired_through,
                jobs_offset=owned.jobs_next,
                timers_from=owned.timers_next if lowest is None else lowest,
                timers_offset=owned.timers_next,
                tzdata=TZDATA_VERSION,
            )
            offsets.append(
                TopicPartition(
                    self.topics.jobs,
                    owned.partition,
                    max(owned.jobs_next, 0),
                    snap.to_metadata(),
                )
            )
        # 2. flush
        try:
            self.publisher.flush()
        except BaseException:
            self._healthy = False
            raise
        # 3. commit
        try:
            (consumer or self.consumer).commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Mid-rebalance or fenced: the partitions may already be someone else's. The
            # previous checkpoint stands; the next owner re-emits from it, flagged.
            log.warning("checkpoint not committed (%s); the previous one stands", exc)
            metrics.checkpoint_failures.inc()

    def close(self) -> None:
        """Hand every partition over: final checkpoint (unless the loop failed), leave
        the group."""
        try:
            self.checkpoint([o for o in self.owned.values() if not o.loading])
        finally:
            self.consumer.close()  # runs _on_revoke for what is still owned
            self.timers.close()
            self.publisher.close()

    # -- input --------------------------------------------------------------------------
    def _on_jobs_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            # The end of the partition: loading is complete even when the last offsets
            # are gone (compacted tombstones, transaction markers).
            eof = self.owned.get(msg.partition() or 0)
            if eof is not None and eof.loading:
                eof.read = True
            return
        partition = msg.partition()
        owned = self.owned.get(partition) if partition is not None else None
        offset = msg.offset()
        if owned is None or offset is None:
            return
        owned.jobs_next = offset + 1
        key = self._key(msg)
        if key is None:
            return
        if owned.loading:
            earlier = owned.pending.get(key)
            # An earlier version read, or already settled (``_settle_some``).
            replaced = (earlier is not None and earlier[2] is not None) or key in owned.core.jobs
            owned.pending[key] = (offset, msg.timestamp()[1], msg.value(), replaced)
            if owned.jobs_next >= owned.load_end:
                owned.read = True
            return
        value = msg.value()
        if value is None:
            owned.core.delete(key)
            return
        job = self._schedule(key, value, partition=owned.partition, offset=offset)
        if job is not None:
            now = self._now_ms()
            self.emitter.emit(owned.core.put(job, now=now), now)

    def _read_partition(self) -> Owned | None:
        """A loading partition read to its end, waiting to be settled."""
        return next((o for o in self.owned.values() if o.loading and o.read), None)

    def _settle_some(self, owned: Owned) -> None:
        """Settle up to SETTLE_BATCH read definitions of a loading partition against
        its checkpoint; once none is left, the partition is live.

        Definitions are taken in the order they were first read; each is the latest
        version read so far. One read again after it was settled (written during the
        settling) is settled again as a replacement, as it would be once live."""
        now = self._now_ms()
        checkpoint = owned.checkpoint
        core = owned.core
        pending = owned.pending
        room = SETTLE_BATCH
        while room > 0:
            if owned.settled >= len(owned.settling):
                if not pending:
                    self._go_live(owned)
                    return
                owned.settling, owned.settled = list(pending), 0
            key = owned.settling[owned.settled]
            owned.settled += 1
            room -= 1
            offset, arrived, value, replaced = pending.pop(key)
            if value is None:
                core.delete(key)  # deleted, perhaps after it was settled
                continue
            job = self._schedule(key, value, partition=owned.partition, offset=offset)
            if job is None:
                continue
            known = checkpoint is not None and offset < checkpoint.jobs_offset
            actions = core.recover(job, now=now, known=known, arrived_ms=arrived, replaced=replaced)
            self.emitter.emit(actions, now)

    def _go_live(self, owned: Owned) -> None:
        owned.loading = False
        owned.settling = []
        self._collector.loaded(any(o.loading for o in self.owned.values()))
        log.info(
            "partition %d live: %d jobs in %.1fs, fired through %s",
            owned.partition,
            len(owned.core.jobs),
            time.monotonic() - owned.started,
            iso(from_ms(owned.core.fired_through)),
        )
        self._gauge_partitions()

    def _on_timer_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            return
        partition, offset = msg.partition(), msg.offset()
        owned = self.owned.get(partition) if partition is not None else None
        if owned is None or offset is None:
            return
        owned.timers_next = offset + 1
        try:
            request = self.codec.decode(msg.value(), TimerRequest)
        except DecodeError as exc:
            self.emitter.dead_letter(
                dead_letter_for(msg, stage=STAGE, reason=f"undecodable timer request: {exc}")
            )
            return
        checkpoint = owned.checkpoint
        known = checkpoint is not None and offset < checkpoint.timers_offset
        due = to_ms(request.due_at)
        timer = Timer(
            offset=offset,
            job_id=request.job_id,
            due_ms=due,
            body=request,
            # Already due when read: a previous owner may have fired it (a fresh timer
            # due at once pays one history lookup for the flag).
            possible_duplicate=due <= self._now_ms(),
        )
        owned.core.add_timer(
            timer, fired_through=checkpoint.fired_through if known and checkpoint else NEVER
        )

    def _key(self, msg: ConsumedMessage) -> str | None:
        raw = msg.key()
        try:
            if raw:
                return raw.decode() if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            pass
        self.emitter.dead_letter(
            dead_letter_for(msg, stage=STAGE, reason="record key is not a UTF-8 job id")
        )
        return None

    def _schedule(
        self, key: str, value: bytes, *, partition: int, offset: int
    ) -> JobSchedule | None:
        """The core's view of a definition, or None after dead-lettering a bad one."""
        try:
            return self.definitions.schedule(key, value)
        except (DecodeError, CronError, ZoneError) as exc:
            reason = f"invalid job definition: {exc}"
        self.emitter.dead_letter(
            dead_letter(
                stage=STAGE,
                reason=reason,
                topic=self.topics.jobs,
                partition=partition,
                offset=offset,
                key=key.encode(),
                value=value,
            )
        )
        return None

    def _near_hook(self, owned: Owned) -> Callable[[Any], None]:
        """Prepare a job's run template as it comes within the horizon (``Definitions``)."""
        jobs, prepare = owned.core.jobs, self.definitions.prepare

        def on_near(item: Any) -> None:
            if type(item) is tuple:
                job = jobs.get(item[0])
                if job is not None and job.gen == item[1]:
                    prepare(job)

        return on_near

    # -- state --------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _gauge_partitions(self) -> None:
        loading = sum(1 for o in self.owned.values() if o.loading)
        metrics.partitions_owned.labels("loading").set(loading)
        metrics.partitions_owned.labels("live").set(len(self.owned) - loading)

    def _gauge_state(self) -> None:
        cores = [o.core for o in self.owned.values()]
        metrics.jobs_loaded.set(sum(len(c.jobs) for c in cores))
        metrics.wheel_items.labels("near").set(sum(c.wheel.near for c in cores))
        metrics.wheel_items.labels("far").set(sum(c.wheel.far for c in cores))
        metrics.timers_pending.set(sum(len(c.timers) for c in cores))
