"""The worker's run slots per destination (``consumers.core.bulkhead``): which
destination a run goes to (its executor's ``destination``: a kafka target's topic
partition, an http target's origin), the runs waiting for one of its slots, and the
runs whose turn came.

A run that waits has not started: no STARTED outcome, no attempt; a revoked partition's
waiting runs are left to the next owner, as queued ones are (``drop``); one cancelled
while it waits ends CANCELED at once (``cancel``). It waits as long as its destination
answers (an attempt to it ended other than by timing out since it began to wait: slow,
not stalled), and its attempt then gets its whole timeout; while the destination
answers nothing its timeout counts from when it began to wait (``expired``), and the
attempt that follows gets what is left of it.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping

from consumers.core.bulkhead import Admission, Bulkhead
from consumers.executors.base import Destined, Executor
from consumers.worker.pending import Pending

log = logging.getLogger("cronstream.worker")
# Runs waiting per destination at most (about 1 KB each); past it a run to that
# destination fails at once, and its retry policy decides what follows.
WAITING_PER_DESTINATION = 1000
WARN_EVERY_S = 60.0  # a destination whose slots are all held is logged this often at most


class Destinations:
    def __init__(self, executors: Mapping[str, Executor], *, slots: int) -> None:
        self.where: dict[str, Callable[..., str | None]] = {
            kind: executor.destination
            for kind, executor in executors.items()
            if isinstance(executor, Destined)
        }
        self.slots = slots
        self.bulkhead: Bulkhead[Pending] = Bulkhead(slots, WAITING_PER_DESTINATION)
        self.waiting: dict[str, Pending] = {}  # run id -> its run, waiting
        self.ready: deque[tuple[Pending, float]] = deque()  # (run, deadline): start first
        self._warned: dict[str, float] = {}  # destination -> when it was last logged
        self._heard: dict[str, float] = {}  # destination -> when an attempt last answered

    def admit(self, pending: Pending, now: float) -> Admission:
        """Whether ``pending``'s attempt may take a slot of its destination now (START:
        it holds one until ``ended``), waits for one (WAIT: it comes back on ``ready``
        with its deadline, or from ``expired``), or is refused (FULL)."""
        run = pending.run
        where = self.where.get(run.target.type)
        destination = None if where is None else where(run.target, run.run_id)
        if destination is None:
            return Admission.START
        pending.destination = destination
        admission = self.bulkhead.admit(destination, pending, now + run.timeout_ms / 1000)
        if admission is Admission.WAIT:
            self.waiting[run.run_id] = pending
            self._warn(destination, now)
        return admission

    def heard(self, pending: Pending, now: float) -> None:
        """``pending``'s attempt ended with an answer from its destination (anything
        but a time-out): the runs waiting for it wait on."""
        destination = pending.destination
        if destination is not None:
            if len(self._heard) > 10_000:
                self._heard.clear()
            self._heard[destination] = now

    def ended(self, pending: Pending) -> None:
        """``pending``'s attempt no longer holds its destination's slot (it ended, or
        never started): the next run waiting there, if any, goes on ``ready``."""
        destination = pending.destination
        if destination is None:
            return
        pending.destination = None
        turn = self.bulkhead.ended(destination)
        if turn is not None:
            waited, deadline = turn
            del self.waiting[waited.run.run_id]
            if self._answering(destination, waited, deadline):  # slow, not stalled
                deadline = time.monotonic() + waited.run.timeout_ms / 1000
            self.ready.append((waited, deadline))

    def _answering(self, destination: Hashable, pending: Pending, deadline: float) -> bool:
        """Whether ``destination`` answered since ``pending`` began to wait."""
        began = deadline - pending.run.timeout_ms / 1000
        return self._heard.get(str(destination), -1.0) >= began

    def expired(self, now: float) -> list[Pending]:
        """The waiting runs whose timeout passed, no longer waiting (``timeout`` says
        why)."""
        if not self.waiting:
            return []
        gone = self.bulkhead.expired(now, keep=self._answering)
        for pending in gone:
            del self.waiting[pending.run.run_id]
        return gone

    def cancel(self, run_id: str) -> Pending | None:
        """The waiting run ``run_id``, no longer waiting; None if it does not wait."""
        pending = self.waiting.pop(run_id, None)
        if pending is not None:
            self.bulkhead.drop(lambda p: p is pending)
            pending.destination = None
        return pending

    def drop(self, gone: Callable[[Pending], bool]) -> list[Pending]:
        """The waiting runs and those whose turn came that ``gone`` picks (revoked), no
        longer waiting; the slots of the latter go to the next in line."""
        dropped = self.bulkhead.drop(gone)
        for pending in dropped:
            del self.waiting[pending.run.run_id]
            pending.destination = None
        kept: deque[tuple[Pending, float]] = deque()
        while self.ready:
            entry = self.ready.popleft()
            if gone(entry[0]):
                dropped.append(entry[0])
                self.ended(entry[0])  # may put the next one on ``ready``: looked at too
            else:
                kept.append(entry)
        self.ready.extend(kept)  # in place: the worker's loop holds it
        return dropped

    def refusal(self, pending: Pending) -> str:
        """Why ``pending`` (refused: FULL) does not start; it holds no slot."""
        destination, pending.destination = pending.destination, None
        return (
            f"not started: {destination} holds its {self.slots} slots and "
            f"{WAITING_PER_DESTINATION} runs wait for one"
        )

    def timeout(self, pending: Pending) -> str:
        """Why ``pending`` (from ``expired``) timed out; it holds no slot."""
        destination, pending.destination = pending.destination, None
        return (
            f"timed out waiting for a slot of {destination}: its {self.slots} "
            "attempts in flight did not end"
        )

    def _warn(self, destination: str, now: float) -> None:
        if now - self._warned.get(destination, -WARN_EVERY_S) < WARN_EVERY_S:
            return
        if len(self._warned) > 10_000:
            self._warned.clear()
        self._warned[destination] = now
        log.warning(
            "%s holds all its %d slots (--destination-slots): its next runs wait for one "
            "(%d waiting now); runs to other destinations are not held up",
            destination,
            self.slots,
            len(self.bulkhead.queued.get(destination, ())),
        )

    def __len__(self) -> int:
        """Runs waiting."""
        return len(self.waiting)
