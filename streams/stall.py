"""Input the scheduler holds while the schema registry is unreachable.

A definition or timer written with a schema id this processor has not seen yet cannot
be read without the registry. When the registry is down (unreachable, or a server
error) that is no fault of the record: dead-lettering it would drop a good definition,
and crashing would stop every partition. The processor instead keeps firing what it
has loaded, holds the record it could not read and every one after it from the same
consumer, in order, pauses that consumer's partitions (polling goes on, so the group
membership stays), and tries again after 0.5 s, 1 s, ... up to 30 s (``Backoff``).
A partition being settled waits the same way.
"""

from __future__ import annotations

import logging
import time

from runtime.kafka.clients import Consumer, TopicPartition
from runtime.kafka.records import ConsumedMessage

log = logging.getLogger("cronstream.scheduler")
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0


class Backoff:
    """When reading may ask the registry again."""

    def __init__(self) -> None:
        self.since = 0.0
        self.delay = 0.0
        self.retry_at = 0.0

    @property
    def stalled(self) -> bool:
        return self.since > 0

    def failed(self, reason: Exception) -> None:
        now = time.monotonic()
        if not self.since:
            self.since, self.delay = now, FIRST_DELAY_S
            log.warning("schema registry unavailable (%s): reading definitions and timers "
                        "paused until it answers; loaded jobs keep firing", reason)  # fmt: skip
        else:
            self.delay = min(2 * self.delay, MAX_DELAY_S)
        self.retry_at = now + self.delay

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def passed(self) -> None:
        """A retry read everything it had to: the registry answers again."""
        if self.since:
            log.info("schema registry answers again after %.1f s: reading resumed",
                     time.monotonic() - self.since)  # fmt: skip
            self.since = 0.0


class Held:
    """Records of one consumer waiting for the registry, in the order they were read;
    their partitions are paused meanwhile."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.records: list[ConsumedMessage] = []
        self.paused: set[tuple[str, int]] = set()

    def __len__(self) -> int:
        return len(self.records)

    def hold(self, records: list[ConsumedMessage]) -> None:
        self.records.extend(records)
        fresh = {(r.topic() or "", r.partition() or 0) for r in records} - self.paused
        if fresh:
            self.consumer.pause([TopicPartition(t, p) for t, p in fresh])
            self.paused |= fresh

    def take(self) -> list[ConsumedMessage]:
        records, self.records = self.records, []
        return records

    def resume(self) -> None:
        """Nothing is held any more: fetch the paused partitions again."""
        if self.paused and not self.records:
            owned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            again = [TopicPartition(t, p) for t, p in self.paused if (t, p) in owned]
            if again:
                self.consumer.resume(again)
            self.paused = set()

    def drop(self, partitions: set[int]) -> None:
        """Revoked (or assigned afresh: read again from the start) partitions' records."""
        self.records = [r for r in self.records if r.partition() not in partitions]
        self.paused = {(t, p) for t, p in self.paused if p not in partitions}
