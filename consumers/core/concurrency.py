"""A job's concurrency policy: what a new run does while another run of the job executes.

Every run of a job is on the job's partition, so the one worker that owns it sees them
all: the policy is enforced there, with no coordination. Per job, the gate knows the
runs executing under a policy other than ALLOW, and the runs queued behind them:

- ALLOW: start (nothing is tracked);
- FORBID: the new run is not started; it ends SKIPPED, naming the run still executing;
- REPLACE: the runs executing are cancelled and the new one starts at once;
- QUEUE: the new run waits; when the last run executing ends, the first queued starts.

A retry (attempt 2 or later) belongs to a run that started already: it always starts.
Pure: the worker (``consumers.worker.attempts``) cancels, settles and starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
ALLOW, FORBID, REPLACE, QUEUE = "ALLOW", "FORBID", "REPLACE", "QUEUE"


@dataclass(frozen=True, slots=True)
class Decision:
    start: bool
    skip_reason: str | None = None  # FORBID: why it does not start
    cancel: tuple[str, ...] = ()  # REPLACE: the run ids to cancel


START = Decision(start=True)
WAIT = Decision(start=False)


class ConcurrencyGate(Generic[T]):
    def __init__(self) -> None:
        self.running: dict[str, dict[str, T]] = {}  # job id -> run id -> item
        self.queued: dict[str, deque[T]] = {}  # job id -> items, oldest first

    def admit(self, job_id: str, run_id: str, *, attempt: int, policy: str, item: T) -> Decision:
        """Whether ``item`` (run ``run_id``, attempt ``attempt``) starts now; a QUEUE'd
        item is kept and comes back from ``ended``."""
        if policy == ALLOW or attempt > 1:
            return START
        others = self.running.get(job_id)
        if policy == QUEUE and (others or self.queued.get(job_id)):
            self.queued.setdefault(job_id, deque()).append(item)
            return WAIT
        if not others:
            return START
        if policy == FORBID:
            return Decision(
                start=False,
                skip_reason=(f"concurrency forbid: run {min(others)} of the job is still running"),
            )
        if policy == REPLACE:
            return Decision(start=True, cancel=tuple(sorted(others)))
        raise ValueError(f"unknown concurrency policy {policy!r}")  # the schema's enum

    def started(self, job_id: str, run_id: str, *, policy: str, item: T) -> None:
        if policy != ALLOW:
            self.running.setdefault(job_id, {})[run_id] = item

    def ended(self, job_id: str, run_id: str) -> T | None:
        """A run stopped executing: the queued item to start now, if any (``release``)."""
        running = self.running.get(job_id)
        if running is None or running.pop(run_id, None) is None:
            return None
        if not running:
            del self.running[job_id]
        return self.release(job_id)

    def release(self, job_id: str) -> T | None:
        """The first queued item of a job with no run executing (to start now), if any.
        Call it again when that item does not start after all (cancelled meanwhile)."""
        queue = self.queued.get(job_id)
        if not queue or self.running.get(job_id):
            return None
        item = queue.popleft()
        if not queue:
            del self.queued[job_id]
        return item

    def drop_queued(self, gone: Callable[[T], bool]) -> int:
        """Forget the queued items ``gone`` says were revoked (the next owner reads them
        again); returns how many."""
        dropped = 0
        for job_id in list(self.queued):
            kept = deque(i for i in self.queued[job_id] if not gone(i))
            dropped += len(self.queued[job_id]) - len(kept)
            if kept:
                self.queued[job_id] = kept
            else:
                del self.queued[job_id]
        return dropped

    def __len__(self) -> int:
        """Items queued."""
        return sum(len(q) for q in self.queued.values())
