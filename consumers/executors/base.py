"""The executor contract: how a worker runs one attempt of one run against its target.

An executor gets the job's ``Target`` and a ``RunContext`` (run id, attempt, payload,
deadline, cancel flag) and either returns what the attempt printed or returned (its
output, kept by the worker: docs/run-output.md; None for none), or raises an
``ExecutionFailed`` saying whether another attempt could help (and carrying the output
so far, if any). Every executor hands the run id to the target as its idempotency key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from queue import SimpleQueue
from typing import Any, Protocol, runtime_checkable

from cronstream.consumers.core.output import Output, Result
from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.pool import Done
from cronstream.schemas.events import Target
from cronstream.schemas.redact import scrub
from cronstream.schemas.tenancy import OPERATORS

__all__ = [
    "CancelFlag",
    "Executor",
    "LoopExecutor",
    "Output",
    "Result",
    "Revealed",
    "RunContext",
    "Starter",
    "told",
]

log = logging.getLogger("cronstream.worker")


class CancelFlag:
    """What a run's code uses of ``threading.Event``: ``is_set``, ``set``, ``wait``.

    An Event builds a Condition and a lock, about a tenth of what a worker spends on a
    no-op run; this flag builds one only for a caller that waits."""

    __slots__ = ("_event", "_flag")
    _lock = threading.Lock()  # guards building the Event: set() and wait() may race

    def __init__(self) -> None:
        self._flag = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with CancelFlag._lock:
            self._flag = True
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set or ``timeout`` s passed; True if it is set."""
        if self._flag:
            return True
        with CancelFlag._lock:
            if self._flag:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(timeout)


class Revealed:
    """The secret values resolved for one attempt (``consumers.executors.secrets``).

    Whatever text about the attempt leaves the worker (its outcome's error, its dead
    letter's reason, a log line) goes through ``scrub`` first, so a target that echoes
    a credential back does not put it into a topic. ``add`` is called on the run thread
    and ``scrub`` on the worker's, possibly at once (an attempt given up at its
    deadline): the values are a tuple, replaced whole, never changed in place."""

    __slots__ = ("_values",)

    def __init__(self) -> None:
        self._values: tuple[str, ...] = ()

    def add(self, value: str) -> None:
        self._values = (*self._values, value)

    def scrub(self, text: str) -> str:
        values = self._values
        return scrub(text, values) if values else text


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
    cancelled: CancelFlag = field(default_factory=CancelFlag)
    revealed: Revealed = field(default_factory=Revealed)  # secrets resolved for this attempt

    def remaining(self) -> float:
        """Seconds left before the deadline (never negative)."""
        return max(0.0, self.deadline - time.monotonic())


class Executor(Protocol):
    kind: str

    def execute(self, target: Target, context: RunContext) -> Result:
        """Run one attempt. Returns its output: text or bytes (the worker keeps the last
        ``--output-limit`` bytes), an ``Output`` when the executor dropped part of it
        itself, or None when there is none (no record is written: the cheap path).
        Raises ExecutionFailed (or a subclass) when the attempt failed, timed out or was
        cancelled, with ``output=`` what it printed before. Any other exception is a bug
        in the executor."""
        ...


# What a finished attempt puts on the worker's queue, from a run thread or not.
Finished = SimpleQueue[Done[Any]]
Starter = Callable[[Any, Target, RunContext, Finished], bool]


@runtime_checkable
class LoopExecutor(Protocol):
    """An executor that runs attempts without a run thread each (http: coroutines on its
    event loop; kafka: records whose acknowledgements one thread serves): the worker
    starts one with ``start`` and collects ``(token, output, error)`` from ``done`` as
    it does a thread's. ``start`` returns False when this attempt needs a run thread
    after all (it would block the worker's loop): the worker gives it one."""

    kind: str

    def start(self, token: Any, target: Target, context: RunContext, done: Finished) -> bool: ...


@runtime_checkable
class Destined(Protocol):
    """An executor whose attempts go to a destination that can stop taking them (a
    kafka target's topic partition, an http target's origin) while others answer: the
    worker gives each destination at most ``--destination-slots`` of its run slots
    (``consumers.core.bulkhead``), so that one that holds its attempts until their
    timeout cannot take every slot."""

    kind: str

    def destination(self, target: Target, run_id: str) -> str | None:
        """Where this attempt goes, named the same for every attempt that goes there;
        None: nowhere that can stall (or not known without blocking)."""
        ...


def told(context: RunContext, error: TargetInvalid, brief: str) -> TargetInvalid:
    """``error`` as the run's owner may read it: whole for an operators' job; for a
    tenant's, ``brief``: the worker's allowlists, files and variables are the operators'
    to know (the worker's log keeps the whole error)."""
    if context.tenant == OPERATORS:
        return error
    log.warning("run %s of tenant %r: %s", context.run_id, context.tenant, error)
    return TargetInvalid(brief)
