"""Kafka targets without a run thread (``consumers.executors.deliveries``): produced from
the worker's loop, acknowledged on one poller thread, given up at the run's deadline."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from queue import SimpleQueue
from typing import Any

from cronstream.consumers.errors import TargetInvalid, TimedOut
from cronstream.consumers.executors.kafka import KafkaExecutor, TopicPolicy
from cronstream.schemas.events import Target
from tests.unit.test_executors import _Delivered, _Metadata, context

POLICY = TopicPolicy(own=frozenset({"cronstream.jobs"}), allow=("orders.*",))
Done = SimpleQueue[tuple[Any, Any, BaseException | None]]


class _Broker:
    """A producer whose acknowledgements come when polled, as librdkafka's do; while
    ``holding``, none comes."""

    def __init__(self, existing: set[str]) -> None:
        self.existing, self.lookups, self.holding = existing, 0, False
        self._waiting: list[Any] = []
        self._offset = 6
        self._lock = threading.Lock()
        self.polls = 0

    def list_topics(self, topic: str, timeout: float) -> _Metadata:
        self.lookups += 1
        return _Metadata(topic, topic in self.existing)

    def produce(self, topic: str, *, on_delivery: Any, **_kw: Any) -> None:
        with self._lock:
            self._waiting.append(on_delivery)

    def poll(self, timeout: float) -> int:
        self.polls += 1
        with self._lock:
            due: list[Any] = []
            if not self.holding:
                due, self._waiting = self._waiting, []
        for callback in due:
            self._offset += 1
            callback(None, _Delivered(self._offset))
        if not due:
            time.sleep(min(timeout, 0.005))
        return len(due)

    def release(self) -> None:
        self.holding = False


def test_a_kafka_attempt_is_produced_from_the_loop_and_acknowledged_on_the_poller() -> None:
    broker = _Broker({"orders.created"})
    executor = KafkaExecutor(broker, POLICY)
    done: Done = SimpleQueue()
    target = Target(type="kafka", topic="orders.created")
    try:
        # the topic's existence not known yet: that lookup blocks, so a run thread does it
        assert executor.start("first", target, context(), done) is False
        assert (
            executor.execute(target, context()) == "produced to orders.created partition 0 offset 7"
        )
        assert broker.lookups == 1
        for token in range(5):
            assert executor.start(token, target, context(), done) is True
        results = sorted(done.get(timeout=5) for _ in range(5))
        assert [(token, error) for token, _, error in results] == [(t, None) for t in range(5)]
        assert {output.rsplit(" ", 1)[0] for _, output, _ in results} == {
            "produced to orders.created partition 0 offset"
        }
        assert broker.lookups == 1  # remembered
    finally:
        executor.close()


def test_a_refused_or_missing_topic_fails_at_once_without_producing() -> None:
    broker = _Broker({"orders.created"})
    executor = KafkaExecutor(broker, POLICY)
    done: Done = SimpleQueue()
    try:
        assert executor.start(1, Target(type="kafka", topic="cronstream.jobs"), context(), done)
        _, _, error = done.get(timeout=1)
        assert isinstance(error, TargetInvalid)
        assert "one of cronstream's own" in str(error)
        missing = Target(type="kafka", topic="orders.missing")
        assert executor.start(2, missing, context(), done) is False  # asked by a thread
        executor._topic_exists("orders.missing", executor.producer)
        assert executor.start(3, missing, context(), done) is True
        token, _, error = done.get(timeout=1)
        assert token == 3
        assert isinstance(error, TargetInvalid)
        assert "does not exist" in str(error)
    finally:
        executor.close()


def test_no_acknowledgement_before_the_deadline_times_the_attempt_out() -> None:
    broker = _Broker({"orders.created"})
    broker.holding = True
    executor = KafkaExecutor(broker, POLICY)
    executor._topic_exists("orders.created", executor.producer)
    done: Done = SimpleQueue()
    try:
        started = time.monotonic()
        target = Target(type="kafka", topic="orders.created")
        assert executor.start("late", target, context(timeout=0.3), done)
        token, output, error = done.get(timeout=5)
        assert (token, output) == ("late", None)
        assert isinstance(error, TimedOut)
        assert 0.25 < time.monotonic() - started < 2
        broker.release()  # the late acknowledgement is not a second result
        time.sleep(0.2)
        assert done.empty()
    finally:
        executor.close()


def test_a_tenants_first_record_takes_a_thread_its_producer_made_there() -> None:
    class _Tenants:
        def __init__(self) -> None:
            self.made_for: dict[str, _Broker] = {}

        def producer(self, tenant: str) -> _Broker:
            raise AssertionError("a tenant's producer is not made on the worker's loop")

        def made(self, tenant: str) -> _Broker | None:
            return self.made_for.get(tenant)

        def refusal(self, tenant: str) -> str | None:
            return None

        def forget_refusal(self, tenant: str) -> None:
            pass

    broker, tenants = _Broker({"acme.orders"}), _Tenants()
    policy = replace(POLICY, allow=("acme.*",))
    executor = KafkaExecutor(broker, policy, tenants)
    executor._topic_exists("acme.orders", executor.producer)
    done: Done = SimpleQueue()
    try:
        target = Target(type="kafka", topic="acme.orders")
        assert executor.start(1, target, context(tenant="acme"), done) is False
        tenants.made_for["acme"] = _Broker({"acme.orders"})
        assert executor.start(2, target, context(tenant="acme"), done) is True
        token, output, error = done.get(timeout=5)
        assert (token, error) == (2, None)
        assert output.startswith("produced to acme.orders")
    finally:
        executor.close()
