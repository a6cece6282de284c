"""A bounded memo for the scheduling core's pure lookups."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """Computed values by key, all forgotten at once when ``limit`` are held: inputs may
    be unbounded (a million distinct cron expressions), a hit is a dict lookup, and the
    memory is bounded. ``memo.get(key)`` or, on a miss, ``memo.keep(key, value)``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def keep(self, key: K, value: V) -> V:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
