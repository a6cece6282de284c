"""The scheduler processor: owns partitions of cronstream.jobs and fires their runs.

One process runs one ``Scheduler``. It joins the scheduler consumer group on the jobs
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
(``streams.scheduler.emitter``); MISSED/SKIPPED slots go to the history topic; records that
cannot be read go to the DLQ with topic/partition/offset and the partition keeps flowing.

The processor is the loop and the wiring; its parts, each with its own state:

- ``Ownership`` (``ownership.py``): the partitions owned (``Owned``, ``owned.py``),
  assignment, revocation, loss and take-back through ``GroupMember``, the rewind;
- ``Loader`` (``loading.py``): a partition's store opened, its definitions collected
  while it loads and settled against its checkpoint, then live;
- ``Intake`` (``intake.py``): definitions and timers read, held while the registry is
  down; ``Applier`` (``applying.py``): a definition applied to its core, or
  dead-lettered;
- ``Emitter`` (``emitter.py``): what the cores decide, written;
- ``Checkpointer`` (``checkpointer.py``): the checkpoint procedure
  (``Checkpointer.checkpoint``), and firing paused while it cannot vouch for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.clients import Consumer, KafkaError, TopicPartition, kafka_consumer
from cronstream.runtime.kafka.member import GroupMember
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.stall import Backoff
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import JOBS, Topics
from cronstream.schemas.definition.zones import TZDATA_VERSION
from cronstream.schemas.serde import Codec
from cronstream.streams.scheduler.applying import Applier
from cronstream.streams.scheduler.checkpointer import HANDOVER_ACK_WAIT_S, Checkpointer
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.emitter import Emitter
from cronstream.streams.scheduler.intake import READING_HELD, Intake
from cronstream.streams.scheduler.loading import Loader
from cronstream.streams.scheduler.owned import Owned
from cronstream.streams.scheduler.ownership import Ownership
from cronstream.streams.scheduler.standby import Standby

log = logging.getLogger("cronstream.scheduler")
# Wheel entries fired per partition per loop iteration at most: under overload the loop
# still reads definitions and checkpoints (every few hundred milliseconds at worst).
FIRE_BATCH = 1000
# The lookahead at most: a run emitted earlier waits in a worker's memory that long, and
# a pause or delete must cancel it (``streams.core.ahead``).
MAX_LOOKAHEAD_MS = 60_000


class Scheduler:
    def __init__(  # long: the scheduler's parts, wired in the order they use each other
        self, settings: Settings, config: SchedulerConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.config = config
        self.topics = topics = Topics(settings)
        self.clock = clock
        codec = Codec(registry_client(settings))
        definitions = Definitions(codec)
        # A report per record: the checkpoint learns without waiting what is acknowledged.
        delivery: dict[str, Any] = {"message.timeout.ms": config.delivery_timeout_ms}
        self.emitter = Emitter(
            Publisher(settings, codec=codec, track_acks=True, **delivery),
            topics=topics,
            definitions=definitions,
            name=config.name,
        )
        self.publisher = self.emitter.publisher
        self.owned: dict[int, Owned] = {}
        eof: dict[str, Any] = {"enable.partition.eof": True}  # it ends a partition's loading
        self.member = GroupMember(
            settings,
            config,
            log=log,
            instance_id=config.instance_id,
            on_commit=self._on_commit,  # the checkpoint's commits are answered there
            **eof,
        )
        self.timers: Consumer = kafka_consumer(
            settings, **{"group.id": f"{config.group}.timers", "client.id": config.name}
        )
        backoff = Backoff(log, READING_HELD)  # reading and settling wait for the registry
        applier = Applier(definitions, self.emitter, topics=topics, now_ms=self._now_ms)
        self.loader = Loader(
            config,
            definitions=definitions,
            applier=applier,
            owned=self.owned,
            backoff=backoff,
            jobs_topic=topics.jobs,
            now_ms=self._now_ms,
        )
        self.rates = self.loader.rates
        self.intake = Intake(
            member=self.member,
            timers=self.timers,
            owned=self.owned,
            applier=applier,
            loader=self.loader,
            codec=codec,
            backoff=backoff,
            now_ms=self._now_ms,
        )
        self.checkpointer = Checkpointer(
            member=self.member,
            publisher=self.publisher,
            jobs_topic=topics.jobs,
            checkpoint_ms=config.checkpoint_ms,
            session_timeout_ms=config.session_timeout_ms,
        )
        self.ownership = Ownership(
            member=self.member,
            timers=self.timers,
            topics=topics,
            owned=self.owned,
            loader=self.loader,
            intake=self.intake,
            checkpointer=self.checkpointer,
        )
        log.info("zone database: tzdata %s", TZDATA_VERSION)
        self.joined = False
        self.standby: Standby | None = None
        if self.loader.stores is not None and config.standby:
            self.standby = self.ownership.standby = Standby(
                settings,
                config,
                definitions=definitions,
                stores=self.loader.stores,
                partitions=topics.partitions(JOBS),
                now_ms=self._now_ms,
            )
            self.standby.start(owned=set())
        self._join()

    def _join(self) -> None:
        """Join the scheduler group: at once, or with standby stores once they are warm
        (``streams.scheduler.standby``)."""
        if self.joined or (self.standby is not None and not self.standby.warm):
            return
        ownership = self.ownership
        self.member.subscribe(
            [self.topics.jobs],
            assigned=ownership.assigned,
            revoking=ownership.revoking,
            lost=ownership.drop,
        )
        self.joined = True

    # -- the loop -----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                self.step()
        except BaseException:
            self.checkpointer.healthy = False
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
        standby = self.standby
        if standby is not None:
            standby.step(live=bool(self.owned))
            if not self.joined:
                self._join()
                return
        self.intake.read()
        checkpointer = self.checkpointer
        checkpointer.check_stall(owning=bool(self.owned))
        now = self._now_ms()
        if not checkpointer.firing_paused:
            ahead = now + self.config.lookahead_ms
            for owned in list(self.owned.values()):
                if not owned.loading:
                    self.emitter.emit(owned.core.due(ahead, FIRE_BATCH), now)
            self.emitter.ahead.prune(now)
        self.publisher.producer.poll(0)
        if checkpointer.step(self.ownership.live):
            self._gauge_state()
            if standby is not None:
                standby.gauge()

    def _rewind(self, error: PublishError) -> None:
        """Kafka refused some emitted record for good (a broker outage longer than the
        producer's delivery timeout): every owned partition is loaded again from its
        last committed checkpoint, so what came due since is emitted again (flagged
        ``possible_duplicate``) rather than lost, and the process goes on."""
        log.error(
            "%s: every partition goes back to its last checkpoint and re-emits "
            "from there (flagged possible_duplicate)",
            error,
        )
        if self.publisher.fatal:
            self.publisher.renew()
        self.publisher.written_off()  # what it emitted so far is re-emitted below
        self.checkpointer.abandon()
        self.emitter.flag_through(self._now_ms() + self.config.lookahead_ms)
        self.ownership.rewind()

    def close(self) -> None:
        """Hand every partition over: final checkpoint (unless the loop failed), leave
        the group."""
        try:
            self.checkpointer.checkpoint(self.ownership.live(), wait=HANDOVER_ACK_WAIT_S)
        finally:
            if self.standby is not None:
                self.standby.close()  # first: what is handed over next is just closed
            self.member.close()  # runs Ownership.revoking for what is still owned
            self.timers.close()
            self.publisher.close()

    def _on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        self.checkpointer.committed(error, partitions)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _gauge_state(self) -> None:
        cores = [o.core for o in self.owned.values()]
        metrics.jobs_loaded.set(sum(len(c.jobs) for c in cores))
        metrics.wheel_items.labels("near").set(sum(c.wheel.near for c in cores))
        metrics.wheel_items.labels("far").set(sum(c.wheel.far for c in cores))
        metrics.timers_pending.set(sum(len(c.timers) for c in cores))
        if self.rates is not None:
            metrics.count_deferred(self.rates.drain_deferred())
