"""Run slots per destination: a destination that stops answering holds only its share.

A worker has ``--concurrency`` run slots. An attempt to a destination that takes no
records or never answers (a partition without a leader, an http server that accepts and
stays silent) holds its slot until its timeout, and at tens of runs a second such
attempts took every slot in seconds: the worker then started nothing, for any
destination. A ``Bulkhead`` gives each destination (a kafka target's topic
partition, an http target's origin: ``consumers.executors.base.Destined``) at most
``slots`` attempts in flight. A run whose destination holds them all waits, without a
slot, in its destination's queue (first in, first out) until one of them ends, or its
own timeout passes (``expired``: the caller fails it as timed out, and its retry policy
decides the rest); past ``waiting`` runs queued there, a run is refused at once
(``FULL``). Every other destination's runs start as before.

Pure: the caller passes ``now`` (``time.monotonic()``) and keeps its own items.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from enum import Enum
from typing import Generic, TypeVar

T = TypeVar("T")


class Admission(Enum):
    START = "start"  # within the destination's slots: counted in flight
    WAIT = "wait"  # queued until one of its attempts ends or its deadline
    FULL = "full"  # the destination's queue is full too: refused


class Bulkhead(Generic[T]):
    def __init__(self, slots: int, waiting: int) -> None:
        if slots < 1 or waiting < 0:
            raise ValueError(f"slots must be >= 1 and waiting >= 0, not {slots}, {waiting}")
        self.slots = slots  # attempts in flight per destination
        self.waiting = waiting  # runs queued per destination
        self.in_flight: dict[Hashable, int] = {}  # destination -> attempts in flight
        self.queued: dict[Hashable, deque[tuple[T, float]]] = {}  # -> (item, deadline)

    def admit(self, destination: Hashable, item: T, deadline: float) -> Admission:
        """Whether ``item`` starts now, waits (until ``deadline`` at most), or is refused."""
        count = self.in_flight.get(destination, 0)
        if count < self.slots:
            self.in_flight[destination] = count + 1
            return Admission.START
        queue = self.queued.get(destination)
        if queue is None:
            queue = self.queued[destination] = deque()
        if len(queue) >= self.waiting:
            if not queue:
                del self.queued[destination]
            return Admission.FULL
        queue.append((item, deadline))
        return Admission.WAIT

    def ended(self, destination: Hashable) -> tuple[T, float] | None:
        """An attempt to ``destination`` ended: the next queued item and its deadline,
        counted in flight in its place (the caller starts it), or None."""
        queue = self.queued.get(destination)
        if queue:
            item = queue.popleft()
            if not queue:
                del self.queued[destination]
            return item
        count = self.in_flight.get(destination, 0) - 1
        if count > 0:
            self.in_flight[destination] = count
        else:
            self.in_flight.pop(destination, None)
        return None

    def expired(
        self, now: float, keep: Callable[[Hashable, T, float], bool] | None = None
    ) -> list[T]:
        """The queued items whose deadline passed, taken out of their queues; but those
        ``keep(destination, item, deadline)`` keeps waiting."""
        gone: list[T] = []
        for destination in list(self.queued):
            queue = self.queued[destination]
            if all(deadline > now for _, deadline in queue):
                continue
            kept: deque[tuple[T, float]] = deque()
            for item, deadline in queue:
                if deadline > now or (keep is not None and keep(destination, item, deadline)):
                    kept.append((item, deadline))
                else:
                    gone.append(item)
            if kept:
                self.queued[destination] = kept
            else:
                del self.queued[destination]
        return gone

    def drop(self, gone: Callable[[T], bool]) -> list[T]:
        """Take the queued items ``gone`` picks out of their queues (revoked, cancelled)."""
        dropped: list[T] = []
        for destination in list(self.queued):
            queue = self.queued[destination]
            kept: deque[tuple[T, float]] = deque()
            for entry in queue:
                if gone(entry[0]):
                    dropped.append(entry[0])
                else:
                    kept.append(entry)
            if len(kept) == len(queue):
                continue
            if kept:
                self.queued[destination] = kept
            else:
                del self.queued[destination]
        return dropped

    def held(self, destination: Hashable) -> int:
        """Attempts to ``destination`` in flight."""
        return self.in_flight.get(destination, 0)

    def __len__(self) -> int:
        """Items queued, every destination's."""
        return sum(len(q) for q in self.queued.values())
