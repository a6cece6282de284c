"""Which offset of a partition may be committed when runs finish out of order.

Runs of one partition start in offset order and finish in any order. The committed
offset must never pass a run that has not finished (a crash would lose it), so the
commit point is the first offset still in flight, or one past the highest offset
started when nothing is. Each offset carries its record's timestamp, so a commit can say
how old the oldest run it leaves unfinished is (``commit_time``).
"""

from __future__ import annotations

import heapq


class OffsetTracker:
    """Offsets of one partition: started, finished, and the contiguous commit point."""

    def __init__(self) -> None:
        self._in_flight: dict[int, int] = {}  # offset -> record timestamp (ms)
        self._heap: list[int] = []
        self._next = -1  # one past the highest offset started
        self._last_time = -1  # timestamp of the highest offset started

    def __len__(self) -> int:
        return len(self._in_flight)

    def start(self, offset: int, timestamp_ms: int = -1) -> None:
        self._in_flight[offset] = timestamp_ms
        heapq.heappush(self._heap, offset)
        if offset + 1 > self._next:
            self._next = offset + 1
            self._last_time = timestamp_ms

    def finish(self, offset: int) -> None:
        """Mark ``offset`` done. Raises KeyError for an offset never started (a bug)."""
        del self._in_flight[offset]

    def commit_point(self) -> int | None:
        """The offset to commit (the next one to read after a restart), None if none."""
        heap = self._heap
        while heap and heap[0] not in self._in_flight:
            heapq.heappop(heap)
        if heap:
            return heap[0]
        return self._next if self._next >= 0 else None

    def commit_time(self) -> int:
        """The timestamp of the run at the commit point (every run after it is at least
        about as recent); the newest run started when nothing is in flight."""
        point = self.commit_point()
        if point is not None and point in self._in_flight:
            return self._in_flight[point]
        return self._last_time
