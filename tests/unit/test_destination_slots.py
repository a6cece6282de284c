"""Run slots per destination: a destination that holds its attempts until
their timeout takes only its own share of the worker's slots; the runs to every other
destination start as before (``consumers.core.bulkhead``, ``consumers.worker.destinations``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from cronstream.consumers.core.bulkhead import Admission, Bulkhead
from cronstream.consumers.errors import TimedOut
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.http import HttpExecutor
from cronstream.consumers.executors.kafka import KafkaExecutor, TopicPolicy
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.runtime import metrics
from cronstream.schemas.events import RunOutcome, RunStatus, Target
from cronstream.schemas.ids import partition_for
from tests.factories import run_request
from tests.processors import WORKER_SETTINGS
from tests.unit.test_executors import _Producer
from tests.unit.test_worker_parts import RUNS, TOPICS, Parts


def test_the_bulkhead_starts_within_the_slots_queues_then_refuses() -> None:
    b: Bulkhead[str] = Bulkhead(slots=2, waiting=2)
    assert [b.admit("a", f"a{i}", 10.0 + i) for i in range(5)] == [
        Admission.START,
        Admission.START,
        Admission.WAIT,
        Admission.WAIT,
        Admission.FULL,
    ]
    assert b.admit("b", "b0", 10.0) is Admission.START  # another destination: its own slots
    assert (b.held("a"), len(b)) == (2, 2)
    assert b.ended("a") == ("a2", 12.0)  # the first in line takes the freed slot
    assert b.held("a") == 2
    assert b.expired(12.5) == []
    assert b.expired(13.0) == ["a3"]
    assert b.ended("a") is None
    assert b.ended("a") is None
    assert (b.held("a"), len(b), b.in_flight) == (0, 0, {"b": 1})
    b.admit("a", "x", 1.0)
    b.admit("a", "y", 1.0)
    b.admit("a", "z", 1.0)
    assert b.drop(lambda item: item == "z") == ["z"]
    assert b.queued == {}
    with pytest.raises(ValueError, match="slots must be"):
        Bulkhead(slots=0, waiting=1)


def test_a_kafka_attempts_destination_is_its_topic_partition() -> None:
    kafka = KafkaExecutor(_Producer({"orders"}), TopicPolicy(own=frozenset()))
    try:
        target = Target(type="kafka", topic="orders")
        assert kafka.destination(target, "j@1") == "kafka orders"  # partitions not known yet
        assert kafka._topic_exists("orders", kafka.producer)
        expected = partition_for("j@1", 3)  # murmur2: tests/unit/test_ids.py
        assert kafka.destination(target, "j@1") == f"kafka orders partition {expected}"
    finally:
        kafka.close()
    http = HttpExecutor()
    try:
        assert http.destination(Target(type="http", url="https://a.example/x?y"), "r") == (
            "https://a.example:443"
        )
        assert http.destination(Target(type="http", url="http://A.example:81/"), "r") == (
            "http://a.example:81"
        )
        assert http.destination(Target(type="http", url="ftp://a.example/"), "r") is None
    finally:
        http.close()


class _Stalled:
    """A python executor whose runs to the destination "stalled" wait until ``go`` is set
    or their deadline passes; runs to "fine" return at once."""

    kind = "python"

    def __init__(self) -> None:
        self.go = threading.Event()
        self.began: list[str] = []

    def destination(self, _target: Target, run_id: str) -> str:
        return "stalled" if run_id.startswith("stalled") else "fine"

    def release(self) -> None:
        self.go.set()

    def execute(self, _target: Target, context: RunContext) -> str:
        self.began.append(context.run_id)
        if context.run_id.startswith("stalled") and not self.go.wait(context.remaining()):
            raise TimedOut("no answer")
        return "ok"


@contextmanager
def _worker(executor: Any) -> Iterator[tuple[Parts, Attempts]]:
    """A worker's parts and its attempts (4 slots, 2 per destination), python targets
    run by ``executor``; closed after, ``executor`` released first."""
    parts = Parts()
    parts.own()
    attempts = Attempts(
        WORKER_SETTINGS,
        WorkerConfig(group="g", concurrency=4, destination_slots=2, started_after_ms=0),
        outbox=parts.outbox,
        dedup=parts.dedup,
        cancels={},
        tally=metrics.Tally(),
    )
    attempts.executors["python"] = executor
    attempts.destinations.where["python"] = executor.destination
    try:
        yield parts, attempts
    finally:
        executor.release()
        attempts.close()


def _step(attempts: Attempts, parts: Parts, until: float) -> None:
    """The worker's loop, as far as starts go, until ``until`` (monotonic)."""
    while time.monotonic() < until:
        capacity = attempts.concurrency - len(attempts)
        if capacity > 0:
            attempts.start_some(capacity, parts.intake.take)
        attempts.collect(wait=0.02)


def _statuses(parts: Parts) -> dict[str, list[RunStatus]]:
    parts.outbox.settle(wait=True)
    seen: dict[str, list[RunStatus]] = {}
    for record in parts.producer.on(TOPICS.history):
        outcome = parts.codec.decode(record.value, RunOutcome)
        seen.setdefault(outcome.run_id, []).append(outcome.status)
    return seen


def test_runs_to_a_stalled_destination_leave_the_other_slots_to_the_others() -> None:
    executor = _Stalled()
    with _worker(executor) as (parts, attempts):
        run_ids = [*(f"stalled@{i}" for i in range(5)), *(f"fine@{i}" for i in range(6))]
        for offset, run_id in enumerate(run_ids):
            parts.intake.accept(parts.record(run_request(run_id), offset))
        _step(attempts, parts, time.monotonic() + 0.5)
        seen = _statuses(parts)
        # Two stalled attempts hold their destination's two slots; three wait, unstarted.
        assert sorted(r for r in executor.began if r.startswith("stalled")) == [
            "stalled@0",
            "stalled@1",
        ]
        assert sorted(attempts.destinations.waiting) == ["stalled@2", "stalled@3", "stalled@4"]
        for i in range(2, 5):
            assert f"stalled@{i}" not in seen  # not even STARTED
        # Every run to the other destination ran meanwhile, in the two slots left.
        for i in range(6):
            assert seen[f"fine@{i}"] == [RunStatus.STARTED, RunStatus.SUCCEEDED]
        executor.go.set()  # the destination answers again: the waiting runs follow
        _step(attempts, parts, time.monotonic() + 0.5)
        seen = _statuses(parts)
        for i in range(5):
            assert seen[f"stalled@{i}"] == [RunStatus.STARTED, RunStatus.SUCCEEDED]
        assert len(attempts.destinations) == 0
        assert attempts.destinations.bulkhead.in_flight == {}
        assert parts.consumer.commits[-1][0] == [(RUNS, 0, 11, "0")]


def test_a_waiting_run_times_out_by_its_own_timeout_and_cancel_and_revoke_end_waiting() -> None:
    executor = _Stalled()
    with _worker(executor) as (parts, attempts):
        runs = [
            run_request("stalled@0"),
            run_request("stalled@1"),  # hold the two slots
            run_request("stalled@2", timeout_ms=400),
            run_request("stalled@3", timeout_ms=400),
            run_request("stalled@4"),
            run_request("stalled@5"),
        ]
        for offset, request in enumerate(runs):
            parts.intake.accept(parts.record(request, offset))
        _step(attempts, parts, time.monotonic() + 0.1)
        assert sorted(attempts.destinations.waiting) == [
            "stalled@2",
            "stalled@3",
            "stalled@4",
            "stalled@5",
        ]
        attempts.cancels["stalled@5"] = int(time.time() * 1000)
        attempts.cancel("stalled@5")
        assert "stalled@5" not in attempts.destinations.waiting
        _step(attempts, parts, time.monotonic() + 0.6)
        seen = _statuses(parts)
        outcomes = [
            parts.codec.decode(r.value, RunOutcome) for r in parts.producer.on(TOPICS.history)
        ]
        errors = {o.run_id: o.error or "" for o in outcomes}
        assert seen["stalled@5"] == [RunStatus.CANCELED]
        # The two that may wait 400 ms never started: ended by their own timeout.
        for i in (2, 3):
            assert seen[f"stalled@{i}"] == [RunStatus.TIMED_OUT]
            assert "timed out waiting for a slot of stalled" in errors[f"stalled@{i}"]
        assert executor.began == ["stalled@0", "stalled@1"]
        # Revoked: what still waits is left to the next owner, with no outcome.
        assert list(attempts.destinations.waiting) == ["stalled@4"]
        attempts.drop_unstarted({(RUNS, 0)})
        assert len(attempts.destinations) == 0
        assert "stalled@4" not in _statuses(parts)


class _Slow:
    """A python executor whose runs all go to "slow", which answers each after 150 ms."""

    kind = "python"

    def destination(self, _target: Target, _run_id: str) -> str:
        return "slow"

    def release(self) -> None:
        pass

    def execute(self, _target: Target, context: RunContext) -> str:
        time.sleep(0.15)
        return "ok"


def test_runs_wait_on_for_a_slow_destination_that_answers() -> None:
    """Found by the CI run: 80 runs of 1 s to one server in 4 slots a worker, timeout 10 s:
    those still waiting at 10 s timed out although the server answered all along. A run
    waits as long as its destination answers; its attempt then gets its whole timeout."""
    with _worker(_Slow()) as (parts, attempts):
        for offset in range(8):  # 8 x 150 ms in 2 slots: 600 ms, twice the timeout
            parts.intake.accept(parts.record(run_request(f"slow@{offset}", timeout_ms=300), offset))
        _step(attempts, parts, time.monotonic() + 1.2)
        seen = _statuses(parts)
        assert {run_id: statuses[-1] for run_id, statuses in seen.items()} == {
            f"slow@{i}": RunStatus.SUCCEEDED for i in range(8)
        }


def test_runs_waiting_for_their_destination_count_as_read_ahead() -> None:
    """Found by the cluster test (185 runs lost): runs taken from the backlog to wait for
    a busy destination left the backlog's bound, so the worker read on until a thousand
    waited and the next were refused. Fetching pauses at twice the read-ahead, the
    waiting runs included, and resumes below it."""
    parts = Parts(concurrency=1)
    parts.own()
    limit = parts.intake.limit
    for offset in range(limit):
        parts.intake.accept(parts.record(run_request(f"j@{offset}"), offset))
    parts.intake.flow_control(waiting=limit)  # the other half waits for a destination
    assert parts.consumer.paused == [(RUNS, 0)]
    parts.intake.take()
    parts.intake.flow_control(waiting=0)  # they ran: the backlog alone, below the bound
    assert parts.consumer.paused == []
    assert WorkerConfig(group="g", concurrency=1).read_ahead == limit
