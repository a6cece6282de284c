"""Where the trigger processor keeps each trigger's ``Checkpoint``: the
compacted topic ``<prefix>.triggers-checkpoints``, keyed ``<job>|<topic>|<partition>``,
its value the checkpoint as JSON (``Checkpoint.to_json``), a tombstone for a trigger
that stopped. The debounce windows and emitted batches do not fit in a commit's
metadata, so they live here, written (and acknowledged) before the offset they go with
is committed (``streams.triggers.processor``, the commit procedure).

Every processor reads the whole topic (it is small: one record per trigger and source
partition, compacted) and, when partitions are assigned to it, reads on to the end
first (``catch_up``): what their previous owner stored before it handed them over, or
before it was killed, is there.
"""

from __future__ import annotations

import json
import logging

from cronstream.runtime.kafka.clients import OFFSET_BEGINNING, TopicPartition, kafka_consumer
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.records import is_record, text_key
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import TRIGGERS
from cronstream.streams.core.triggers import Checkpoint

log = logging.getLogger("cronstream.triggers")
CHECKPOINTS = f"{TRIGGERS}checkpoints"  # after "<prefix>." (schemas.catalog.INTERNAL)


def checkpoint_key(job_id: str, topic: str, partition: int) -> str:
    return f"{job_id}|{topic}|{partition}"


class CheckpointStore:
    def __init__(self, settings: Settings, publisher: Publisher) -> None:
        self.topic = f"{settings.topic_prefix}.{CHECKPOINTS}"
        self.publisher = publisher
        self.consumer = kafka_consumer(settings)
        self.stored: dict[str, Checkpoint] = {}
        self.next: dict[int, int] = {}  # partition -> the next offset to read
        self._assigned = False

    def catch_up(self) -> None:
        """Read the topic on to the end it has now."""
        meta = self.consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        ends = {}
        for p in meta.partitions:
            low, high = watermarks(self.consumer, TopicPartition(self.topic, p))
            if high > max(low, self.next.get(p, 0)):
                ends[p] = high
        if not self._assigned:
            self.consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions]
            )
            self._assigned = True
        while any(self.next.get(p, 0) < end for p, end in ends.items()):
            for msg in self.consumer.consume(num_messages=5000, timeout=1.0):
                if is_record(msg):
                    self.next[msg.partition() or 0] = (msg.offset() or 0) + 1
                    self._read(text_key(msg.key()) or "", msg.value())

    def _read(self, key: str, value: bytes | None) -> None:
        if value is None:
            self.stored.pop(key, None)
            return
        try:
            self.stored[key] = Checkpoint.from_json(json.loads(value))
        except (ValueError, KeyError, TypeError) as exc:  # not one of ours: no checkpoint
            log.warning("checkpoint %r is unreadable (%r): its trigger starts afresh", key, exc)
            self.stored.pop(key, None)

    def get(self, key: str) -> Checkpoint | None:
        return self.stored.get(key)

    def put(self, key: str, checkpoint: Checkpoint) -> None:
        """Queue ``checkpoint`` under ``key`` (acknowledged by the owner's next flush)."""
        value = json.dumps(checkpoint.to_json(), separators=(",", ":")).encode()
        self.publisher.produce_raw(self.topic, key, value, [])
        self.stored[key] = checkpoint

    def forget(self, key: str) -> None:
        """Queue the tombstone of a trigger that stopped."""
        if self.stored.pop(key, None) is not None:
            self.publisher.produce_raw(self.topic, key, None, [])

    def close(self) -> None:
        self.consumer.close()
