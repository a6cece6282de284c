"""The scheduler's checkpoint procedure (``Checkpointer.checkpoint``), and when firing
must wait for it: while the broker has not acknowledged what was emitted, and after the
loop stood still long enough for the group to have moved the partitions. The
checkpoint itself (what is stored as the committed offsets' metadata) is
``streams.scheduler.checkpoint.Checkpoint``.

The loop's periodic checkpoint (``step``) takes the same steps without holding the
loop: it snapshots, then looks at each iteration whether the broker acknowledged what
was emitted up to the snapshot (``Publisher.acknowledged``), then sends the commit and
learns its answer from the consumer's commit callback (``committed``). Firing goes on
meanwhile: waiting for acknowledgements and a commit round trip on the loop put the
fire skew p99 on the 3-node cluster at 141 ms. A handover (revoke, close)
still waits for both (``checkpoint``): the partitions leave once it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from cronstream.runtime import metrics
from cronstream.runtime.kafka.clients import KafkaError, KafkaException, TopicPartition
from cronstream.runtime.kafka.publisher import Mark, Publisher
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.owned import Owned

log = logging.getLogger("cronstream.scheduler")
# How long a checkpoint waits for the broker to acknowledge what was emitted. Normally
# milliseconds; longer means the broker is down or restarting: the checkpoint is put off
# (the previous one stands) and firing pauses until the broker acknowledges again.
ACK_WAIT_S = 1.0
# At a handover (revoke, close) and when taking back a partition lost in an outage.
HANDOVER_ACK_WAIT_S = 10.0
# A commit sent by the loop's checkpoint whose answer has not come in this long is given
# up (the previous checkpoint stands): the next one is taken afresh.
COMMIT_ANSWER_S = 30.0
STANDS = "the previous checkpoint stands"
_NO_ANSWER = object()


@dataclass
class _Pending:
    """A periodic checkpoint under way: its snapshots, the publisher's mark they cover,
    and, once sent, the commit and its answer (``_NO_ANSWER`` until it arrives)."""

    snaps: list[tuple[Owned, Checkpoint]]
    mark: Mark
    began: float
    sent: frozenset[tuple[str, int, int]] | None = None
    sent_at: float = 0.0
    answer: object = field(default=_NO_ANSWER)


class Committer(Protocol):
    """What the checkpointer asks of its group member (``runtime.kafka.member.GroupMember``
    is one; unit tests pass a fake): commit offsets, waiting or not, with what happens
    after a refusal (``then``, for the log); False when the commit was refused."""

    def commit(self, offsets: Sequence[TopicPartition], *, wait: bool, then: str) -> bool: ...


class Checkpointer:
    def __init__(
        self,
        *,
        member: Committer,
        publisher: Publisher,
        jobs_topic: str,
        checkpoint_ms: int,
        session_timeout_ms: int,
    ) -> None:
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
        self._pending: _Pending | None = None

    @property
    def firing_paused(self) -> bool:
        return self.undelivered or self.unconfirmed

    def due(self) -> bool:
        return time.monotonic() >= self.next_at

    # -- the loop's checkpoint, off the fire path -----------------------------------------
    def step(self, live: Callable[[], list[Owned]]) -> bool:
        """Each loop iteration: move a checkpoint under way on, or begin one when due
        (True then). ``live()``: the partitions owned and loaded now. PublishError: a
        record emitted before failed for good (the caller rewinds, ``abandon``)."""
        if self._pending is not None:
            self._advance(live)
            return False
        if not self.due():
            return False
        self.next_at = time.monotonic() + self.every_s
        partitions = live()
        if not partitions or not self.healthy:
            self.undelivered = self.unconfirmed = False
            return True
        snaps = [(owned, owned.snapshot()) for owned in partitions]  # 1. snapshot
        self._pending = _Pending(snaps, self.publisher.mark(), time.monotonic())
        self._advance(live)
        return True

    def _advance(self, live: Callable[[], list[Owned]]) -> None:
        pending = self._pending
        assert pending is not None
        if pending.sent is None:
            self._send(pending, live)
            return
        if pending.answer is _NO_ANSWER:
            if time.monotonic() - pending.sent_at > COMMIT_ANSWER_S:
                log.warning(
                    "no answer to the checkpoint's commit in %.0f s; %s", COMMIT_ANSWER_S, STANDS
                )
                self._pending = None
                metrics.checkpoint_failures.inc()
            return
        self._pending = None
        error = pending.answer
        if isinstance(error, KafkaError):
            if error.fatal():  # this member is fenced: as a refused synchronous commit
                raise KafkaException(error)
            log.warning("commit refused (%s); %s", error, STANDS)
            metrics.checkpoint_failures.inc()
            return
        self._committed(pending.snaps)

    def _send(self, pending: _Pending, live: Callable[[], list[Owned]]) -> None:
        """2. once the broker acknowledged everything up to the snapshot, 3. the stores,
        4. the commit, sent without waiting."""
        if not self.publisher.acknowledged(pending.mark):
            if time.monotonic() - pending.began > ACK_WAIT_S:
                self._unacknowledged(ACK_WAIT_S)
            return
        self._acknowledged()
        # Only partitions still owned (loaded objects of this ownership): one revoked or
        # lost meanwhile may be another member's now.
        owned_now = {id(owned) for owned in live()}
        pending.snaps = [(o, snap) for o, snap in pending.snaps if id(o) in owned_now]
        offsets = self._durable(pending.snaps)
        if not offsets:
            self._pending = None
            return
        pending.sent, pending.sent_at = _committed_key(offsets), time.monotonic()
        if not self.member.commit(offsets, wait=False, then=STANDS):
            self._pending = None
            metrics.checkpoint_failures.inc()

    def committed(self, error: KafkaError | None, partitions: Sequence[TopicPartition]) -> None:
        """The consumer's commit callback (served by its poll): the answer to the
        checkpoint under way when it is its commit; others (a handover's) are ignored."""
        pending = self._pending
        if pending is None or pending.sent is None or pending.sent != _committed_key(partitions):
            return
        if error is None:
            error = next((tp.error for tp in partitions if tp.error is not None), None)
        pending.answer = error

    def abandon(self) -> None:
        """Forget the checkpoint under way (a rewind, a stall, a handover): its answer,
        if one comes, is ignored; the next checkpoint snapshots afresh."""
        self._pending = None
        self.undelivered = False

    def checkpoint(self, partitions: list[Owned], *, wait: float = ACK_WAIT_S) -> None:
        """Make the partitions' progress durable now, waiting for each step (a handover:
        revoke, close; the loop's own checkpoint takes the same steps without waiting,
        ``step``). The procedure, in order:

        1. Snapshot each partition's checkpoint (fired-through, jobs and timers offsets).
        2. Flush the producer: every run request and history record emitted up to the
           snapshot is acknowledged by Kafka, within ``wait`` seconds. If not (the
           broker is down or restarting), stop here: the previous checkpoint stands,
           firing pauses until the broker acknowledges again (what is emitted meanwhile
           is what a next owner would re-emit), and the next checkpoint tries again, so
           progress is committed as soon as the broker is back. A record Kafka refused
           for good raises PublishError (the caller rewinds: ``Scheduler.step``).
        3. With ``--state-dir``, each store deletes the entries the snapshot covers (a
           store ahead of the commit lacks only entries of acknowledged slots).
        4. Commit the snapshot as the jobs partitions' offsets with the checkpoint as
           metadata (synchronously; ``GroupMember``'s rule: refused is logged, fatal
           raises).

        A crash before step 4, or a commit the group refuses (rebalance in progress,
        partition already moved), leaves the previous checkpoint: the next owner re-emits
        from there, flagged ``possible_duplicate``. Nothing is skipped.
        """
        self._pending = None  # superseded by this one (its answer is ignored)
        self.next_at = time.monotonic() + self.every_s
        if not partitions or not self.healthy:
            self.undelivered = self.unconfirmed = False
            return
        # 1. snapshot
        snaps = [(owned, owned.snapshot()) for owned in partitions]
        # 2. flush
        if not self.publisher.settled(wait):
            self._unacknowledged(wait)
            return
        self._acknowledged()
        # 3. the stores, 4. commit. Refused mid-rebalance: the partitions may already be
        # someone else's. The previous checkpoint stands; the next owner re-emits from
        # it, flagged.
        if not self.member.commit(self._durable(snaps), wait=True, then=STANDS):
            metrics.checkpoint_failures.inc()
            return
        self._committed(snaps)

    def _unacknowledged(self, waited_s: float) -> None:
        """What a checkpoint covers is not acknowledged after ``waited_s``: firing pauses."""
        if not self.undelivered:
            log.warning(
                "the broker has not acknowledged what was emitted within %.0f s: "
                "checkpoint put off, firing paused until it does",
                waited_s,
            )
        self.undelivered = True

    def _acknowledged(self) -> None:
        if self.undelivered:
            log.info("the broker acknowledges again: checkpoint taken, firing resumed")
            self.undelivered = False

    def _durable(self, snaps: list[tuple[Owned, Checkpoint]]) -> list[TopicPartition]:
        """3. each store (--state-dir) drops what the snapshots cover; the offsets to
        commit (4.)."""
        for owned, snap in snaps:
            if owned.state is not None:
                owned.state.flush(snap.fired_through, snap.jobs_offset)
        return [self.offset(owned.partition, snap) for owned, snap in snaps]

    def _committed(self, snaps: list[tuple[Owned, Checkpoint]]) -> None:
        """The commit of ``snaps`` succeeded: each partition's base moves to its snapshot."""
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
            log.warning(
                "the loop stood still %.1f s: firing waits until a checkpoint "
                "confirms the partitions are still ours",
                gap,
            )
            self.unconfirmed = True
            self.next_at = 0.0
            # A commit sent before the stall confirms nothing about now.
            self._pending = None

    def offset(self, partition: int, checkpoint: Checkpoint) -> TopicPartition:
        return TopicPartition(
            self.jobs_topic, partition, max(checkpoint.jobs_offset, 0), checkpoint.to_metadata()
        )


def _committed_key(partitions: Sequence[TopicPartition]) -> frozenset[tuple[str, int, int]]:
    """What identifies a commit in its callback: each partition's committed offset."""
    return frozenset((tp.topic, tp.partition, tp.offset) for tp in partitions)
