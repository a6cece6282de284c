"""Input held while the schema registry is unreachable: the scheduler's and the workers'.

A record written with a schema id this process has not seen yet cannot be read without
the registry. When the registry is down (unreachable, or a server error) that is no
fault of the record: dead-lettering it would drop a good definition or run, and
crashing would stop every partition. The role instead keeps doing what needs no
registry (the scheduler fires what it has loaded, the worker finishes and settles what
runs), holds the record it could not read and every one after it from the same
consumer, in order (``Held``), pauses their partitions (polling goes on, so the group
membership stays), and tries again after 0.5 s, 1 s, ... up to 30 s (``Backoff``).
When a retry reads everything held, the partitions are fetched again.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.records import ConsumedMessage

FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0
Key = tuple[str, int]  # (topic, partition)


class Backoff:
    """When reading may ask the registry again. ``held`` says, in the first warning,
    what waits meanwhile (and what goes on)."""

    def __init__(self, log: logging.Logger, held: str) -> None:
        self.log = log
        self.held = held
        self.since = 0.0
        self.delay = 0.0
        self.retry_at = 0.0

    @property
    def stalled(self) -> bool:
        """Reading waits for the registry (from the first failure to ``passed``)."""
        return self.since > 0

    def failed(self, reason: Exception) -> None:
        """A record could not be read for want of the registry: wait longer."""
        now = time.monotonic()
        if not self.since:
            self.since, self.delay = now, FIRST_DELAY_S
            self.log.warning("schema registry unavailable (%s): %s", reason, self.held)
        else:
            self.delay = min(2 * self.delay, MAX_DELAY_S)
        self.retry_at = now + self.delay

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def passed(self) -> None:
        """A retry read everything it had to: the registry answers again."""
        if self.since:
            self.log.info(
                "schema registry answers again after %.1f s: reading resumed",
                time.monotonic() - self.since,
            )
            self.since = 0.0


class Pausing(Protocol):
    """A consumer that pauses and resumes the fetching of partitions (confluent-kafka's
    ``Consumer`` is one; unit tests pass fakes that record it): what ``Held`` and the
    worker's intake ask of theirs."""

    def pause(self, partitions: list[TopicPartition], /) -> None: ...
    def resume(self, partitions: list[TopicPartition], /) -> None: ...


class Holding(Pausing, Protocol):
    """What ``Held`` asks of its consumer: pausing, the partitions assigned, one poll."""

    def assignment(self) -> list[TopicPartition]: ...
    def poll(self, timeout: float, /) -> ConsumedMessage | None: ...


class Held:
    """Records of one consumer waiting for the registry, in the order they were read;
    their partitions are paused meanwhile."""

    def __init__(self, consumer: Holding) -> None:
        self.consumer = consumer
        self.records: list[ConsumedMessage] = []
        self.paused: set[Key] = set()

    def __len__(self) -> int:
        return len(self.records)

    def hold(self, records: list[ConsumedMessage]) -> None:
        """Keep ``records`` (after those held already) and pause their partitions."""
        self.records.extend(records)
        self.pause_partitions_of(records)

    def pause_partitions_of(self, records: list[ConsumedMessage]) -> None:
        """Pause the partitions of ``records`` (kept elsewhere, or not at all)."""
        fresh = {(r.topic() or "", r.partition() or 0) for r in records} - self.paused
        if fresh:
            self.consumer.pause([TopicPartition(t, p) for t, p in fresh])
            self.paused |= fresh

    def pause_all(self) -> None:
        """Pause every assigned partition, not only the held records' ones."""
        assigned = list(self.consumer.assignment())
        self.consumer.pause(assigned)
        self.paused |= {(tp.topic, tp.partition) for tp in assigned}

    def poll(self, timeout: float) -> None:
        """Keep the group membership while fetching is paused: a record of a partition
        assigned meanwhile is held too, and its partition paused."""
        msg = self.consumer.poll(timeout)
        if msg is not None:
            self.hold([msg])

    def take(self) -> list[ConsumedMessage]:
        """The held records, to be read again in order (``hold`` them again if the
        registry still does not answer)."""
        records, self.records = self.records, []
        return records

    def resume(self, partitions: list[TopicPartition] | None = None) -> None:
        """Nothing is held any more: fetch ``partitions`` again (by default the paused
        ones still assigned)."""
        if partitions is None:
            if not self.paused or self.records:
                return
            owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            partitions = [TopicPartition(t, p) for t, p in self.paused if (t, p) in owned]
        if partitions:
            self.consumer.resume(partitions)
        self.paused = set()

    def drop(self, gone: set[Key]) -> None:
        """Revoked (or assigned afresh: read again from the start) partitions' records
        are left for their next reading."""
        self.records = [r for r in self.records if (r.topic(), r.partition()) not in gone]
        self.paused -= gone

    def drop_partitions(self, numbers: set[int]) -> None:
        """``drop`` by partition number (a consumer of one topic)."""
        self.records = [r for r in self.records if r.partition() not in numbers]
        self.paused = {(t, p) for t, p in self.paused if p not in numbers}
