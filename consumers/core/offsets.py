"""Which offset of a partition may be committed when runs finish out of order.

Runs of one partition start in offset order and finish in any order. The committed
offset must never pass a run that has not finished (a crash would lose it), so the
commit point is the first offset still in flight, or one past the highest offset
started when nothing is.
"""

from __future__ import annotations

import heapq


class OffsetTracker:
    """Offsets of one partition: started, finished, and the contiguous commit point."""

    def __init__(self) -> None:
        self._in_flight: set[int] = set()
        self._heap: list[int] = []
        self._next = -1  # one past the highest offset started

    def __len__(self) -> int:
        return len(self._in_flight)

    def start(self, offset: int) -> None:
        self._in_flight.add(offset)
        heapq.heappush(self._heap, offset)
        self._next = max(self._next, offset + 1)

    def finish(self, offset: int) -> None:
        """Mark ``offset`` done. Raises KeyError for an offset never started (a bug)."""
        self._in_flight.remove(offset)

    def commit_point(self) -> int | None:
        """The offset to commit (the next one to read after a restart), None if none."""
        heap = self._heap
        while heap and heap[0] not in self._in_flight:
            heapq.heappop(heap)
        if heap:
            return heap[0]
        return self._next if self._next >= 0 else None
