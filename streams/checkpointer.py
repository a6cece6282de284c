"""The scheduler's checkpoint procedure (``Checkpointer.checkpoint``), and when firing
must wait for it: while the broker has not acknowledged what was emitted, and after the
loop stood still long enough for the group to have moved the partitions. The
checkpoint itself (what is stored as the committed offsets' metadata) is
``streams.checkpoint.Checkpoint``."""

from __future__ import annotations

import logging
import time

from runtime import metrics
from runtime.kafka.clients import TopicPartition
from runtime.kafka.member import GroupMember
from runtime.kafka.publisher import Publisher
from streams.checkpoint import Checkpoint
from streams.owned import Owned

log = logging.getLogger("cronstream.scheduler")
# How long a checkpoint waits for the broker to acknowledge what was emitted. Normally
# milliseconds; longer means the broker is down or restarting: the checkpoint is put off
# (the previous one stands) and firing pauses until the broker acknowledges again.
ACK_WAIT_S = 1.0
# At a handover (revoke, close) and when taking back a partition lost in an outage.
HANDOVER_ACK_WAIT_S = 10.0


class Checkpointer:
    def __init__(
        self, *, member: GroupMember, publisher: Publisher, jobs_topic: str,
        checkpoint_ms: int, session_timeout_ms: int,
    ) -> None:  # fmt: skip
        self.member = member
        self.publisher = publisher
        self.jobs_topic = jobs_topic
        self.every_s = checkpoint_ms / 1000
        # A loop that stood still longer than this may have lost its partitions.
        self.frozen_s = session_timeout_ms / 2000
        self.next_at = 0.0
        # Firing paused: the broker has not acknowledged what was emitted (``checkpoint``).
        self.undelivered = False
        # Firing paused: the loop stood still long enough for the group to have moved
        # the partitions (a frozen process); a committed checkpoint confirms them.
        self.unconfirmed = False
        self._last_step = time.monotonic()
        # False once the loop failed (e.g. a delivery error): from then on no checkpoint
        # may claim what was emitted, not even the one a handover would take.
        self.healthy = True

    @property
    def firing_paused(self) -> bool:
        return self.undelivered or self.unconfirmed

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    def checkpoint(self, partitions: list[Owned], *, wait: float = ACK_WAIT_S) -> None:
        """Make the partitions' progress durable. The procedure, in order:

        1. Snapshot each partition's checkpoint (fired-through, jobs and timers offsets).
        2. Flush the producer: every run request and history record emitted up to the
           snapshot is acknowledged by Kafka, within ``wait`` seconds. If not (the
           broker is down or restarting), stop here: the previous checkpoint stands,
           firing pauses until the broker acknowledges again (what is emitted meanwhile
           is what a next owner would re-emit), and the next checkpoint tries again, so
           progress is committed as soon as the broker is back. A record Kafka refused
           for good raises PublishError (the caller rewinds: ``Processor.step``).
        3. With ``--state-dir``, each store deletes the entries the snapshot covers (a
           store ahead of the commit lacks only entries of acknowledged slots).
        4. Commit the snapshot as the jobs partitions' offsets with the checkpoint as
           metadata (synchronously; ``GroupMember``'s rule: refused is logged, fatal
           raises).

        A crash before step 4, or a commit the group refuses (rebalance in progress,
        partition already moved), leaves the previous checkpoint: the next owner re-emits
        from there, flagged ``possible_duplicate``. Nothing is skipped.
        """
        self.next_at = time.monotonic() + self.every_s
        if not partitions or not self.healthy:
            self.undelivered = self.unconfirmed = False
            return
        # 1. snapshot
        snaps = [(owned, owned.snapshot()) for owned in partitions]
        # 2. flush
        if not self.publisher.settled(wait):
            if not self.undelivered:
                log.warning("the broker has not acknowledged what was emitted within %.0f s: "
                            "checkpoint put off, firing paused until it does", wait)  # fmt: skip
            self.undelivered = True
            return
        if self.undelivered:
            log.info("the broker acknowledges again: checkpoint taken, firing resumed")
            self.undelivered = False
        for owned, snap in snaps:  # 3. the stores (--state-dir)
            if owned.state is not None:
                owned.state.flush(snap.fired_through, snap.jobs_offset)
        # 4. commit
        offsets = [self.offset(owned.partition, snap) for owned, snap in snaps]
        # Refused mid-rebalance: the partitions may already be someone else's. The
        # previous checkpoint stands; the next owner re-emits from it, flagged.
        if not self.member.commit(offsets, wait=True, then="the previous checkpoint stands"):
            metrics.checkpoint_failures.inc()
            return
        for owned, snap in snaps:
            owned.base = snap
        if self.unconfirmed:
            log.info("checkpoint committed: the partitions are still ours, firing resumed")
            self.unconfirmed = False

    def commit_retained(self, partition: int, snapshot: Checkpoint, then: str) -> bool:
        """Commit the progress of a partition lost in an outage, once the broker
        acknowledged what it covers (``Ownership``'s take-back). PublishError: a
        record emitted before failed for good."""
        if not self.publisher.settled(HANDOVER_ACK_WAIT_S):
            return False
        return self.member.commit([self.offset(partition, snapshot)], wait=True, then=then)

    def check_stall(self, owning: bool) -> None:
        """A loop that stood still for more than half the session timeout (the process
        was frozen: SIGSTOP, a VM pause) may have lost its partitions without hearing
        it yet: firing them now would repeat what their new owner fired, unflagged.
        Firing waits until a checkpoint commit, fenced by the group generation,
        succeeds (the partitions are still ours) or the loss arrives (``Ownership``)."""
        now = time.monotonic()
        gap, self._last_step = now - self._last_step, now
        if gap > self.frozen_s and owning:
            log.warning("the loop stood still %.1f s: firing waits until a checkpoint "
                        "confirms the partitions are still ours", gap)  # fmt: skip
            self.unconfirmed = True
            self.next_at = 0.0

    def offset(self, partition: int, checkpoint: Checkpoint) -> TopicPartition:
        return TopicPartition(self.jobs_topic, partition, max(checkpoint.jobs_offset, 0),
                              checkpoint.to_metadata())  # fmt: skip
