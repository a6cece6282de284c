"""The worker's intake and outbox, fed fake records and fake clients (tests.fakes):
what is dead-lettered, what waits for history, which run starts next, and the order
in which ``Outbox.settle`` publishes, flushes and commits."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.errors import ExecutionFailed
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.intake import Intake
from cronstream.consumers.worker.lookups import SchemaLookups
from cronstream.consumers.worker.loop import outcome_observers
from cronstream.consumers.worker.outbox import Outbox
from cronstream.consumers.worker.pending import Pending
from cronstream.consumers.worker.replay import HistoryReplay
from cronstream.runtime import metrics
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.events import (
    DeadLetter,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
)
from cronstream.schemas.ids import partition_for
from cronstream.schemas.serde import Codec
from tests.factories import run_request
from tests.fakes import FakeConsumer, FakeMessage, FakeProducer, FakeRegistry, Unread
from tests.processors import WORKER_SETTINGS

SETTINGS = Settings.from_env({"CRONSTREAM_PARTITIONS": "1"})  # every job at home on 0
TOPICS = Topics(SETTINGS)
RUNS = TOPICS.runs(Priority.NORMAL)


class Parts:
    """An intake and an outbox wired as the worker wires them, on fakes."""

    def __init__(self, topics: Topics = TOPICS, *, lookups: bool = False, **config: Any) -> None:
        self.registry = FakeRegistry()
        self.codec = Codec(self.registry)
        # The lookup thread's registry: the same schemas, answering when let through.
        self.gated = GatedRegistry(self.registry)
        self.lookups = SchemaLookups(self.codec, self.gated) if lookups else None
        self.producer = FakeProducer()
        self.consumer = FakeConsumer(producer=self.producer)
        self.trackers: dict[tuple[str, int], OffsetTracker] = {}
        self.dedup = Dedup(86_400_000, 10_000, now_ms=0)
        publisher = Publisher(
            SETTINGS,
            codec=self.codec,
            producer=self.producer,
            serve_each=False,
            track_acks=True,
        )
        self.outbox = Outbox(
            publisher,
            topics=topics,
            name="w1",
            consumer=self.consumer,
            trackers=self.trackers,
            dedup=self.dedup,
            tally=metrics.Tally(),
            observers=outcome_observers(topics, self.dedup, name="w1"),
        )
        # No history is read here (no run is a possible duplicate): no consumers.
        unread = Unread()
        self.history = HistoryReplay(unread, topic=TOPICS.history, dedup=self.dedup, lookup=unread)
        self.intake = Intake(
            WorkerConfig(group="g", **config),
            topics=topics,
            consumer=self.consumer,
            codec=self.codec,
            trackers=self.trackers,
            history=self.history,
            outbox=self.outbox,
            lookups=self.lookups,
        )

    def own(
        self, topic: str = RUNS, partition: int = 0, *, runs_end: int = 0, history_end: int = 0
    ) -> None:
        self.intake.assigned(
            (topic, partition), committed=0, runs_end=runs_end, history_end=history_end
        )

    def record(self, run: RunRequest, offset: int, partition: int = 0) -> FakeMessage:
        topic = TOPICS.runs(run.priority)
        return FakeMessage(
            topic, partition, offset, self.codec.encode(topic, run), run.job_id.encode()
        )

    def take_all(self) -> list[str]:
        out = []
        while (pending := self.intake.take()) is not None:
            out.append(pending.run.run_id)
        return out


def run(run_id: str, *, priority: Priority = Priority.NORMAL, flagged: bool = False) -> RunRequest:
    return run_request(run_id, priority=priority, possible_duplicate=flagged)


def test_an_undecodable_run_is_dead_lettered_with_its_place_and_the_partition_flows() -> None:
    parts = Parts()
    parts.own()
    parts.intake.accept(FakeMessage(RUNS, 0, 7, b"\x00garbage", b"j"))
    parts.intake.accept(parts.record(run("j@good"), 8))
    assert parts.take_all() == ["j@good"]
    parts.outbox.settle(wait=True)
    (letter,) = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(TOPICS.dlq)]
    assert (letter.source_topic, letter.source_partition, letter.source_offset) == (RUNS, 0, 7)
    assert letter.stage == "worker"
    assert letter.reason.startswith("undecodable run:")
    assert parts.producer.on(TOPICS.history) == []  # no outcome for a record that is no run
    # The good run is not settled yet: the commit stops at it, past the dead letter.
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 8, "0")]


def test_a_run_request_off_its_jobs_partition_is_dead_lettered() -> None:
    """Found by the chaos suite: run requests written without the job id as key landed
    on another partition, where history could not dedup them, and ran twice."""
    topics = Topics(Settings.from_env({"CRONSTREAM_PARTITIONS": "12"}))
    runs = topics.runs(Priority.NORMAL)
    home = partition_for("j", 12)
    parts = Parts(topics)
    parts.own(runs, home)
    parts.own(runs, (home + 1) % 12)
    parts.intake.accept(parts.record(run("j@away"), 4, partition=(home + 1) % 12))
    parts.intake.accept(parts.record(run("j@home"), 4, partition=home))
    assert parts.take_all() == ["j@home"]
    parts.outbox.settle(wait=True)
    (letter,) = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(topics.dlq)]
    assert f"not its job's partition {home}" in letter.reason


class GatedRegistry(FakeRegistry):
    """A registry whose answers wait for ``gate`` (a slow registry), counting calls;
    ``down``: it is unreachable."""

    def __init__(self, shared: FakeRegistry) -> None:
        super().__init__()
        self.by_id = shared.by_id
        self.gate = threading.Event()
        self.calls: list[int] = []
        self.down = False

    def schema_by_id(self, schema_id: int) -> tuple[str, str]:
        self.calls.append(schema_id)
        self.gate.wait(10)
        if self.down:
            raise RegistryUnavailable("schema registry unreachable")
        return super().schema_by_id(schema_id)


def _answered(parts: Parts) -> list[Any]:
    """The kept records, once the lookup thread answered (accepted again, in order)."""
    deadline = time.monotonic() + 10
    while not (released := parts.intake.looked_up()) and time.monotonic() < deadline:
        time.sleep(0.005)
    for msg in released:
        parts.intake.accept(msg)
    return released


def test_an_unknown_schema_id_holds_its_partition_alone_while_a_thread_asks() -> None:
    """Found by the malformed-record flood bench (``tests/bench/malformed.py``): each
    unknown id was a registry call in the loop, which stopped every partition (12 ms
    under load). Now only the record's partition waits, its records kept in order, while
    the others flow."""
    parts = Parts(lookups=True)
    registry = parts.gated
    high = TOPICS.runs(Priority.HIGH)
    parts.own()
    parts.own(high)
    parts.codec.decode_run(parts.record(run("h@warm", priority=Priority.HIGH), 0).value())
    known = parts.record(run("x@y"), 0).value()
    assert known is not None
    unknown = b"\x00" + (900_001).to_bytes(4, "big") + known[5:]
    parts.intake.accept(FakeMessage(RUNS, 0, 7, unknown, b"j"))
    parts.intake.accept(parts.record(run("j@after"), 8))
    parts.intake.accept(parts.record(run("h@1", priority=Priority.HIGH), 1))
    # Not paused for a quick answer (pausing drops librdkafka's prefetch): only once a
    # slow lookup has kept ``limit`` records of the partition.
    assert parts.consumer.paused == []
    assert parts.take_all() == ["h@1"]  # the other partition flows meanwhile
    assert parts.intake.looked_up() == []  # not answered yet
    limit = parts.intake.limit
    for offset in range(9, 7 + limit):
        parts.intake.accept(parts.record(run(f"j@{offset}"), offset))
    assert parts.consumer.paused == [(RUNS, 0)]
    assert len(parts.intake) == 0  # all kept, none queued ahead of the unknown one
    registry.gate.set()
    assert [m.offset() for m in _answered(parts)] == list(range(7, 7 + limit))
    assert parts.consumer.paused == []
    assert parts.take_all()[:2] == ["j@after", "j@9"]  # in order; known since the warm-up
    assert registry.calls == [900_001]
    parts.outbox.settle(wait=True)
    (letter,) = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(TOPICS.dlq)]
    assert letter.source_offset == 7
    assert "schema id 900001 is not in the registry" in letter.reason
    # Refused for a while: the next record with that id is dead-lettered without asking.
    parts.intake.accept(FakeMessage(RUNS, 0, 9, unknown, b"j"))
    assert registry.calls == [900_001]
    assert (RUNS, 0) not in parts.consumer.paused


def test_a_lookup_meeting_a_registry_outage_hands_the_record_to_the_loops_stall() -> None:
    parts = Parts(lookups=True)
    registry = parts.gated
    registry.down = True
    registry.gate.set()
    parts.own()
    parts.registry.schema_by_id = registry.schema_by_id  # type: ignore[method-assign]
    message = parts.record(run("j@1"), 3)
    parts.intake.accept(message)
    # Accepted again once answered: decoded in line this once, so the loop meets the
    # outage (and runtime.kafka.stall holds all input with backoff).
    with pytest.raises(RegistryUnavailable):
        _answered(parts)
    registry.down = False
    parts.intake.accept(message)  # tried again later (the stall): a lookup, then the run
    assert [m.offset() for m in _answered(parts)] == [3]
    assert parts.take_all() == ["j@1"]


def test_a_revoked_partition_forgets_the_records_it_kept_for_a_lookup() -> None:
    parts = Parts(lookups=True)
    registry = parts.gated
    parts.own()
    parts.intake.accept(parts.record(run("j@1"), 3))
    parts.intake.drop_unstarted({(RUNS, 0)})
    registry.gate.set()
    time.sleep(0.05)
    assert parts.intake.looked_up() == []
    assert parts.take_all() == []


def test_records_of_partitions_not_owned_are_ignored() -> None:
    parts = Parts()
    parts.own(partition=0)
    parts.intake.accept(parts.record(run("j@x"), 3, partition=5))
    assert len(parts.intake) == 0


@pytest.mark.parametrize(
    ("offset", "flagged", "waits"),
    [(2, False, True), (5, False, False), (5, True, True)],
    ids=["already-there-at-assignment", "new", "flagged-re-emission"],
)
def test_a_run_that_may_have_run_before_waits_until_history_is_read(
    offset: int, flagged: bool, waits: bool
) -> None:
    parts = Parts()
    parts.own(runs_end=5, history_end=40)
    parts.intake.accept(parts.record(run("j@r", flagged=flagged), offset))
    if waits:
        assert parts.intake.take() is None
        assert parts.intake.waiting_for_history()
        parts.history.read_to[0] = 40  # history read up to its end as of the assignment
    assert parts.take_all() == ["j@r"]


def test_starts_take_high_first_and_every_nth_start_goes_to_low() -> None:
    parts = Parts(low_share=3)
    for priority in Priority:
        parts.own(TOPICS.runs(priority))
    for i in range(3):
        for priority in (Priority.LOW, Priority.NORMAL, Priority.HIGH):
            r = run(f"{priority.value.lower()}@{i}", priority=priority)
            parts.intake.accept(parts.record(r, i))
    assert parts.take_all() == [
        "high@0",
        "high@1",
        "low@0",
        "high@2",
        "normal@0",
        "low@1",
        "normal@1",
        "normal@2",
        "low@2",
    ]


def test_an_overflowing_priority_is_paused_then_resumed() -> None:
    parts = Parts(concurrency=1)
    parts.own()
    limit = parts.intake.limit
    for offset in range(2 * limit):
        parts.intake.accept(parts.record(run(f"j@{offset}"), offset))
    parts.intake.flow_control()
    assert parts.consumer.paused == [(RUNS, 0)]
    for _ in range(limit + 1):
        parts.intake.take()
    parts.intake.flow_control()
    assert parts.consumer.paused == []


def pending_at(parts: Parts, offset: int, r: RunRequest) -> Pending:
    tracker = parts.trackers[(RUNS, 0)]
    tracker.start(offset, 1000 + offset)
    return Pending(RUNS, 0, offset, r, tracker)


class _Broken:
    kind = "python"

    def execute(self, _target: Target, context: RunContext) -> str:
        if context.run_id == "j@bad":
            raise TypeError("an executor's own bug")
        if context.run_id == "j@leaky":
            raise ExecutionFailed("GET https://bob:hunter2@h.example/?token=t0k failed")
        return "ok"


class _Sleepy:
    """A python executor whose ``j@slow`` run takes 400 ms; every other returns at once."""

    kind = "python"

    def execute(self, _target: Target, context: RunContext) -> str:
        if context.run_id == "j@slow":
            time.sleep(0.4)
        return "ok"


@pytest.mark.parametrize("after_ms", [0, 200])
def test_a_started_record_only_for_runs_that_outlast_started_after(after_ms: int) -> None:
    """``--started-after``: a run that ends sooner leaves its final outcome alone (with
    its start); one that runs longer is seen STARTED once it has run that long. 0: every
    run's STARTED at its start (a third of the records of a short run)."""
    parts = Parts()
    parts.own()
    attempts = _attempts(parts, _Sleepy(), metrics.Tally(), started_after_ms=after_ms)
    outcomes = outcomes_of(attempts, parts, run("j@quick"), run("j@slow"))
    statuses = {
        run_id: [o.status for o in outcomes if o.run_id == run_id]
        for run_id in ("j@quick", "j@slow")
    }
    ok, started = RunStatus.SUCCEEDED, RunStatus.STARTED
    assert statuses == {
        "j@quick": [started, ok] if after_ms == 0 else [ok],
        "j@slow": [started, ok],
    }
    for outcome in outcomes:
        assert outcome.started_at is not None
    final = {o.run_id: o for o in outcomes if o.status is ok}
    quick_started, quick_finished = final["j@quick"].started_at, final["j@quick"].finished_at
    assert quick_started is not None
    assert quick_finished is not None
    assert quick_started <= quick_finished
    (slow_started,) = [o for o in outcomes if o.run_id == "j@slow" and o.status is started]
    assert slow_started.started_at == final["j@slow"].started_at  # the same start, to the ms
    # Published once it had run ``after_ms`` (the check runs every 100 ms).
    assert slow_started.started_at is not None
    seen_after = (slow_started.recorded_at - slow_started.started_at).total_seconds()
    assert after_ms / 1000 <= seen_after < after_ms / 1000 + 0.15 + 0.1


def _attempts(parts: Parts, python: Any, tally: metrics.Tally, **config: Any) -> Attempts:
    """The attempts of a worker of concurrency 2 on ``parts``, python targets run by
    ``python``."""
    attempts = Attempts(
        WORKER_SETTINGS,
        WorkerConfig(group="g", concurrency=2, **config),
        outbox=parts.outbox,
        dedup=parts.dedup,
        cancels={},
        tally=tally,
    )
    attempts.executors["python"] = python
    return attempts


def run_taken(attempts: Attempts, parts: Parts, count: int) -> None:
    """Start the ``count`` runs the intake holds, wait up to 10 s for them to end and
    settle every outcome."""
    assert attempts.start_some(count, parts.intake.take) == count
    deadline = time.monotonic() + 10
    while attempts.running and time.monotonic() < deadline:
        attempts.collect(wait=0.1)
    parts.outbox.settle(wait=True)


def outcomes_of(attempts: Attempts, parts: Parts, *runs: RunRequest) -> list[RunOutcome]:
    """``runs`` read by ``parts`` (offsets 0, 1, ...) and run by ``attempts`` (closed
    after): every outcome published."""
    try:
        for offset, request in enumerate(runs):
            parts.intake.accept(parts.record(request, offset))
        run_taken(attempts, parts, len(runs))
    finally:
        attempts.close()
    return [parts.codec.decode(r.value, RunOutcome) for r in parts.producer.on(TOPICS.history)]


def test_an_error_escaping_an_executor_fails_that_run_not_the_worker() -> None:
    """Found by review: ``collect`` re-raised anything but ExecutionFailed, so one broken
    run (e.g. a job leaving a trace function on its thread) killed the worker, and every
    later owner of the partition died on the same record."""
    parts = Parts()
    parts.own()
    tally = metrics.Tally()
    attempts = _attempts(parts, _Broken(), tally)
    letters_before = _worker_letters()
    outcomes = outcomes_of(attempts, parts, run("j@bad"), run("j@next"), run("j@leaky"))
    final = {o.run_id: o for o in outcomes if o.status is not RunStatus.STARTED}
    assert set(final) == {"j@bad", "j@next", "j@leaky"}
    assert final["j@leaky"].error is not None
    assert "hunter2" not in final["j@leaky"].error  # found by review: URL credentials kept
    assert "https://***@h.example/?token=***" in final["j@leaky"].error
    assert (final["j@bad"].status, final["j@next"].status) == (
        RunStatus.FAILED,
        RunStatus.SUCCEEDED,
    )
    assert "the worker failed running it: TypeError" in (final["j@bad"].error or "")
    assert "not retried" in (final["j@bad"].error or "")
    letters = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(TOPICS.dlq)]
    assert [(letter.run_id, letter.stage) for letter in letters] == [("j@bad", "worker")]
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 3, "0")]
    tally.apply()  # the letter of a run given up on counts once (the DLQ alert reads it)
    assert _worker_letters() == letters_before + 1


def _worker_letters() -> float:
    value = metrics.REGISTRY.get_sample_value("cronstream_dead_letters_total", {"stage": "worker"})
    return value or 0.0
