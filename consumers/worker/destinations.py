"""The worker's run slots per destination (``consumers.core.bulkhead``): which
destination a run goes to (its executor's ``destination``: a kafka target's topic
partition, an http target's origin), the runs waiting for one of its slots, and the
runs whose turn came.

``Pending.destination`` is set while a run holds a slot of its destination, and only
then: a waiting run's destination is kept here (``waiting``).

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

from cronstream.consumers.core.bulkhead import Admission, Bulkhead
from cronstream.consumers.executors.base import Destined, Executor
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.pending import Pending

log = logging.getLogger("cronstream.worker")
WARN_EVERY_S = 60.0  # a destination whose slots are all held is logged this often at most


class Destinations:
    def __init__(self, executors: Mapping[str, Executor], *, slots: int, waiting: int) -> None:
        """``slots`` per destination; at most ``waiting`` runs wait for one of them (about
        1 KB each; past it a run to that destination fails at once, and its retry policy
        decides what follows: the worker's flow control pauses fetching well before)."""
        self.where: dict[str, Callable[..., str | None]] = {
            kind: executor.destination
            for kind, executor in executors.items()
            if isinstance(executor, Destined)
        }
        self.slots = slots
        self.bulkhead: Bulkhead[Pending] = Bulkhead(slots, waiting)
        self.waiting: dict[str, str] = {}  # run id of a waiting run -> its destination
        self.ready: deque[tuple[Pending, float]] = deque()  # (run, deadline): start first
        self._warned: dict[str, float] = {}  # destination -> when it was last logged
        self._heard: dict[Hashable, float] = {}  # destination -> when one last answered

    @classmethod
    def of_worker(cls, executors: Mapping[str, Executor], config: WorkerConfig) -> Destinations:
        """A worker's: ``--destination-slots`` (default half of ``--concurrency``); four
        times its read-ahead may wait (its flow control pauses fetching at twice it,
        the waiting runs included)."""
        slots = config.destination_slots or max(1, config.concurrency // 2)
        return cls(executors, slots=slots, waiting=4 * config.read_ahead)

    def admit(self, pending: Pending, now: float) -> tuple[Admission, str | None]:
        """Whether ``pending``'s attempt may take a slot of its destination now (START:
        it holds one until ``ended``), waits for one (WAIT: it comes back on ``ready``
        with its deadline, or from ``expired``), or is refused (FULL); and where it goes
        (None: nowhere that can stall)."""
        run = pending.run
        where = self.where.get(run.target.type)
        destination = None if where is None else where(run.target, run.run_id)
        if destination is None:
            return Admission.START, None
        admission = self.bulkhead.admit(destination, pending, now + run.timeout_ms / 1000)
        if admission is Admission.START:
            pending.destination = destination
        elif admission is Admission.WAIT:
            self.waiting[run.run_id] = destination
            self._warn(destination, now)
        return admission, destination

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
            waited.destination = destination  # the slot is its now
            if self._answering(destination, waited, deadline):  # slow, not stalled
                deadline = time.monotonic() + waited.run.timeout_ms / 1000
            self.ready.append((waited, deadline))

    def _answering(self, destination: Hashable, pending: Pending, deadline: float) -> bool:
        """Whether ``destination`` answered since ``pending`` began to wait."""
        began = deadline - pending.run.timeout_ms / 1000
        return self._heard.get(destination, -1.0) >= began

    def expired(self, now: float) -> list[tuple[Pending, str]]:
        """The waiting runs whose timeout passed, no longer waiting, with their
        destinations (``timeout`` says why)."""
        if not self.waiting:
            return []
        gone = self.bulkhead.expired(now, keep=self._answering)
        return [(pending, self.waiting.pop(pending.run.run_id)) for pending in gone]

    def cancel(self, run_id: str) -> Pending | None:
        """The waiting run ``run_id``, no longer waiting; None if it does not wait."""
        if self.waiting.pop(run_id, None) is None:
            return None
        (pending,) = self.bulkhead.drop(lambda p: p.run.run_id == run_id)
        return pending

    def drop(self, gone: Callable[[Pending], bool]) -> list[Pending]:
        """The waiting runs and those whose turn came that ``gone`` picks (revoked), no
        longer waiting; the slots of the latter go to the next in line."""
        dropped = self.bulkhead.drop(gone)
        for pending in dropped:
            del self.waiting[pending.run.run_id]
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

    def refusal(self, destination: str | None) -> str:
        """Why a run to ``destination`` was refused (FULL)."""
        return (
            f"not started: {destination} holds its {self.slots} slots and "
            f"{self.bulkhead.waiting} runs wait for one"
        )

    def timeout(self, destination: str | None) -> str:
        """Why a run that waited for a slot of ``destination`` timed out."""
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
