"""The flows topic (flow definitions), followed by a thread for the flows coordinator
(``streams.flows.app``): a run keeps the nodes it started with, a new run takes the latest."""

from __future__ import annotations

import logging
import threading

from cronstream.runtime.kafka.clients import OFFSET_BEGINNING, TopicPartition, kafka_consumer
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, sleeping
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.flows import FlowDefinition
from cronstream.schemas.serde import Codec

log = logging.getLogger("cronstream.flows")


class Definitions:
    """The flows topic, followed by a thread into a dict (flow id -> definition)."""

    def __init__(self, settings: Settings, codec: Codec) -> None:
        self.topic = Topics(settings).flows
        self.codec = codec
        self.flows: dict[str, FlowDefinition] = {}
        self.caught_up = threading.Event()
        self._consumer = kafka_consumer(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="flow-definitions", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _follow(self) -> None:
        meta = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        parts = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in meta.partitions]
        ends = {p.partition: self._consumer.get_watermark_offsets(p, timeout=30)[1] for p in parts}
        self._consumer.assign(parts)
        seen = {p: 0 for p in ends}
        pause = sleeping(self._stop.is_set)
        while not self._stop.is_set():
            messages = self._consumer.consume(num_messages=500, timeout=0.2)
            try:  # a schema id not seen yet: the registry is asked, and waited for if away
                learn_writers(self.codec, messages, what="flow definitions", log=log, pause=pause)
            except StopWaiting:
                break
            for msg in messages:
                if msg.error():
                    continue
                seen[msg.partition() or 0] = (msg.offset() or 0) + 1
                key = (msg.key() or b"").decode("utf-8", "replace")
                if msg.value() is None:
                    self.flows.pop(key, None)
                    continue
                try:
                    self.flows[key] = self.codec.decode(msg.value(), FlowDefinition)
                except DecodeError as exc:
                    log.warning("flow definition %r unreadable: %s", key, exc)
            if not self.caught_up.is_set() and all(seen[p] >= end for p, end in ends.items()):
                self.caught_up.set()
        self._consumer.close()
