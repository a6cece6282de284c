"""Kafka targets without a thread each: records produced from the worker's loop, their
acknowledgements served by one poller thread.

A kafka attempt on a run thread produced its record and then polled the producer until
its own acknowledgement came: 64 threads polling one producer, each woken by the others'
callbacks (402-516 us of the worker's CPU per run). Here ``produce`` queues the
record with a callback that puts ``(token, output, error)`` on the worker's ``done``
queue, as a finished run thread does; one thread serves every producer that has records
in flight (``poll``), and fails each record whose run's deadline passed before its
acknowledgement (its late acknowledgement, if any, is then ignored).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from cronstream.consumers.errors import ExecutionFailed
from cronstream.consumers.executors.base import Finished
from cronstream.runtime.kafka.clients import KafkaError

# What an acknowledgement or its absence means for the attempt: (output, error).
Judge = Callable[[KafkaError | None, Any], tuple[str | None, ExecutionFailed | None]]
Expired = Callable[[], ExecutionFailed]
EXPIRY_EVERY_S = 0.05
log = logging.getLogger("cronstream.worker")


class Acknowledging(Protocol):
    """What the poller asks of a producer (confluent-kafka's ``Producer`` is one; unit
    tests pass a fake): produce a record with a delivery callback, serve the callbacks."""

    def produce(
        self,
        topic: str,
        *,
        key: bytes,
        value: bytes,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: Callable[[KafkaError | None, Any], None],
    ) -> None: ...
    def poll(self, timeout: float, /) -> int: ...


class Record(NamedTuple):
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, str | bytes | None]]


class _InFlight:
    __slots__ = ("deadline", "done", "expired", "producer", "token")

    def __init__(
        self, producer: Acknowledging, token: Any, deadline: float, done: Finished, expired: Expired
    ) -> None:
        self.producer, self.token, self.deadline = producer, token, deadline
        self.done, self.expired = done, expired


class DeliveryPoller:
    def __init__(self) -> None:
        self._in_flight: dict[int, _InFlight] = {}
        self._wake = threading.Event()
        self._ids = iter(range(1, 1 << 62))
        self._stopped = False
        self._thread = threading.Thread(target=self._serve, name="deliveries", daemon=True)
        self._thread.start()

    def produce(
        self,
        producer: Acknowledging,
        record: Record,
        token: Any,
        done: Finished,
        *,
        deadline: float,
        judge: Judge,
        expired: Expired,
    ) -> None:
        """Queue one record; ``(token, output, error)`` goes on ``done`` when the broker
        answers (``judge`` says what its answer means) or ``deadline`` passes
        (``expired()``'s error). Raises what ``producer.produce`` raises."""
        number = next(self._ids)
        self._in_flight[number] = _InFlight(producer, token, deadline, done, expired)

        def acknowledged(err: KafkaError | None, msg: Any) -> None:
            waiting = self._in_flight.pop(number, None)
            if waiting is None:  # expired meanwhile: its result is given already
                return
            try:
                output, error = judge(err, msg)
            except BaseException as exc:  # our bug: the attempt's, handed to the worker
                waiting.done.put((waiting.token, None, exc))
            else:
                waiting.done.put((waiting.token, output, error))

        try:
            producer.produce(
                record.topic,
                key=record.key,
                value=record.value,
                headers=record.headers,
                on_delivery=acknowledged,
            )
        except BaseException:
            del self._in_flight[number]
            raise
        if not self._wake.is_set():
            self._wake.set()

    def _serve(self) -> None:
        while not self._stopped:
            try:
                self._serve_until_stopped()
            except Exception:  # our bug: logged, and the acknowledgements still served
                log.exception("the kafka targets' delivery poller failed; going on")
                time.sleep(EXPIRY_EVERY_S)

    def _serve_until_stopped(self) -> None:
        next_expiry = 0.0
        while not self._stopped:
            # the producers with records in flight (one, mostly: the worker's or a tenant's)
            producers = {id(w.producer): w.producer for w in list(self._in_flight.values())}
            if not producers:
                self._wake.wait(EXPIRY_EVERY_S)
                self._wake.clear()
            elif len(producers) == 1:
                producers.popitem()[1].poll(EXPIRY_EVERY_S)  # wakes at the first answer
            else:
                for producer in producers.values():
                    producer.poll(0.005)
            now = time.monotonic()
            if now >= next_expiry:
                next_expiry = now + EXPIRY_EVERY_S
                self._expire(now)

    def _expire(self, now: float) -> None:
        for record, waiting in list(self._in_flight.items()):
            if waiting.deadline <= now and self._in_flight.pop(record, None) is not None:
                waiting.done.put((waiting.token, None, waiting.expired()))

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
