"""The worker's commit procedure (``Outbox.settle``): a run's records durable before
its offset moves, a retry timer before its outcome, and no round waiting in
the loop for the broker."""

from __future__ import annotations

import pytest

from cronstream.consumers.worker.outbox import OUTBOX_PRODUCER
from cronstream.schemas.events import RunOutcome, RunStatus, TimerReason, TimerRequest
from tests.factories import T0
from tests.unit.test_worker_parts import RUNS, TOPICS, Parts, pending_at, run


def _retry_timer(run_id: str) -> TimerRequest:
    """The retry timer of ``run_id``'s second attempt."""
    return TimerRequest(
        timer_id=f"{run_id}#2",
        job_id="j",
        due_at=T0,
        reason=TimerReason.RETRY,
        created_at=T0,
        run=run(run_id),
    )


def test_settle_makes_a_retry_timer_durable_before_the_outcome_then_commits() -> None:
    parts = Parts()
    parts.own()
    p = pending_at(parts, 0, run("j@a"))
    timer = _retry_timer("j@a")
    parts.outbox.finish(
        p, RunStatus.FAILED, "boom", next_attempt_ms=5, extra=(TOPICS.timers, timer)
    )
    parts.outbox.settle(wait=True)
    (timer_record,) = parts.producer.on(TOPICS.timers)
    (outcome_record,) = parts.producer.on(TOPICS.history)
    order = parts.producer.produced
    assert order.index(timer_record) < order.index(outcome_record)
    assert timer_record.flushed
    assert outcome_record.flushed
    assert parts.producer.flushes == 2  # the timer's flush, then the outcome's
    ((offsets, asynchronous, flushes_before),) = parts.consumer.commits
    assert offsets == [(RUNS, 0, 1, "1000")]
    assert not asynchronous
    assert flushes_before == 2
    outcome = parts.codec.decode(outcome_record.value, RunOutcome)
    assert (outcome.status, outcome.error, outcome.worker) == (RunStatus.FAILED, "boom", "w1")
    assert dict(outcome_record.headers)["status"] == b"FAILED"


def test_the_commit_never_passes_a_run_not_settled() -> None:
    parts = Parts()
    parts.own()
    first, second = pending_at(parts, 0, run("j@1")), pending_at(parts, 1, run("j@2"))
    parts.outbox.finish(second, RunStatus.SUCCEEDED, None)
    parts.outbox.settle(wait=True)
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 0, "1000")]  # the first is running
    parts.outbox.finish(first, RunStatus.SUCCEEDED, None)
    parts.outbox.settle(wait=True)
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 2, "1001")]


def test_a_run_settled_after_its_partition_came_back_leaves_the_new_tracker_alone() -> None:
    parts = Parts()
    parts.own()
    old = pending_at(parts, 0, run("j@1"))
    parts.intake.forget({(RUNS, 0)})  # revoked while it ran
    parts.own()  # and assigned again: a new tracker
    parts.outbox.finish(old, RunStatus.SUCCEEDED, None)
    parts.outbox.settle(wait=True)  # must not raise KeyError on the new tracker
    assert parts.consumer.commits == []
    assert len(parts.producer.on(TOPICS.history)) == 1  # its outcome is still published


def test_a_failed_delivery_stops_settle_before_any_commit() -> None:
    parts = Parts()
    parts.own()
    parts.outbox.finish(pending_at(parts, 0, run("j@1")), RunStatus.SUCCEEDED, None)
    parts.producer.fail_next = True
    with pytest.raises(Exception, match="delivery"):
        parts.outbox.settle(wait=True)
    assert parts.consumer.commits == []


def test_a_broker_outage_holds_the_commit_and_ends_nothing() -> None:
    """Found by the chaos suite: the broker killed, settle's flush raised "records still
    unacknowledged after 30.0s" out of the worker's loop and the process ended."""
    parts = Parts()
    parts.own()
    parts.outbox.finish(pending_at(parts, 0, run("j@1")), RunStatus.SUCCEEDED, None)
    parts.producer.down = True
    parts.outbox.settle()  # waits for nothing: goes on
    assert parts.consumer.commits == []
    parts.producer.down = False
    parts.outbox._next_commit = 0.0
    parts.outbox.settle()
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 1, "1000")]
    assert OUTBOX_PRODUCER["message.timeout.ms"] == 0  # librdkafka never gives a record up


def test_settle_commits_what_kafka_answered_without_waiting_for_the_rest() -> None:
    """Settle never waits in the loop for acknowledgements. A round closes a
    mark over what was published; runs are committed once their mark is answered in
    full, the rest at a later round; a retry timer's outcome is published only once the
    timer is acknowledged, and committed once the outcome is."""
    parts = Parts()
    parts.own()
    parts.producer.down = True  # nothing answered on the way
    first = pending_at(parts, 0, run("j@1"))
    retried = pending_at(parts, 1, run("j@2"))
    timer = _retry_timer("j@2")
    parts.outbox.finish(first, RunStatus.SUCCEEDED, None)
    parts.outbox.finish(
        retried, RunStatus.FAILED, "boom", next_attempt_ms=5, extra=(TOPICS.timers, timer)
    )
    parts.outbox.settle()  # round 1: the outcome of j@1 and the timer, unanswered
    assert parts.consumer.commits == []
    assert len(parts.producer.on(TOPICS.history)) == 1  # j@2's outcome waits for its timer
    parts.producer.answer(0, 1)  # the broker answers both
    parts.outbox._next_commit = 0.0
    parts.outbox.settle()  # round 2: j@1 committed; j@2's outcome published now
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 1, "1001")]
    assert len(parts.producer.on(TOPICS.history)) == 2
    parts.outbox._next_commit = 0.0
    parts.outbox.settle()  # round 3: its outcome unanswered: nothing more committed
    assert len(parts.consumer.commits) == 1
    parts.producer.answer(0)
    parts.outbox._next_commit = 0.0
    parts.outbox.settle()
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 2, "1001")]
    assert set(parts.producer.flush_timeouts) == {0}  # no round waited for the broker


def test_a_handover_with_the_broker_away_commits_what_was_answered_and_ends_nothing() -> None:
    """Found by the chaos suite (a runs partition's leader cut off, then the group
    moved the worker's partitions): its revoke waited 30 s for acknowledgements, raised
    "177 records still unacknowledged after 30.0s" and the process ended. A handover
    now commits what Kafka answered and leaves the rest awaiting, uncommitted."""
    parts = Parts()
    parts.own()
    parts.producer.down = True
    parts.outbox.finish(pending_at(parts, 0, run("j@1")), RunStatus.SUCCEEDED, None)
    parts.outbox.settle()  # a round closes over j@1's outcome, unanswered
    parts.outbox.finish(pending_at(parts, 1, run("j@2")), RunStatus.SUCCEEDED, None)
    parts.producer.answer(0)  # j@1's outcome answered, then the broker is cut off
    parts.outbox.settle(wait=True)  # the handover: waits, raises nothing
    ((offsets, asynchronous, _),) = parts.consumer.commits
    assert (offsets, asynchronous) == ([(RUNS, 0, 1, "1001")], False)  # j@1 only
    assert len(parts.outbox.awaiting) == 1  # j@2's outcome: not acknowledged, kept
    parts.producer.down = False
    parts.outbox._next_commit = 0.0
    parts.outbox.settle()  # the broker answers: a later round commits j@2
    assert parts.consumer.commits[-1][0] == [(RUNS, 0, 2, "1001")]
