"""The executor contract: how a worker runs one attempt of one run against its target.

An executor gets the job's ``Target`` and a ``RunContext`` (run id, attempt, payload,
deadline, cancel flag) and either returns a short description of what it did, or raises
an ``ExecutionFailed`` saying whether another attempt could help. Every executor hands
the run id to the target as its idempotency key.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from schemas.events import Target


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """What a target learns about the run it executes (passed to python callables too)."""

    run_id: str
    job_id: str
    attempt: int
    scheduled_at: datetime
    payload: str | None
    tenant: str
    deadline: float  # time.monotonic() by which the attempt must finish
    cancelled: threading.Event = field(default_factory=threading.Event)

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())


class ExecutionFailed(Exception):
    """An attempt did not succeed. ``retriable``: another attempt might."""

    retriable = True
    status = "FAILED"


class TargetInvalid(ExecutionFailed):
    """The target cannot be built or is not allowed here: retrying cannot help."""

    retriable = False


class PermanentFailure(ExecutionFailed):
    """The target answered that this request will never succeed (e.g. HTTP 404)."""

    retriable = False


class TimedOut(ExecutionFailed):
    status = "TIMED_OUT"


class Cancelled(ExecutionFailed):
    retriable = False
    status = "CANCELED"


class Executor(Protocol):
    kind: str

    def execute(self, target: Target, context: RunContext) -> str:
        """Run one attempt. Returns what happened (a line for the history); raises
        ExecutionFailed (or a subclass) when the attempt failed, timed out or was
        cancelled. Any other exception is a bug in the executor."""
        ...
