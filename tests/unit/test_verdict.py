"""The worker's decisions on a run, as a table (``consumers.core.verdict``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cronstream.consumers.core.verdict import after_failure, before_start, retry_timer
from cronstream.schemas.events import (
    JOB_DELETED,
    JOB_PAUSED,
    RetryPolicy,
    RunStatus,
    TimerReason,
    Trigger,
    from_ms,
)
from cronstream.schemas.limits import MAX_BACKOFF_MS
from tests.factories import T0, run_request

NOW = 1_800_000_000_000
POLICY = RetryPolicy(max_attempts=3, initial_backoff_ms=1000, max_backoff_ms=60_000)
F, T, C = RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.CANCELED


def top(low: float, high: float) -> float:
    return high  # the longest wait full jitter allows


@pytest.mark.parametrize(
    ("ending", "retriable", "cancel", "attempt", "status", "retry_in", "letter", "suffix"),
    [
        # a retriable failure with attempts left: a retry after the backoff ceiling
        (F, True, False, 1, F, 1000, False, ""),
        (F, True, False, 2, F, 2000, False, ""),
        (T, True, False, 1, T, 1000, False, ""),
        # the last attempt: dead-lettered, whatever the ending
        (F, True, False, 3, RunStatus.DEAD_LETTERED, None, True, " (no attempts left)"),
        (T, True, False, 3, RunStatus.DEAD_LETTERED, None, True, " (no attempts left)"),
        # retrying cannot help: FAILED at once, with a dead letter, even on attempt 1
        (F, False, False, 1, F, None, True, " (not retried: retrying cannot help)"),
        # cancelled: by the executor, or a cancel on record when it failed; never retried
        (C, False, False, 1, C, None, False, ""),
        (F, True, True, 1, C, None, False, ""),
        (T, True, True, 3, C, None, False, ""),
    ],
)
def test_a_failed_attempt_is_retried_dead_lettered_or_cancelled(
    ending: RunStatus,
    retriable: bool,
    cancel: bool,
    attempt: int,
    status: RunStatus,
    retry_in: int | None,
    letter: bool,
    suffix: str,
) -> None:
    verdict = after_failure(
        ending,
        "ExecutionFailed: boom",
        retriable=retriable,
        cancel_requested=cancel,
        policy=POLICY,
        attempt=attempt,
        now_ms=NOW,
        uniform=top,
    )
    assert verdict.status is status
    assert verdict.retry_at_ms == (None if retry_in is None else NOW + retry_in)
    assert verdict.dead_letter is letter
    assert verdict.error == "ExecutionFailed: boom" + suffix


def test_backoff_is_capped_by_the_policy() -> None:
    policy = RetryPolicy(max_attempts=50, initial_backoff_ms=1000, max_backoff_ms=60_000)
    verdict = after_failure(
        F,
        "x",
        retriable=True,
        cancel_requested=False,
        policy=policy,
        attempt=40,
        now_ms=NOW,
        uniform=top,
    )
    assert verdict.retry_at_ms == NOW + 60_000


@pytest.mark.parametrize(
    ("cancelled", "duplicate", "expected"),
    [
        (False, False, None),
        (True, False, (RunStatus.CANCELED, "cancelled before it started")),
        (False, True, (RunStatus.DUPLICATE, "already executed (see history)")),
        (True, True, (RunStatus.CANCELED, "cancelled before it started")),  # cancel wins
    ],
)
def test_before_start_a_cancel_or_a_duplicate_never_reaches_the_target(
    cancelled: bool, duplicate: bool, expected: tuple[RunStatus, str] | None
) -> None:
    verdict = before_start(cancelled=cancelled, duplicate=duplicate)
    assert (None if verdict is None else (verdict.status, verdict.error)) == expected


def test_a_run_cancelled_because_its_job_was_paused_is_skipped_as_its_slots_are() -> None:
    """The scheduler cancels the runs it emitted ahead of a pause (``--lookahead``)."""
    paused = before_start(cancelled=True, duplicate=False, reason=JOB_PAUSED)
    assert paused is not None
    assert (paused.status, paused.error) == (RunStatus.SKIPPED, JOB_PAUSED)
    deleted = before_start(cancelled=True, duplicate=True, reason=JOB_DELETED)
    assert deleted is not None
    assert (deleted.status, deleted.error) == (RunStatus.CANCELED, "cancelled before it started")
    assert before_start(cancelled=False, duplicate=False, reason=JOB_PAUSED) is None


def test_the_retry_timer_keeps_the_run_id_and_counts_the_attempt() -> None:
    run = run_request("j@x", attempt=2, possible_duplicate=True)
    timer = retry_timer(run, NOW + 5000, NOW)
    assert (timer.timer_id, timer.job_id, timer.reason) == ("j@x#3", "j", TimerReason.RETRY)
    assert timer.due_at == from_ms(NOW + 5000) == timer.run.fired_at
    assert timer.created_at == from_ms(NOW)
    assert timer.run.run_id == "j@x"
    assert timer.run.attempt == 3
    assert timer.run.trigger is Trigger.RETRY
    assert not timer.run.possible_duplicate
    assert timer.run.scheduled_at == T0
    node = replace(run, run_id="f@x/a", job_id="f", trigger=Trigger.FLOW)
    assert retry_timer(node, NOW + 5000, NOW).run.trigger is Trigger.FLOW  # still a flow node


def test_a_backoff_of_any_size_gives_a_retry_timer_that_can_be_written() -> None:
    """Found by review: ``--backoff 100000000d..100000000d`` (or such a policy from
    another producer) made the first failure raise in ``from_ms``; waits are capped."""
    huge = RetryPolicy(max_attempts=5, initial_backoff_ms=2**62, max_backoff_ms=2**62)
    verdict = after_failure(
        RunStatus.FAILED,
        "boom",
        retriable=True,
        cancel_requested=False,
        policy=huge,
        attempt=1,
        now_ms=NOW,
        uniform=lambda _a, b: b,
    )
    assert verdict.retry_at_ms == NOW + MAX_BACKOFF_MS
    run = run_request("j@x", retry=huge)
    assert retry_timer(run, NOW + MAX_BACKOFF_MS, NOW).due_at == from_ms(NOW + MAX_BACKOFF_MS)
