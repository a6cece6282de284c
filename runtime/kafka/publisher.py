"""Publish cronstream events to Kafka: encode, produce, and surface delivery errors.

librdkafka reports delivery on a background thread through a callback that must never
raise. The callback latches the first error; the next ``publish``/``flush`` raises it as
PublishError, so a failed write is never silently dropped. ``poll(0)`` runs on every
publish to serve reports without blocking the hot path, unless the owner turns
``serve_each`` off and flushes on its own schedule (the worker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message

from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import AnyEvent

# A producer that answers someone (the CLI, the API, the dashboard): librdkafka gives
# each record ANSWER_WITHIN_S (``message.timeout.ms``) to be acknowledged or failed, and
# ``flush`` waits that and REPORT_MARGIN_S more for the verdict, so a record reported
# failed is not written later. With librdkafka's default (300 s) and a 30 s flush, a
# command refused at 30 s during a rolling restart stayed queued and could be written
# minutes after its caller was told it failed (or lost when the command line exited).
ANSWER_WITHIN_S = 30.0
REPORT_MARGIN_S = 5.0
# How long ``flush`` waits by default for any other producer (a role's: its records are
# kept by librdkafka for the delivery timeout its owner set, and the owner goes on).
FLUSH_WAIT_S = 30.0

# Delivery reports for failures only: a report is a Python call and a Message built per
# record; for a producer whose owner learns success from a flush (``settled``), a success
# has nothing to tell. Not for one that reads an offset from its report (TenantClient).
FAILURES_ONLY: dict[str, Any] = {"delivery.report.only.error": True}


class Producing(Protocol):
    """What a ``Publisher`` asks of its producer (confluent-kafka's ``Producer`` is one;
    unit tests pass a fake): produce with a delivery callback, serve the reports, wait
    for them, drop the queue (``renew``); and the metadata request its owners make
    through it (the API's backend asks whether a topic exists)."""

    def produce(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: str | bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None: ...
    def poll(self, timeout: float, /) -> int: ...
    def flush(self, timeout: float, /) -> int: ...
    def purge(self) -> None: ...
    def list_topics(self, topic: str, /, *, timeout: float) -> Any: ...


class Mark:
    """The records produced between two ``Publisher.mark`` calls: how many were sent,
    how many Kafka answered (acknowledged or failed). Its delivery callback is made
    once per mark, not per record."""

    __slots__ = ("answered", "number", "sent")

    def __init__(self, number: int) -> None:
        self.number = number
        self.sent = 0
        self.answered = 0


class Publisher:
    def __init__(
        self,
        settings: Settings,
        *,
        codec: Codec | None = None,
        producer: Producing | None = None,
        serve_each: bool = True,
        track_acks: bool = False,
        answering: bool = False,
        **producer_overrides: Any,
    ) -> None:
        """``answering``: the producer of one who answers someone (ANSWER_WITHIN_S; a
        shorter ``message.timeout.ms`` may be given, and the flush waits for it)."""
        self.flush_wait_s = FLUSH_WAIT_S
        if answering:
            if producer is not None or "delivery.timeout.ms" in producer_overrides:
                raise ValueError("answering sets the producer's delivery timeout: make it here")
            most = round(ANSWER_WITHIN_S * 1000)
            delivery_ms = producer_overrides.setdefault("message.timeout.ms", most)
            if not 0 < delivery_ms <= most:
                raise ValueError(f"an answering producer's delivery timeout is 1-{most} ms")
            self.flush_wait_s = delivery_ms / 1000 + REPORT_MARGIN_S
        self.codec = codec or Codec(registry_client(settings))
        self.producer: Producing = producer or kafka_producer(settings, **producer_overrides)
        self._settings, self._overrides = settings, producer_overrides
        self.fatal = False  # librdkafka said the producer cannot go on (``renew``)
        self.serve_each = serve_each  # poll(0) after each produce; False: the owner flushes
        self._error: PublishError | None = None
        # ``track_acks``: every record counted in the mark it was produced under, so that
        # ``acknowledged(mark)`` answers without waiting (the scheduler's checkpoint).
        # Needs a report per record (not FAILURES_ONLY).
        if track_acks and producer_overrides.get("delivery.report.only.error"):
            raise ValueError("track_acks needs a delivery report per record")
        self.track_acks = track_acks
        self._marks: deque[Mark] = deque()
        self._settled_through = -1  # failures of records up to this mark are not raised
        self._open_mark(0)

    def _open_mark(self, number: int) -> None:
        mark = self._open = Mark(number)
        self._marks.append(mark)
        if not self.track_acks:
            self._deliver: Callable[[KafkaError | None, Message], None] = self._on_delivery
            return

        def answered(err: KafkaError | None, msg: Message) -> None:
            mark.answered += 1
            if err is not None and mark.number > self._settled_through:
                self._on_delivery(err, msg)

        self._deliver = answered

    def mark(self) -> Mark:
        """Close the current mark (the records produced so far) and open the next one."""
        closed = self._open
        self._open_mark(closed.number + 1)
        return closed

    def written_off(self) -> None:
        """What was produced so far is dealt with by the caller whatever Kafka answers
        (a rewind re-emits it all): a failure of one of those records is not raised. One
        outage fails records over seconds; each raised error rewound again, re-emitting
        the whole outage each time (a broker restart test: 2,360 repeats)."""
        self._settled_through = self.mark().number
        self._error = None

    def acknowledged(self, mark: Mark) -> bool:
        """Whether Kafka answered every record produced up to ``mark``, without waiting
        (reports are served by ``producer.poll``). A record it refused raises
        PublishError, as ``flush`` does."""
        if not self.track_acks:
            raise RuntimeError("acknowledged() needs Publisher(track_acks=True)")
        self._raise_latched()
        marks = self._marks
        while len(marks) > 1 and marks[0].answered == marks[0].sent:
            marks.popleft()  # answered in full: forgotten
        return marks[0].number > mark.number

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None and self._error is None:
            self.fatal = self.fatal or err.fatal()
            self._error = PublishError(
                f"delivery to {msg.topic()} failed for key {msg.key()!r}: {err.str()}"
            )

    def _raise_latched(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def publish(self, topic: str, event: AnyEvent) -> None:
        """Queue ``event`` on ``topic`` keyed by ``event.key()`` with its readable headers."""
        self._raise_latched()
        self.produce_raw(topic, event.key(), self.codec.encode(topic, event), event.headers())

    def produce_raw(
        self,
        topic: str,
        key: str | bytes,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> None:
        """Queue pre-encoded bytes (or a tombstone when value is None)."""
        if type(key) is str:
            key = key.encode()
        while True:
            try:
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    headers=headers if type(headers) is list else list(headers),
                    on_delivery=self._deliver,
                )
                break
            except BufferError:
                # Local queue full: serve delivery reports until there is room.
                self.producer.poll(0.05)
        self._open.sent += 1
        if self.serve_each:
            self.producer.poll(0)

    def close(self) -> None:
        """Flush what is queued and release the registry connection."""
        try:
            self.flush()
        finally:
            self.codec.registry.close()

    def serve(self) -> None:
        """Wake the producer to send what it holds and serve the delivery reports that
        came, without waiting (``acknowledged`` then knows); a record Kafka refused for
        good raises PublishError."""
        self.producer.flush(0)
        self.producer.poll(0)
        self._raise_latched()

    def settled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for every queued record to be acknowledged: True when
        none is left, False when some still wait (the broker is down or restarting;
        librdkafka keeps them and goes on trying). A record Kafka refused for good
        raises PublishError, as ``flush`` does."""
        remaining = self.producer.flush(timeout)
        self._raise_latched()
        return remaining == 0

    def renew(self) -> None:
        """After a fatal error (``fatal``): a new producer in place of the old one, whose
        queue is dropped (its records failed, or will be written again by the caller)."""
        self.producer.purge()
        self.producer.flush(0)
        self.producer = kafka_producer(self._settings, **self._overrides)
        self.fatal = False
        self._error = None
        number = self._open.number + 1
        self._marks.clear()  # the old queue is gone: no mark waits for it
        self._open_mark(number)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued record is acknowledged (at most ``timeout`` s, by
        default ``flush_wait_s``); raise the first failure."""
        if timeout is None:
            timeout = self.flush_wait_s
        remaining = self.producer.flush(timeout)
        self._raise_latched()
        if remaining:
            raise PublishError(f"{remaining} records still unacknowledged after {timeout}s")
