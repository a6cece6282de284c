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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime import metrics
from runtime.errors import PublishError
from runtime.kafka.clients import (
    OFFSET_BEGINNING,
    Consumer,
    TopicPartition,
    kafka_consumer,
)
from runtime.kafka.member import GroupMember
from runtime.kafka.offsets import committed, watermarks
from runtime.kafka.publisher import Publisher
from runtime.kafka.stall import Backoff, Held
from runtime.registry import registry_client
from runtime.settings import Settings
from schemas.catalog import JOBS, Topics
from schemas.definition.zones import TZDATA_VERSION
from schemas.serde import Codec
from streams.checkpoint import Checkpoint
from streams.core.partition import PartitionScheduler
from streams.core.rates import TenantRates
from streams.definitions import Definitions
from streams.emitter import Emitter
from streams.loading import Collector, check_zone_database
from streams.reading import Owned, Reading
from streams.state import PartitionState, open_partition, resume_point

log = logging.getLogger("cronstream.scheduler")
# Wheel entries fired per partition per loop iteration at most: under overload the loop
# still reads definitions and checkpoints (every few hundred milliseconds at worst).
FIRE_BATCH = 1000
# How long a checkpoint waits for the broker to acknowledge what was emitted. Normally
# milliseconds; longer means the broker is down or restarting: the checkpoint is put off
# (the previous one stands) and firing pauses until the broker acknowledges again.
ACK_WAIT_S = 1.0
# At a handover (revoke, close) and when taking back a partition lost in an outage.
HANDOVER_ACK_WAIT_S = 10.0
# The lookahead at most: a run emitted earlier waits in a worker's memory that long, and
# a pause or delete must cancel it (``streams.core.ahead``).
MAX_LOOKAHEAD_MS = 60_000
# While the registry is unavailable (``runtime.kafka.stall``): what waits, what goes on.
READING_HELD = "reading definitions and timers paused until it answers; loaded jobs keep firing"


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    group: str
    threshold_ms: int = 60_000
    checkpoint_ms: int = 1_000
    horizon_ms: int = 60_000
    tick_ms: int = 10
    session_timeout_ms: int = 10_000
    # How long librdkafka keeps trying to deliver a run request (its message.timeout.ms):
    # past it the record fails and the partitions rewind to their checkpoint.
    delivery_timeout_ms: int = 300_000
    name: str = "scheduler"
    # Fires per second per tenant (0: no limit), and per-tenant exceptions; the excess
    # is deferred (``streams.core.rates``). Tenant "default" is never limited.
    tenant_fire_rate: float = 0.0
    tenant_fire_rates: tuple[tuple[str, float], ...] = ()
    # Run requests are emitted up to this long before they are due (with their due
    # time; the worker holds each until then), so a burst on one boundary has left the
    # scheduler before the boundary. 0: emitted when due.
    lookahead_ms: int = 1_000
    # Two tiers: a RocksDB store per partition under this directory holds every job,
    # memory only what is due within the horizon (``streams.state``). None: all in memory.
    state_dir: str | None = None
    rebuild_index: bool = False  # rebuild each store from the jobs topic (once per partition)
    # Static group membership: a process started again under the same id gets its
    # partitions back at once, not after the session timeout (see the README).
    instance_id: str | None = None


class Processor(Reading):
    def __init__(
        self, settings: Settings, config: ProcessorConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self.clock = clock
        self.codec = Codec(registry_client(settings))
        self.definitions = Definitions(self.codec)
        delivery: dict[str, Any] = {"message.timeout.ms": config.delivery_timeout_ms}
        self.emitter = Emitter(
            Publisher(settings, codec=self.codec, **delivery),
            topics=self.topics,
            definitions=self.definitions, name=config.name,
        )  # fmt: skip
        self.publisher = self.emitter.publisher
        self.owned: dict[int, Owned] = {}
        self.rates = (
            TenantRates(config.tenant_fire_rate, overrides=dict(config.tenant_fire_rates))
            if config.tenant_fire_rate > 0 or config.tenant_fire_rates
            else None
        )
        self._collector = Collector()
        self._rebuilt: set[int] = set()  # partitions whose store --rebuild-index rebuilt
        self._next_checkpoint = 0.0
        # Firing paused: the broker has not acknowledged what was emitted (``checkpoint``).
        self._undelivered = False
        # Firing paused: the loop stood still long enough for the group to have moved
        # the partitions (a frozen process); a committed checkpoint confirms them.
        self._unconfirmed = False
        self._last_step = time.monotonic()
        # Snapshots of partitions lost before their progress was committed: taken back
        # when the same partition comes back with the checkpoint it had (``_take_back``).
        self._retained: dict[int, tuple[Checkpoint | None, Checkpoint]] = {}
        self._backoff = Backoff(log, READING_HELD)  # reading waits for the registry
        # False once the loop failed (e.g. a delivery error): from then on no checkpoint
        # may claim what was emitted, not even the one a handover would take.
        self._healthy = True
        eof: dict[str, Any] = {"enable.partition.eof": True}  # it ends a partition's loading
        self.member = GroupMember(
            settings,
            group=config.group,
            name=config.name,
            session_timeout_ms=config.session_timeout_ms,
            log=log,
            instance_id=config.instance_id,
            **eof,
        )
        self.consumer = self.member.consumer
        self.timers: Consumer = kafka_consumer(
            settings, **{"group.id": f"{config.group}.timers", "client.id": config.name}
        )
        self._held = Held(self.consumer)
        self._held_timers = Held(self.timers)
        log.info("zone database: tzdata %s", TZDATA_VERSION)
        self.member.subscribe(
            [self.topics.jobs], assigned=self._assigned, revoking=self._revoking, lost=self._drop
        )

    # -- ownership ----------------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> list[TopicPartition] | None:
        """Load the partitions; they are read from the returned offsets (the jobs
        partition from its beginning, or its store's offset)."""
        if not partitions:
            return None
        consumer = self.consumer
        starts, timer_starts = [], []
        fresh = {tp.partition for tp in partitions}
        self._held.drop_partitions(fresh)
        self._held_timers.drop_partitions(fresh)
        for tp in committed(consumer, partitions):
            checkpoint = self._take_back(tp, Checkpoint.from_metadata(tp.metadata))
            check_zone_database(tp.partition, checkpoint)
            low, high = watermarks(consumer, tp)
            state, start, fallback = self._open_state(tp.partition, checkpoint, low)
            owned = self._load(tp.partition, checkpoint, load_end=high, jobs_next=start,
                               state=state, fired_through=fallback)  # fmt: skip
            begin = start if start > low else OFFSET_BEGINNING  # a store's offset, or all
            starts.append(TopicPartition(tp.topic, tp.partition, begin))
            timers_from = checkpoint.timers_from if checkpoint else OFFSET_BEGINNING
            timer_starts.append(TopicPartition(self.topics.timers, tp.partition, timers_from))
            if checkpoint:
                owned.timers_next = checkpoint.timers_from
            log.info(
                "partition %d assigned: reading %d definitions, checkpoint %s",
                tp.partition,
                high - start,
                checkpoint,
            )
            if high <= start:
                self._go_live(owned)
        self.timers.incremental_assign(timer_starts)
        self._gauge_partitions()
        return starts

    def _revoking(self, partitions: list[TopicPartition]) -> None:
        live = [self.owned[tp.partition] for tp in partitions if tp.partition in self.owned]
        try:
            self.checkpoint([o for o in live if not o.loading], wait=HANDOVER_ACK_WAIT_S)
        except PublishError as exc:  # the next owner re-emits from the last checkpoint
            log.warning("no checkpoint at the handover: %s", exc)
        self._drop(partitions)

    def _open_state(
        self, partition: int, checkpoint: Checkpoint | None, low: int
    ) -> tuple[PartitionState | None, int, int | None]:
        """With ``--state-dir``: ``streams.state.open_partition``."""
        if self.config.state_dir is None:
            return None, low, None
        rebuild = self.config.rebuild_index and partition not in self._rebuilt
        self._rebuilt.add(partition)
        return open_partition(
            Path(self.config.state_dir) / self.topics.jobs / str(partition),
            self.definitions.stored_schedule, rebuild=rebuild, now_ms=self._now_ms(),
            checkpoint=checkpoint, low=low,
        )  # fmt: skip

    def _load(
        self, partition: int, checkpoint: Checkpoint | None, *, load_end: int, jobs_next: int,
        state: PartitionState | None = None, fired_through: int | None = None,
    ) -> Owned:  # fmt: skip
        """A partition to load from ``checkpoint`` (else the store's point, else now)."""
        if checkpoint is not None or fired_through is None:
            fired_through = checkpoint.fired_through if checkpoint else self._now_ms()
        owned = Owned(
            partition=partition,
            core=PartitionScheduler(
                partition,
                fired_through=fired_through,
                threshold_ms=self.config.threshold_ms,
                tick_ms=self.config.tick_ms,
                horizon_ms=self.config.horizon_ms,
                rates=self.rates,
                far=state,
            ),
            checkpoint=checkpoint,
            load_end=load_end,
            jobs_next=jobs_next,
            base=checkpoint,
            state=state,
            rebuilding=state is not None and state.meta() is None,
        )
        owned.core.wheel.on_near = self._near_hook(owned)
        self.owned[partition] = owned
        self._collector.loading()
        return owned

    def _take_back(self, tp: TopicPartition, committed_: Checkpoint | None) -> Checkpoint | None:
        """The checkpoint to load an assigned partition from: the committed one, unless
        this processor lost the partition (a broker outage outlasting the session) with
        progress it could not commit, and nobody committed since. Then that progress is
        committed now, once the broker acknowledged what it covers, before anything is
        re-fired: what it emitted before losing the partition is not emitted again."""
        retained = self._retained.pop(tp.partition, None)
        if retained is None or retained[0] != committed_:
            return committed_
        snapshot = retained[1]
        why = "the progress made before it was lost is not taken back"
        try:
            if not self.publisher.settled(HANDOVER_ACK_WAIT_S):
                return committed_
            if not self.member.commit([self._offset(tp.partition, snapshot)], wait=True,
                                      then=f"partition {tp.partition}: {why}"):  # fmt: skip
                return committed_
        except PublishError as exc:
            # Some record it emitted failed, and any snapshot may cover it (the error is
            # raised once): none is taken back, every partition re-emits from its
            # committed checkpoint (found by the broker restart test).
            self._retained.clear()
            log.warning("partition %d: %s (%s)", tp.partition, why, exc)
            return committed_
        log.info("partition %d: took back the progress made before it was lost (%s)",
                 tp.partition, snapshot)  # fmt: skip
        return snapshot

    def _offset(self, partition: int, checkpoint: Checkpoint) -> TopicPartition:
        return TopicPartition(self.topics.jobs, partition, max(checkpoint.jobs_offset, 0),
                              checkpoint.to_metadata())  # fmt: skip

    def _drop(self, partitions: list[TopicPartition]) -> None:
        gone = [self.owned.pop(tp.partition) for tp in partitions if tp.partition in self.owned]
        for owned in gone:
            if owned.state is not None:
                owned.state.close()
            snapshot = self._snapshot(owned)
            if not owned.loading and self._healthy and snapshot != owned.base:
                self._retained[owned.partition] = (owned.base, snapshot)
        numbers = {tp.partition for tp in partitions}
        self._held.drop_partitions(numbers)
        self._held_timers.drop_partitions(numbers)
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
        """One iteration: apply what arrived, then fire what is due. A record Kafka
        refused for good sends every partition back to its checkpoint (``_rewind``)."""
        try:
            self._step()
        except PublishError as exc:
            self._rewind(exc)

    def _step(self) -> None:
        # Wait for input only when there is nothing else to do: not while a read
        # partition waits to be settled, little while partitions are live.
        live = any(not o.loading for o in self.owned.values())
        settle = self._backoff.due() and self._read_partition() is not None
        wait = 0 if settle else 0.005 if live else 0.1
        batch = self.member.consume(5000, wait)
        self._read(batch, self._held, self._on_jobs_record)
        # Read partitions are settled SETTLE_BATCH definitions per iteration, one
        # partition at a time, so the ones already live fire on time in between
        # (settling 80,000 definitions takes seconds).
        read = self._read_partition()
        if read is not None and self._backoff.due():
            self._settle_some(read)
        if self.owned:
            batch = self.timers.consume(num_messages=2000, timeout=0)
            self._read(batch, self._held_timers, self._on_timer_record)
        if self._backoff.stalled and self._backoff.due() and not (self._held or self._held_timers):
            self._backoff.passed()
            self._held.resume()
            self._held_timers.resume()
        self._check_stall()
        now = self._now_ms()
        if not (self._undelivered or self._unconfirmed):
            ahead = now + self.config.lookahead_ms
            for owned in list(self.owned.values()):
                if not owned.loading:
                    self.emitter.emit(owned.core.due(ahead, FIRE_BATCH), now)
            self.emitter.ahead.prune(now)
        self.publisher.producer.poll(0)
        if time.monotonic() >= self._next_checkpoint:
            self.checkpoint([o for o in self.owned.values() if not o.loading])
            self._gauge_state()

    def checkpoint(self, partitions: list[Owned], *, wait: float = ACK_WAIT_S) -> None:
        """Make the partitions' progress durable. The procedure, in order:

        1. Snapshot each partition's checkpoint (fired-through, jobs and timers offsets).
        2. Flush the producer: every run request and history record emitted up to the
           snapshot is acknowledged by Kafka, within ``wait`` seconds. If not (the
           broker is down or restarting), stop here: the previous checkpoint stands,
           firing pauses until the broker acknowledges again (what is emitted meanwhile
           is what a next owner would re-emit), and the next checkpoint tries again, so
           progress is committed as soon as the broker is back. A record Kafka refused
           for good raises PublishError (the caller rewinds: ``step``).
        3. With ``--state-dir``, each store deletes the entries the snapshot covers (a
           store ahead of the commit lacks only entries of acknowledged slots).
        4. Commit the snapshot as the jobs partitions' offsets with the checkpoint as
           metadata (synchronously; ``GroupMember``'s rule: refused is logged, fatal
           raises).

        A crash before step 4, or a commit the group refuses (rebalance in progress,
        partition already moved), leaves the previous checkpoint: the next owner re-emits
        from there, flagged ``possible_duplicate``. Nothing is skipped.
        """
        self._next_checkpoint = time.monotonic() + self.config.checkpoint_ms / 1000
        if not partitions or not self._healthy:
            self._undelivered = self._unconfirmed = False
            return
        # 1. snapshot
        snaps = [(owned, self._snapshot(owned)) for owned in partitions]
        # 2. flush
        if not self.publisher.settled(wait):
            if not self._undelivered:
                log.warning("the broker has not acknowledged what was emitted within %.0f s: "
                            "checkpoint put off, firing paused until it does", wait)  # fmt: skip
            self._undelivered = True
            return
        if self._undelivered:
            log.info("the broker acknowledges again: checkpoint taken, firing resumed")
            self._undelivered = False
        for owned, snap in snaps:  # 3. the stores (--state-dir)
            if owned.state is not None:
                owned.state.flush(snap.fired_through, snap.jobs_offset)
        # 4. commit
        offsets = [self._offset(owned.partition, snap) for owned, snap in snaps]
        # Refused mid-rebalance: the partitions may already be someone else's. The
        # previous checkpoint stands; the next owner re-emits from it, flagged.
        if not self.member.commit(offsets, wait=True, then="the previous checkpoint stands"):
            metrics.checkpoint_failures.inc()
            return
        for owned, snap in snaps:
            owned.base = snap
        if self._unconfirmed:
            log.info("checkpoint committed: the partitions are still ours, firing resumed")
            self._unconfirmed = False

    def _check_stall(self) -> None:
        """A loop that stood still for more than half the session timeout (the process
        was frozen: SIGSTOP, a VM pause) may have lost its partitions without hearing
        it yet: firing them now would repeat what their new owner fired, unflagged.
        Firing waits until a checkpoint commit, fenced by the group generation,
        succeeds (the partitions are still ours) or the loss arrives (``_drop``)."""
        now = time.monotonic()
        gap, self._last_step = now - self._last_step, now
        if gap > self.config.session_timeout_ms / 2000 and self.owned:
            log.warning("the loop stood still %.1f s: firing waits until a checkpoint "
                        "confirms the partitions are still ours", gap)  # fmt: skip
            self._unconfirmed = True
            self._next_checkpoint = 0.0

    def _snapshot(self, owned: Owned) -> Checkpoint:
        lowest = owned.core.lowest_pending_timer()
        return Checkpoint(
            fired_through=owned.core.fired_through,
            jobs_offset=owned.jobs_next,
            timers_from=owned.timers_next if lowest is None else lowest,
            timers_offset=owned.timers_next,
            tzdata=TZDATA_VERSION,
        )

    def _rewind(self, error: PublishError) -> None:
        """Kafka refused some emitted record for good (a broker outage longer than the
        producer's delivery timeout): every owned partition is loaded again from its
        last committed checkpoint, so what came due since is emitted again (flagged
        ``possible_duplicate``) rather than lost, and the process goes on."""
        log.error("%s: every partition goes back to its last checkpoint and re-emits "
                  "from there (flagged possible_duplicate)", error)  # fmt: skip
        if self.publisher.fatal:
            self.publisher.renew()
        self._retained.clear()
        self._undelivered = False
        numbers = set(self.owned)
        self._held.drop_partitions(numbers)
        self._held_timers.drop_partitions(numbers)
        for old in list(self.owned.values()):
            base, meta = old.base, old.state.meta() if old.state is not None else None
            start, fallback = resume_point(meta, base, 0)
            self._load(old.partition, base, load_end=old.jobs_next, jobs_next=start,
                       state=old.state, fired_through=fallback)  # fmt: skip
            self.consumer.seek(TopicPartition(self.topics.jobs, old.partition,
                                              start or OFFSET_BEGINNING))  # fmt: skip
            timers_from = base.timers_from if base else OFFSET_BEGINNING
            self.timers.seek(TopicPartition(self.topics.timers, old.partition, timers_from))
            if base:
                self.owned[old.partition].timers_next = base.timers_from
        self._gauge_partitions()

    def close(self) -> None:
        """Hand every partition over: final checkpoint (unless the loop failed), leave
        the group."""
        try:
            self.checkpoint([o for o in self.owned.values() if not o.loading],
                            wait=HANDOVER_ACK_WAIT_S)  # fmt: skip
        finally:
            self.member.close()  # runs _revoking for what is still owned
            self.timers.close()
            self.publisher.close()

    # -- input --------------------------------------------------------------------------
    # -- state --------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _gauge_partitions(self) -> None:
        if self.rates is not None:  # this processor's share of each tenant's rate
            self.rates.share = max(1, len(self.owned)) / self.topics.partitions(JOBS)
        loading = sum(1 for o in self.owned.values() if o.loading)
        metrics.partitions_owned.labels("loading").set(loading)
        metrics.partitions_owned.labels("live").set(len(self.owned) - loading)
        metrics.partitions_total.set(self.topics.partitions(JOBS))

    def _gauge_state(self) -> None:
        cores = [o.core for o in self.owned.values()]
        metrics.jobs_loaded.set(sum(len(c.jobs) for c in cores))
        metrics.wheel_items.labels("near").set(sum(c.wheel.near for c in cores))
        metrics.wheel_items.labels("far").set(sum(c.wheel.far for c in cores))
        metrics.timers_pending.set(sum(len(c.timers) for c in cores))
        if self.rates is not None and self.rates.deferred:
            for tenant, count in self.rates.deferred.items():
                metrics.labelled(metrics.fires_deferred, tenant).inc(count)
            self.rates.deferred.clear()
