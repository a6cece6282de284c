"""Runs read before they are due, held until their due time.

A scheduler with a lookahead emits each run request up to ``lookahead_ms`` before it is
due, with its due time (``RunRequest.due_at``). The worker reads it as usual (its
offset is tracked, so no commit passes it) and keeps it here; ``pop_due`` hands over
the runs whose time came, oldest first, to the priority backlogs. A cancel that comes
meanwhile is found when the run is taken (``verdict.before_start``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class DelayQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, T]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due_ms: int, item: T) -> None:
        heapq.heappush(self._heap, (due_ms, next(self._seq), item))

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[T]:
        """The items due at or before ``now_ms``, in due order (ties: as pushed)."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= now_ms:
            out.append(heapq.heappop(heap)[2])
        return out

    def keep(self, wanted: Callable[[T], bool]) -> None:
        """Drop the items ``wanted`` refuses (their partitions were revoked)."""
        self._heap = [entry for entry in self._heap if wanted(entry[2])]
        heapq.heapify(self._heap)
