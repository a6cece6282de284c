"""A two-tier timing wheel: buckets for what is due soon, a heap index for the rest.

The near tier is a hashed wheel of ``tick_ms`` buckets covering ``horizon_ms`` from now;
firing walks the buckets up to now, so the cost of a tick is the number of items due,
not the number of items held. Everything due later sits in the far tier, a heap of
(due, sequence, item) that costs one small tuple per item and nothing per tick; items
move into the wheel as they come within the horizon, a bounded number per call so a
burst on one boundary is spread over the ticks before it instead of stalling one.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

Item = Any


class TimingWheel:
    def __init__(self, *, tick_ms: int = 10, horizon_ms: int = 60_000) -> None:
        self.tick_ms = tick_ms
        self.horizon_ms = horizon_ms
        self._buckets: dict[int, list[tuple[int, Item]]] = {}
        self._far: list[tuple[int, int, Item]] = []
        self._seq = itertools.count()
        self._cursor: int | None = None  # lowest bucket that may still hold items
        self._near = 0
        self._limit = 0  # items due before this are in the near tier
        # Called with each item as it enters the near tier (the adapter prepares it).
        self.on_near: Callable[[Item], None] | None = None

    def __len__(self) -> int:
        return self._near + len(self._far)

    @property
    def near(self) -> int:
        return self._near

    @property
    def far(self) -> int:
        return len(self._far)

    def add(self, due_ms: int, item: Item) -> None:
        if due_ms < self._limit:
            self._put(due_ms, item)
        else:
            heapq.heappush(self._far, (due_ms, next(self._seq), item))

    def _put(self, due_ms: int, item: Item) -> None:
        index = due_ms // self.tick_ms
        if self._cursor is not None and index < self._cursor:
            index = self._cursor  # already overdue: fire on the next pass
        bucket = self._buckets.get(index)
        if bucket is None:
            self._buckets[index] = [(due_ms, item)]
        else:
            bucket.append((due_ms, item))
        self._near += 1
        if self.on_near is not None:
            self.on_near(item)

    def promote(self, now_ms: int, budget: int = 64) -> int:
        """Move far items due before now + horizon into the wheel: all that are due by
        the next tick, and up to ``budget`` more."""
        self._limit = now_ms + self.horizon_ms
        urgent = now_ms + self.tick_ms
        far = self._far
        moved = 0
        while far and far[0][0] < self._limit and (moved < budget or far[0][0] <= urgent):
            due, _, item = heapq.heappop(far)
            self._put(due, item)
            moved += 1
        if far and far[0][0] < self._limit:
            self._limit = far[0][0]  # keep new items behind the ones still waiting
        return moved

    def pop_due(self, now_ms: int, limit: int | None = None) -> tuple[list[tuple[int, Item]], bool]:
        """Remove and return (due, item) pairs with due <= now, oldest bucket first, at
        most ``limit`` of them; the flag says whether everything due was returned. When
        it was not, everything due before ``drained_through`` was."""
        self.promote(now_ms)
        current = now_ms // self.tick_ms
        if self._cursor is None:
            self._cursor = min(self._buckets, default=current)
        out: list[tuple[int, Item]] = []
        buckets = self._buckets
        room = limit if limit is not None else 1 << 62
        if current - self._cursor > 4 * len(buckets) + 64:  # long gap: visit what exists
            indexes = sorted(k for k in buckets if k < current)
        else:
            indexes = [k for k in range(self._cursor, current) if k in buckets]
        for index in indexes:
            full = buckets.pop(index)
            if len(full) > room:
                out.extend(full[:room])
                buckets[index] = full[room:]
                self._cursor = index
                self._near -= len(out)
                return out, False
            out.extend(full)
            room -= len(full)
        self._cursor = current
        bucket = buckets.get(current)
        if bucket:
            due = [entry for entry in bucket if entry[0] <= now_ms]
            if due:
                keep = [entry for entry in bucket if entry[0] > now_ms]
                if len(due) > room:
                    keep.extend(due[room:])
                    due = due[:room]
                    out.extend(due)
                    buckets[current] = keep
                    self._near -= len(out)
                    return out, False
                out.extend(due)
                if keep:
                    buckets[current] = keep
                else:
                    del buckets[current]
        self._near -= len(out)
        return out, True

    def purge(self, keep: Callable[[Item], bool]) -> int:
        """Drop every item ``keep`` refuses, near and far; how many went. One pass over
        everything held: the owner calls it when dead items (a deleted or replaced job's
        next slot, left to be skipped when due) outnumber the live ones, so memory follows
        what is scheduled, not how many definitions came and went."""
        dropped = 0
        for index in list(self._buckets):
            bucket = self._buckets[index]
            kept = [entry for entry in bucket if keep(entry[1])]
            dropped += len(bucket) - len(kept)
            if kept:
                self._buckets[index] = kept
            else:
                del self._buckets[index]
        self._near -= dropped
        far = [entry for entry in self._far if keep(entry[2])]
        if len(far) < len(self._far):
            dropped += len(self._far) - len(far)
            heapq.heapify(far)
            self._far = far
        return dropped

    @property
    def drained_through(self) -> int:
        """Every item due at or before this instant has been returned by pop_due.

        Overdue items added behind the cursor wait in the cursor's bucket with their
        own (earlier) due times, so they hold this back too."""
        cursor = self._cursor or 0
        through = cursor * self.tick_ms - 1
        waiting = self._buckets.get(cursor)
        if waiting:
            through = min(through, min(due for due, _ in waiting) - 1)
        return through
