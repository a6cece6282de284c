"""What becomes of a run request: the worker's start / retry / cancel / dead-letter /
timeout decisions as pure functions of what happened and the run's retry policy.

- Before it starts: a cancelled run is CANCELED (SKIPPED when the scheduler cancelled
  it because its job was paused after it was emitted ahead), one already executed (or
  executing) is DUPLICATE; anything else starts.
- After a failed attempt: a cancel (the executor stopped on it, or the attempt failed
  while a cancel for it was on record) is CANCELED. Otherwise the attempt is FAILED or
  TIMED_OUT, and a retriable one gets a next attempt after the policy's backoff (a retry
  timer). A retriable failure with no attempts left is DEAD_LETTERED; a failure that
  retrying cannot help (unknown target, refused address, HTTP 404) is FAILED at once.
  Both of those leave a DLQ record carrying the error.

The worker turns a ``Verdict`` into records (``consumers.worker``); nothing here reads a
clock or touches Kafka.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from cronstream.consumers.core.backoff import next_attempt_due
from cronstream.schemas.events import (
    JOB_PAUSED,
    RetryPolicy,
    RunRequest,
    RunStatus,
    TimerReason,
    TimerRequest,
    Trigger,
    from_ms,
)

NOT_STARTED_CANCELLED = "cancelled before it started"
NOT_STARTED_DUPLICATE = "already executed (see history)"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome to record for one attempt.

    ``error``: the outcome's error text (None when it succeeded). ``retry_at_ms``: a next
    attempt is due then (the worker leaves a retry timer). ``dead_letter``: the run
    also leaves a DLQ record with ``error`` as its reason."""

    status: RunStatus
    error: str | None = None
    retry_at_ms: int | None = None
    dead_letter: bool = False


def before_start(*, cancelled: bool, duplicate: bool, reason: str | None = None) -> Verdict | None:
    """None: start the attempt. ``cancelled``: a cancel for the run is on record, for
    ``reason``. ``duplicate``: the attempt is executing here, or already finished
    (dedup)."""
    if cancelled and reason == JOB_PAUSED:  # as the scheduler records a paused job's slot
        return Verdict(RunStatus.SKIPPED, JOB_PAUSED)
    if cancelled:
        return Verdict(RunStatus.CANCELED, NOT_STARTED_CANCELLED)
    if duplicate:
        return Verdict(RunStatus.DUPLICATE, NOT_STARTED_DUPLICATE)
    return None


def after_failure(
    ending: RunStatus,
    error: str,
    *,
    retriable: bool,
    cancel_requested: bool,
    policy: RetryPolicy,
    attempt: int,
    now_ms: int,
    uniform: Callable[[float, float], float] = random.uniform,
) -> Verdict:
    """The verdict on an attempt that did not succeed.

    ``ending``: how the executor says it ended (FAILED, TIMED_OUT or CANCELED).
    ``cancel_requested``: a cancel for this run was on record when it ended.
    ``attempt``: the attempt that ended (1-based)."""
    if ending is RunStatus.CANCELED or cancel_requested:
        return Verdict(RunStatus.CANCELED, error)
    due = next_attempt_due(policy, attempt, now_ms, uniform=uniform) if retriable else None
    if due is not None:
        status = RunStatus.TIMED_OUT if ending is RunStatus.TIMED_OUT else RunStatus.FAILED
        return Verdict(status, error, retry_at_ms=due)
    if retriable:
        return Verdict(RunStatus.DEAD_LETTERED, f"{error} (no attempts left)", dead_letter=True)
    return Verdict(
        RunStatus.FAILED, f"{error} (not retried: retrying cannot help)", dead_letter=True
    )


def retry_timer(run: RunRequest, due_ms: int, now_ms: int) -> TimerRequest:
    """The timer that brings the next attempt of ``run`` back at ``due_ms`` (held by the
    scheduler; the same run id, the attempt number one higher)."""
    due = from_ms(due_ms)
    retry = replace(
        # A flow node's retry stays a FLOW run: the worker reports its end to the flows
        # coordinator by that trigger (found by `make run`: a retried node's success was
        # never reported and its flow run stopped there).
        run,
        attempt=run.attempt + 1,
        possible_duplicate=False,
        trigger=Trigger.FLOW if run.trigger is Trigger.FLOW else Trigger.RETRY,
        fired_at=due,
    )
    return TimerRequest(
        timer_id=f"{run.run_id}#{retry.attempt}",
        job_id=run.job_id,
        due_at=due,
        reason=TimerReason.RETRY,
        created_at=from_ms(now_ms),
        run=retry,
    )
