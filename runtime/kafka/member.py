"""Consumer-group membership, written once for every role that reads in a group.

``GroupMember`` is one process's membership of a group (the scheduler, the workers, the
history sink, the archiver, the admission, the API's answer reader): it subscribes,
calls the role's hooks when partitions move, reads with the one rule for broker errors,
and commits with the one rule for refused commits (``commit``, below).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cronstream.runtime.kafka.clients import Balance, consume_ready, group_consumer
from cronstream.runtime.kafka.groups import set_group_timeouts
from cronstream.runtime.kafka.offsets import is_transient, partition_names, serving
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.settings import Settings

Partitions = list[TopicPartition]
# What to load for partitions just assigned; may return where to start reading them
# (the member assigns them there), or None: from the group's committed offsets.
AssignHook = Callable[[Partitions], Partitions | None]
# What to flush and commit for partitions about to move (revoke), or to drop for
# partitions the group already gave away (lost).
PartitionsHook = Callable[[Partitions], None]
RETRY_FETCH_S = 0.1  # after a transient refusal to fetch (a broker restarting)


def _nothing(partitions: Partitions) -> None:
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberConfig:
    """Who a role is in its consumer group: the group, its member name (the client id
    the broker and the logs show) and its session timeout (how fast a killed member's
    partitions move to another). Each role's config extends it with its own settings."""

    group: str
    name: str
    session_timeout_ms: int = 10_000


def commit(
    consumer: Any,
    offsets: Sequence[TopicPartition],
    *,
    wait: bool,
    log: logging.Logger,
    then: str = "the records after the committed offsets are read again",
) -> bool:
    """Commit ``offsets`` under the one rule for refused commits (``GroupMember``):
    True when committed (or, ``wait=False``, sent); False when the group refused it
    (logged, with ``then``: what re-delivery means for the caller's role). A fatal
    error (this member fenced) raises."""
    if not offsets:
        return True
    try:
        consumer.commit(offsets=list(offsets), asynchronous=not wait)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if error is not None and hasattr(error, "fatal") and error.fatal():
            raise
        log.warning("commit refused (%s); %s", error if error is not None else exc, then)
        return False
    return True


class GroupMember:
    """One process's membership of a consumer group.

    **Joining.** As ``config`` says (``MemberConfig``), with ``group_consumer`` settings
    (manual commits, the role's session timeout, partitions divided by ``balance``:
    ``count``, cooperative-sticky on the classic protocol, or ``per-topic``, the
    broker's range assignor on KIP-848's: then the member first sets its group's
    session timeout on the broker, ``runtime.kafka.groups``); ``instance_id`` makes the
    membership static (``group.instance.id``: a process started again under the same
    id gets its partitions back at once, not after the session timeout).

    **Partitions moving.** The role passes hooks; each runs inside ``consume``/``poll``
    (or ``close``), on this thread:

    - ``assigned(partitions)``: load what the partitions need. It may return where to
      start reading them (the member assigns them there); None reads them from the
      group's committed offsets.
    - ``revoking(partitions)``: the partitions move to another member once it returns.
      Commit before revoke: the role makes durable what it finished for them and
      commits it (its own commit procedure, through ``commit``), and forgets them.
    - ``lost(partitions)``: the group already gave them away (this member missed its
      session): drop their state; a commit would be refused (the next owner reads them
      again from the last committed offsets).

    A hook never calls this consumer's ``poll``, ``consume``, ``close`` or
    ``list_topics``: inside its own poll that aborts the process
    (``runtime.kafka.offsets.refresh_metadata`` says why, and skips its refresh there).

    **The one rule for a refused commit: it is re-delivery, not loss.** Every role
    commits an offset only after what it covers is durable (each role's commit
    procedure), and a commit covers every record before it. A commit the group refuses
    (a rebalance under way, the partition moved, the coordinator away or timing out)
    therefore leaves the previous offset standing: the records after it are read again,
    by this member or the partition's next owner, and each role makes a second reading
    harmless (the worker dedups runs, the sink rewrites the same rows, the archiver
    skips what its checkpoint holds, the scheduler re-emits flagged
    ``possible_duplicate``). So ``commit`` logs the refusal and returns False, the role
    goes on, and its next commit covers the same records. Synchronous and asynchronous
    commits follow the same rule. A *fatal* error (librdkafka's fatal flag: this member
    was fenced, e.g. another process took its ``group.instance.id``) raises: the
    process no longer speaks for its partitions and must stop.

    **Fatal consumer errors.** Reading (``consume``, ``poll``) retries a transient
    refusal (a broker restarting, a leader moving: logged, then nothing read this time,
    after ``RETRY_FETCH_S``); any other client error raises. Each record's own error is
    checked at the edge (``runtime.kafka.records.is_record``).
    """

    def __init__(
        self,
        settings: Settings,
        config: MemberConfig,
        *,
        log: logging.Logger,
        instance_id: str | None = None,
        balance: Balance = "count",
        **overrides: Any,
    ) -> None:
        static = {"group.instance.id": instance_id} if instance_id else {}
        if balance == "per-topic":
            set_group_timeouts(settings, config.group, config.session_timeout_ms, log=log)
        self.consumer: Consumer = group_consumer(
            settings,
            group=config.group,
            name=config.name,
            session_timeout_ms=config.session_timeout_ms,
            balance=balance,
            **static,
            **overrides,
        )
        self.log = log
        self.assigned: AssignHook = _nothing
        self.revoking: PartitionsHook = _nothing
        self.lost: PartitionsHook = _nothing

    def subscribe(
        self,
        topics: list[str],
        *,
        assigned: AssignHook = _nothing,
        revoking: PartitionsHook = _nothing,
        lost: PartitionsHook = _nothing,
    ) -> None:
        """Join the group on ``topics`` (names, or ``^`` patterns) with the role's hooks."""
        self.assigned, self.revoking, self.lost = assigned, revoking, lost
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # The hooks run inside this consumer's poll: ``serving`` says so to what they call
    # (``runtime.kafka.offsets.refresh_metadata`` must not call back into it).
    def _on_assign(self, consumer: Consumer, partitions: Partitions) -> None:
        with serving(consumer):
            starts = self.assigned(partitions)
        if starts is not None:
            consumer.incremental_assign(starts)
        if partitions:
            self.log.info("assigned %s", partition_names(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: Partitions) -> None:
        with serving(consumer):
            self.revoking(partitions)
        if partitions:
            self.log.info("revoked %s", partition_names(partitions))

    def _on_lost(self, consumer: Consumer, partitions: Partitions) -> None:
        self.log.warning("partitions lost: %s", partition_names(partitions))
        with serving(consumer):
            self.lost(partitions)

    # -- reading --------------------------------------------------------------------------
    def consume(self, most: int, timeout: float, *, ready: bool = False) -> list[Any]:
        """Up to ``most`` records (or events, ``is_record``) within ``timeout``; with
        ``ready``, returned as soon as the first arrives (``consume_ready``). A transient
        refusal reads nothing this time (the rule above)."""
        try:
            if ready:
                return consume_ready(self.consumer, most, timeout)
            return list(self.consumer.consume(num_messages=most, timeout=timeout))
        except KafkaException as exc:
            self._refused(exc)
            return []

    def poll(self, timeout: float) -> ConsumedMessage | None:
        """One record (or event) within ``timeout``, under the same rule as ``consume``."""
        try:
            msg: ConsumedMessage | None = self.consumer.poll(timeout)
        except KafkaException as exc:
            self._refused(exc)
            return None
        return msg

    def wait(
        self, seconds: float, stop: Callable[[], bool], keep: Callable[[ConsumedMessage], object]
    ) -> bool:
        """Wait ``seconds`` polling, so that the group keeps this member (a rebalance
        runs the role's hooks); a record that arrives anyway goes to ``keep``. False
        as soon as ``stop()`` (the role is asked to stop). What a role waiting out an
        outage (the registry, Cassandra, the broker) polls with."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if stop():
                return False
            msg = self.poll(min(0.2, left))
            if msg is not None:
                keep(msg)
        return True

    def _refused(self, exc: KafkaException) -> None:
        if not is_transient(exc):
            raise exc
        self.log.warning("fetching refused for now (%s); retrying", exc.args[0])
        time.sleep(RETRY_FETCH_S)

    # -- committing -----------------------------------------------------------------------
    def commit(
        self,
        offsets: Sequence[TopicPartition],
        *,
        wait: bool,
        then: str = "the records after the committed offsets are read again",
    ) -> bool:
        """``commit`` (the module function) on this member's consumer."""
        return commit(self.consumer, offsets, wait=wait, log=self.log, then=then)

    def assignment(self) -> Partitions:
        return list(self.consumer.assignment())

    def close(self) -> None:
        """Leave the group: ``revoking`` runs for what is still assigned."""
        self.consumer.close()
