"""The partitions the scheduler processor owns (``Ownership.owned``), and how they
come and go: assigned by the group (``GroupMember``: each jobs partition with the same
partition of the timers topic, loaded from the committed checkpoint), revoked (a last
checkpoint, then handed over), lost (handed over without one; the progress it could
not commit is kept, and taken back if the same partition comes back unchanged), and
rewound (every partition loaded again from its last committed checkpoint).
"""

from __future__ import annotations

import logging

from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.clients import OFFSET_BEGINNING, Consumer, TopicPartition
from cronstream.runtime.kafka.member import GroupMember
from cronstream.runtime.kafka.offsets import committed, watermarks
from cronstream.schemas.catalog import JOBS, Topics
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.checkpointer import HANDOVER_ACK_WAIT_S, Checkpointer
from cronstream.streams.scheduler.intake import Intake
from cronstream.streams.scheduler.loading import Loader, check_zone_database
from cronstream.streams.scheduler.owned import Owned
from cronstream.streams.scheduler.standby import Standby
from cronstream.streams.scheduler.state import resume_point

log = logging.getLogger("cronstream.scheduler")


class Ownership:
    def __init__(
        self,
        *,
        member: GroupMember,
        timers: Consumer,
        topics: Topics,
        owned: dict[int, Owned],
        loader: Loader,
        intake: Intake,
        checkpointer: Checkpointer,
    ) -> None:
        self.member = member
        self.consumer = member.consumer
        self.timers = timers
        self.topics = topics
        self.owned = owned  # the only writer of this map
        self.loader = loader
        self.intake = intake
        self.checkpointer = checkpointer
        self.rates = loader.rates
        loader.on_live = self.gauge
        # Snapshots of partitions lost before their progress was committed: taken back
        # when the same partition comes back with the checkpoint it had (``_take_back``).
        self._retained: dict[int, tuple[Checkpoint | None, Checkpoint]] = {}
        # Standby stores (``streams.scheduler.standby``): a partition assigned is taken from its
        # standby store; one handed over becomes one again.
        self.standby: Standby | None = None

    def live(self) -> list[Owned]:
        return [o for o in self.owned.values() if not o.loading]

    def assigned(self, partitions: list[TopicPartition]) -> list[TopicPartition] | None:
        """Load the partitions; they are read from the returned offsets (the jobs
        partition from its beginning, or its store's offset)."""
        if not partitions:
            return None
        consumer, loader = self.consumer, self.loader
        starts, timer_starts = [], []
        self.intake.forget({tp.partition for tp in partitions})
        for tp in committed(consumer, partitions):
            checkpoint = self._take_back(tp, Checkpoint.from_metadata(tp.metadata))
            check_zone_database(tp.partition, checkpoint)
            low, high = watermarks(consumer, tp)
            standby = self.standby.release(tp.partition) if self.standby is not None else None
            state, start, fallback = loader.open_state(tp.partition, checkpoint, low, standby)
            owned = self.owned[tp.partition] = loader.load(
                tp.partition,
                checkpoint,
                load_end=high,
                jobs_next=start,
                state=state,
                fired_through=fallback,
            )
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
                loader.go_live(owned)
        self.timers.incremental_assign(timer_starts)
        self.gauge()
        return starts

    def revoking(self, partitions: list[TopicPartition]) -> None:
        live = [self.owned[tp.partition] for tp in partitions if tp.partition in self.owned]
        try:
            self.checkpointer.checkpoint(
                [o for o in live if not o.loading], wait=HANDOVER_ACK_WAIT_S
            )
        except PublishError as exc:  # the next owner re-emits from the last checkpoint
            log.warning("no checkpoint at the handover: %s", exc)
        self.drop(partitions)

    def drop(self, partitions: list[TopicPartition]) -> None:
        """Hand ``partitions`` over (revoked, or lost)."""
        gone = [self.owned.pop(tp.partition) for tp in partitions if tp.partition in self.owned]
        healthy = self.checkpointer.healthy
        for owned in gone:
            if owned.state is not None and self.standby is not None:
                self.standby.adopt(owned.partition, owned.state)  # kept open
            elif owned.state is not None:
                owned.state.close()
            snapshot = owned.snapshot()
            if not owned.loading and healthy and snapshot != owned.base:
                self._retained[owned.partition] = (owned.base, snapshot)
        self.intake.forget({tp.partition for tp in partitions})
        self.loader.partitions_changed()
        if gone:
            self.timers.incremental_unassign(
                [TopicPartition(self.topics.timers, o.partition) for o in gone]
            )
            log.info("partitions %s handed over", [o.partition for o in gone])
        self.gauge()

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
            if not self.checkpointer.commit_retained(
                tp.partition, snapshot, then=f"partition {tp.partition}: {why}"
            ):
                return committed_
        except PublishError as exc:
            # Some record it emitted failed, and any snapshot may cover it (the error is
            # raised once): none is taken back, every partition re-emits from its
            # committed checkpoint (found by the broker restart test).
            self._retained.clear()
            log.warning("partition %d: %s (%s)", tp.partition, why, exc)
            return committed_
        log.info(
            "partition %d: took back the progress made before it was lost (%s)",
            tp.partition,
            snapshot,
        )
        return snapshot

    def rewind(self) -> None:
        """Every owned partition loaded again from its last committed checkpoint, and
        read again from there (``Scheduler.step``: Kafka refused a record for good)."""
        self._retained.clear()
        self.intake.forget(set(self.owned))
        for old in list(self.owned.values()):
            base, meta = old.base, old.state.meta() if old.state is not None else None
            start, fallback = resume_point(meta, base, 0)
            owned = self.owned[old.partition] = self.loader.load(
                old.partition,
                base,
                load_end=old.jobs_next,
                jobs_next=start,
                state=old.state,
                fired_through=fallback,
            )
            self.consumer.seek(
                TopicPartition(self.topics.jobs, old.partition, start or OFFSET_BEGINNING)
            )
            timers_from = base.timers_from if base else OFFSET_BEGINNING
            self.timers.seek(TopicPartition(self.topics.timers, old.partition, timers_from))
            if base:
                owned.timers_next = base.timers_from
        self.gauge()

    def gauge(self) -> None:
        """The partitions owned, loading and live; this processor's share of each
        tenant's fire rate."""
        if self.rates is not None:  # this processor's share of each tenant's rate
            self.rates.share = max(1, len(self.owned)) / self.topics.partitions(JOBS)
        loading = sum(1 for o in self.owned.values() if o.loading)
        metrics.partitions_owned.labels("loading").set(loading)
        metrics.partitions_owned.labels("live").set(len(self.owned) - loading)
        metrics.partitions_total.set(self.topics.partitions(JOBS))
