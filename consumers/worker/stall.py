"""Input held while the schema registry is unreachable.

A run request written with a schema id this worker has not seen yet cannot be read
without the registry. When the registry is down (unreachable, or a server error) that
is true of every such record, so it is not the record's fault: dead-lettering it would
lose a good run, and crashing would leave nothing executing. The worker instead holds
the record and every one read after it, in order, pauses fetching (the group
membership stays: polling goes on), and tries them again with a growing delay, up to
``MAX_DELAY_S``. Runs already executing finish and settle meanwhile. When the registry
answers again the held records are accepted and fetching resumes.
"""

from __future__ import annotations

import logging
import time

from runtime.kafka.clients import Consumer, TopicPartition
from runtime.kafka.records import ConsumedMessage

log = logging.getLogger("cronstream.worker")
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0


class Stall:
    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.held: list[ConsumedMessage] = []
        self.delay = 0.0
        self.retry_at = 0.0
        self.since = 0.0

    def hold(self, messages: list[ConsumedMessage], reason: Exception) -> None:
        """``messages[0]`` could not be decoded for want of the registry: keep it and
        the rest, and stop fetching until ``due``."""
        now = time.monotonic()
        if not self.since:
            self.since = now
            self.delay = FIRST_DELAY_S
            self.consumer.pause(self.consumer.assignment())
            log.warning("schema registry unavailable (%s): %d run requests held, fetching "
                        "paused until it answers", reason, len(messages))  # fmt: skip
        else:
            self.delay = min(2 * self.delay, MAX_DELAY_S)
        self.held = list(messages)
        self.retry_at = now + self.delay

    def due(self) -> bool:
        return time.monotonic() >= self.retry_at

    def release(self) -> list[ConsumedMessage]:
        """The held records, to be accepted again in order (``hold`` them again if the
        registry still does not answer)."""
        held, self.held = self.held, []
        return held

    def recovered(self, partitions: list[TopicPartition]) -> None:
        """Everything held was accepted: fetch ``partitions`` again."""
        self.consumer.resume(partitions)
        log.info("schema registry answers again after %.1f s: fetching resumed",
                 time.monotonic() - self.since)  # fmt: skip
        self.since = 0.0

    @property
    def stalled(self) -> bool:
        """Fetching is paused (records held, or all of them revoked since)."""
        return self.since > 0

    def poll(self) -> None:
        """Keep the group membership while fetching is paused; a record of a partition
        assigned meanwhile joins the held ones, and its partition is paused too."""
        msg = self.consumer.poll(0.05)
        if msg is not None:
            self.held.append(msg)
            self.consumer.pause([TopicPartition(msg.topic() or "", msg.partition() or 0)])

    def drop(self, gone: set[tuple[str, int]]) -> None:
        """Revoked partitions' held records are left for their next owner."""
        self.held = [m for m in self.held if (m.topic(), m.partition()) not in gone]
