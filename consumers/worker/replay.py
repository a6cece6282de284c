"""What a worker reads besides its runs: history, for dedup after an assignment, and
control, for cancels.

- ``HistoryReplay``: for each runs partition it owns, a worker reads the same partition
  of ``history`` (same key, same partition count) from the oldest run an earlier owner
  left uncommitted up to the end as of the assignment, and remembers final outcomes by
  run id (``consumers.core.dedup``). Runs that may have been executed before (already on
  the partition at the assignment, or flagged ``possible_duplicate``) wait until then.
- ``ControlFeed``: every worker reads all of ``control`` (the last ``lookback_ms`` of it
  on start, up to its end before any run starts): a cancelled run that is running is
  stopped, one not started yet never starts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.pending import Pending
from cronstream.runtime.kafka.clients import Consumer, TopicPartition, kafka_consumer
from cronstream.runtime.kafka.offsets import TimeIndexSource, offset_since, watermarks
from cronstream.runtime.kafka.records import is_record
from cronstream.runtime.settings import Settings
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import ControlCommand, text_headers, to_ms
from cronstream.schemas.serde import Codec

log = logging.getLogger("cronstream.worker")


def side_consumer(settings: Settings, config: WorkerConfig, role: str) -> Consumer:
    """A consumer the worker assigns partitions to itself (``role``: history, control)."""
    return kafka_consumer(settings, **{"group.id": f"{config.group}.{role}"})


class HistoryReading(Protocol):
    """What ``HistoryReplay`` asks of its history consumer (confluent-kafka's
    ``Consumer`` is one; unit tests pass a fake): partitions assigned, moved and let go
    one by one, batches of records."""

    def seek(self, partition: TopicPartition, /) -> None: ...
    def incremental_assign(self, partitions: list[TopicPartition], /) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition], /) -> None: ...
    def consume(self, num_messages: int, timeout: float) -> list[Any]: ...
    def close(self) -> None: ...


class HistoryReplay:
    def __init__(
        self, consumer: HistoryReading, *, topic: str, dedup: Dedup, lookup: TimeIndexSource
    ) -> None:
        self.consumer = consumer  # assigned the history partitions being read
        self.topic = topic
        self.dedup = dedup
        self.lookup = lookup  # answers offset look-ups (the history reader itself)
        # Per history partition: the next offset to read, where reading began, how far
        # it must go (the end as of the assignment); and which are assigned now.
        self.read_to: dict[int, int] = {}
        self.read_from: dict[int, int] = {}
        self.until: dict[int, int] = {}
        self.assigned: set[int] = set()

    def need(self, partition: int, since_ms: int, until: int) -> None:
        """Read history partition ``partition`` from ``since_ms`` up to offset ``until``
        (then it is let go: ``read``)."""
        self.until[partition] = max(self.until.get(partition, 0), until)
        start = min(offset_since(self.lookup, self.topic, partition, since_ms), until)
        read_from = self.read_from.get(partition)
        if read_from is None or start < read_from:
            self.read_from[partition] = start
            self.read_to[partition] = start
            if partition in self.assigned:
                self.consumer.seek(TopicPartition(self.topic, partition, start))
        # else: read from far enough back already; go on from where reading stopped.
        position = self.read_to[partition]
        if partition not in self.assigned and position < until:
            self.consumer.incremental_assign([TopicPartition(self.topic, partition, position)])
            self.assigned.add(partition)

    def ready(self, pending: Pending) -> bool:
        """Whether history is read far enough to decide whether ``pending`` ran."""
        needed = pending.history_needed
        return needed is None or self.read_to.get(pending.partition, -1) >= needed

    def read(self, timeout: float = 0) -> None:
        if not self.assigned:
            return
        for msg in self.consumer.consume(num_messages=5000, timeout=timeout):
            if not is_record(msg):
                continue
            self.read_to[msg.partition() or 0] = (msg.offset() or 0) + 1
            h = text_headers(msg.headers())
            try:
                self.dedup.note(h["run_id"], int(h["attempt"]), h["status"])
            except (KeyError, ValueError):
                continue  # not a cronstream outcome record
        self._let_go([p for p in self.assigned if self.read_to[p] >= self.until[p]])

    def keep_only(self, partitions: set[int]) -> None:
        """Forget the history partitions whose runs partitions are no longer owned."""
        dropped = [p for p in self.read_to if p not in partitions]
        self._let_go([p for p in dropped if p in self.assigned])
        for p in dropped:
            del self.read_to[p], self.read_from[p], self.until[p]

    def _let_go(self, partitions: list[int]) -> None:
        if partitions:
            self.consumer.incremental_unassign([TopicPartition(self.topic, p) for p in partitions])
            self.assigned.difference_update(partitions)

    def close(self) -> None:
        self.consumer.close()


class ControlFeed:
    def __init__(
        self,
        consumer: Consumer,
        *,
        topic: str,
        codec: Codec,
        lookup: Consumer,
        lookback_ms: int,
        cancels: dict[str, int],
        on_cancel: Callable[[str], None],
        reasons: dict[str, str] | None = None,
    ) -> None:
        self.consumer = consumer  # assigned the control partition
        self.topic = topic
        self.codec = codec
        self.lookup = lookup
        self.lookback_ms = lookback_ms
        self.cancels = cancels  # run id -> when the cancel was issued (ms)
        self.reasons = {} if reasons is None else reasons  # run id -> the cancel's reason
        self.on_cancel = on_cancel
        self.next_offset = 0

    def catch_up(self) -> None:
        """Read ``control`` from ``lookback_ms`` ago up to its end (60 s at most), so that
        recent cancels are honoured before any run starts; then go on reading it."""
        now_ms = int(time.time() * 1000)
        start = offset_since(self.lookup, self.topic, 0, now_ms - self.lookback_ms)
        self.consumer.assign([TopicPartition(self.topic, 0, start)])
        self.next_offset = start
        end = watermarks(self.lookup, TopicPartition(self.topic, 0))[1]
        deadline = time.monotonic() + 60
        while self.next_offset < end:
            if time.monotonic() > deadline:
                log.warning("control not read to its end in 60 s; going on reading it")
                break
            self.read(timeout=0.1)

    def read(self, timeout: float = 0) -> None:
        for msg in self.consumer.consume(num_messages=1000, timeout=timeout):
            if not is_record(msg):
                continue
            self.next_offset = (msg.offset() or 0) + 1
            try:
                command = self.codec.decode(msg.value(), ControlCommand)
            except DecodeError as exc:
                log.warning("ignoring undecodable control record: %s", exc)
                continue
            self.cancels[command.run_id] = to_ms(command.issued_at)
            if command.reason:
                self.reasons[command.run_id] = command.reason
            self.on_cancel(command.run_id)

    def forget_before(self, cut_ms: int) -> None:
        """Drop cancels issued before ``cut_ms`` (their runs are long settled)."""
        for run_id in [k for k, issued in self.cancels.items() if issued < cut_ms]:
            del self.cancels[run_id]
            self.reasons.pop(run_id, None)

    def close(self) -> None:
        self.consumer.close()
