"""Outcome observers (``consumers.worker.observers``): the outbox asks each observer the
worker is built with for the records a settled run leaves, and publishes them before the
run's outcome and before its offset is committed; the built-in observers are flows and
deadline alerts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.worker.loop import outcome_observers
from cronstream.consumers.worker.observers import OutcomeObserver, Record
from cronstream.consumers.worker.outbox import Outbox
from cronstream.consumers.worker.pending import Pending
from cronstream.runtime import metrics
from cronstream.schemas.alerts import Alert, AlertKind
from cronstream.schemas.events import (
    DeadLetter,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
    TimerReason,
    TimerRequest,
    Trigger,
)
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.tenancy import AnyEvent
from tests.factories import T0, run_request
from tests.fakes import FakeConsumer, FakeProducer
from tests.processors import TOPICS, decoded, fake_publisher, new_codec

RUNS = "runs"


class Harness:
    def __init__(self, *extra: OutcomeObserver) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        self.consumer = FakeConsumer(producer=self.producer)
        self.tracker = OffsetTracker()
        self.dedup = Dedup(86_400_000, 1000, now_ms=0)
        observers = [*outcome_observers(TOPICS, self.dedup, name="w1"), *extra]
        self.outbox = Outbox(
            fake_publisher(self.codec, self.producer, serve_each=False, track_acks=True),
            topics=TOPICS,
            name="w1",
            consumer=self.consumer,
            trackers={(RUNS, 0): self.tracker},
            dedup=self.dedup,
            tally=metrics.Tally(),
            observers=observers,
        )
        self.offset = 0

    def pending(self, run: RunRequest) -> Pending:
        self.offset += 1
        self.tracker.start(self.offset, 1000)
        return Pending(RUNS, 0, self.offset, run, self.tracker)

    def topics_in_order(self) -> list[str]:
        return [record.topic for record in self.producer.produced]


def _run(run_id: str, *, trigger: Trigger = Trigger.SCHEDULE, target: str = "python") -> RunRequest:
    return run_request(run_id, target=Target(type=target), trigger=trigger)


def test_a_flow_nodes_end_reaches_the_coordinator_after_its_timer_and_before_its_outcome() -> None:
    h = Harness()
    node = _run("F@1/a", trigger=Trigger.FLOW)
    timer = TimerRequest(
        timer_id="F@1/a#2", job_id="F", due_at=T0, reason=TimerReason.RETRY, created_at=T0, run=node
    )
    h.outbox.finish(
        h.pending(node), RunStatus.FAILED, "boom", next_attempt_ms=5, extra=(TOPICS.timers, timer)
    )
    h.outbox.settle(wait=True)
    assert h.topics_in_order() == [TOPICS.timers, TOPICS.flow_events, TOPICS.history]
    (event,) = decoded(h.codec, h.producer, TOPICS.flow_events, FlowEvent)
    assert (event.kind, event.flow_run_id, event.run_id) == (FlowEventKind.OUTCOME, "F@1", "F@1/a")
    assert (event.status, event.retrying, event.error) == ("FAILED", True, "boom")
    ((_offsets, _asynchronous, flushes_before),) = h.consumer.commits
    assert flushes_before == 2  # the timer's and the flow event's flush, then the outcome's


def test_a_missed_deadline_alerts_once_and_a_late_success_clears_it() -> None:
    h = Harness()
    h.outbox.check_deadline(h.pending(_run("j@1", trigger=Trigger.DEADLINE)), running=True)
    h.outbox.check_deadline(h.pending(_run("j@1", trigger=Trigger.DEADLINE)), running=True)
    h.outbox.finish(h.pending(_run("j@1")), RunStatus.SUCCEEDED, None)
    h.outbox.settle(wait=True)
    alerts = decoded(h.codec, h.producer, TOPICS.alerts, Alert)
    assert [(a.kind, a.last_status) for a in alerts] == [
        (AlertKind.DEADLINE_MISSED, "RUNNING"),
        (AlertKind.DEADLINE_CLEARED, "SUCCEEDED"),
    ]
    assert decoded(h.codec, h.producer, TOPICS.flow_events, FlowEvent) == []
    assert h.consumer.commits[-1][0] == [(RUNS, 0, 4, "1000")]  # all three settled


def test_a_flows_deadline_check_goes_to_the_coordinator_not_to_the_alerts() -> None:
    h = Harness()
    h.outbox.check_deadline(
        h.pending(_run("F@1", trigger=Trigger.DEADLINE, target="flow")), running=False
    )
    h.outbox.settle(wait=True)
    (event,) = decoded(h.codec, h.producer, TOPICS.flow_events, FlowEvent)
    assert (event.kind, event.flow_run_id, event.at) == (FlowEventKind.DEADLINE, "F@1", T0)
    assert h.producer.on(TOPICS.alerts) == []


class Letters:
    """An observer added at assembly: a dead letter for every FAILED run."""

    def written(self) -> Sequence[tuple[str, type[AnyEvent]]]:
        return [(TOPICS.dlq, DeadLetter)]

    def settled(
        self, run: RunRequest, status: RunStatus, error: str | None, *, retrying: bool, now_ms: int
    ) -> Sequence[Record]:
        if status is not RunStatus.FAILED:
            return ()
        letter = DeadLetter(
            stage="test",
            reason=error or "",
            source_topic=RUNS,
            source_partition=0,
            source_offset=-1,
            dead_at=T0,
            job_id=run.job_id,
            run_id=run.run_id,
        )
        return [(TOPICS.dlq, letter)]

    def checked(self, check: RunRequest, *, running: bool, now_ms: int) -> Sequence[Record]:
        return ()

    def forget(self, before: datetime) -> None:
        pass


def test_an_observer_added_at_assembly_is_durable_before_the_outcome_and_the_commit() -> None:
    h = Harness(Letters())
    h.outbox.finish(h.pending(_run("j@1")), RunStatus.SUCCEEDED, None)
    h.outbox.finish(h.pending(_run("j@2")), RunStatus.FAILED, "boom")
    h.outbox.settle(wait=True)
    assert h.topics_in_order() == [TOPICS.history, TOPICS.dlq, TOPICS.history]
    (letter,) = decoded(h.codec, h.producer, TOPICS.dlq, DeadLetter)
    assert letter.run_id == "j@2"
    outcomes = decoded(h.codec, h.producer, TOPICS.history, RunOutcome)
    assert [o.run_id for o in outcomes] == ["j@1", "j@2"]
    assert all(record.flushed for record in h.producer.produced)
