"""Per-tenant fire rates: a tenant's fires beyond its rate are deferred, not
dropped.

One ``TenantRates`` per scheduler processor, shared by its partitions. A tenant's rate
is a sliding window: at most ``rate`` fires in any one second (a rate under one: one fire
per ``1 / rate`` seconds), so a burst of one second's worth leaves at once and the next
fire waits until the first of it is a second old. A token bucket (GCRA, used before)
lets ``2 * rate - 1`` out in the first second after an idle spell: at 10/s, 19 runs
in the first second after an outage instead of 10. ``reserve`` answers when a fire may
happen and books that moment, so a burst of 100,000 slots due at once is spread at the
rate in one pass (each deferred slot gets its own later moment), instead of being
retried every tick; the moments of one tenant only grow, so its fires leave in the order
they were decided. Each tenant keeps the moments of its last window (``rate`` numbers at
most: ~36 bytes each; 1,000 tenants at 1,000/s ~36 MB at their busiest). The
processor's share of the tenant's rate is its share of the partitions (``share``), so N
processors together allow about ``rate``.

Tenant ``default`` (operators' jobs, not written through the admission) is not limited.

``Held`` is the same rule for a process that emits runs without a timing wheel (the
dependency processor): what is over the rate waits in memory, in the order the rate
booked, and the caller commits its input only up to where nothing waits.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

T = TypeVar("T")

UNLIMITED = ("default",)


class TenantRates:
    def __init__(
        self,
        rate_per_s: float,
        *,
        overrides: Mapping[str, float] | Iterable[tuple[str, float]] = (),
        exempt: tuple[str, ...] = UNLIMITED,
    ) -> None:
        self.rate_per_s = rate_per_s  # 0: no limit
        self.overrides = dict(overrides)
        self.exempt = frozenset(exempt)
        self.share = 1.0  # of the partitions, owned by this processor
        # tenant -> the moments booked in its last window (ms), oldest first
        self._booked: dict[str, deque[float]] = {}
        self.deferred: Counter[str] = Counter()  # fires deferred, by tenant (for metrics)

    def limited(self, tenant: str) -> bool:
        return tenant not in self.exempt and self._rate(tenant) > 0

    def _rate(self, tenant: str) -> float:
        return self.overrides.get(tenant, self.rate_per_s) * self.share

    def drain_deferred(self) -> list[tuple[str, int]]:
        """The fires deferred by tenant since the last call (for the metric), forgotten."""
        counts = list(self.deferred.items())
        self.deferred.clear()
        return counts

    def _window(self, tenant: str) -> tuple[int, float]:
        """(fires allowed per window, the window in ms): ``rate`` per second, or one per
        ``1 / rate`` seconds under one."""
        rate = self._rate(tenant)
        fires = max(1, int(rate))
        return fires, 1000.0 * fires / rate

    def _next(self, tenant: str, now_ms: int) -> float:
        """The earliest moment ``tenant``'s next fire may have, from ``now_ms`` on."""
        booked = self._booked.get(tenant)
        if not booked:
            return now_ms
        fires, window = self._window(tenant)
        at = max(float(now_ms), booked[-1])
        if len(booked) >= fires:
            at = max(at, booked[-fires] + window)
        return at

    def ready_at(self, tenant: str, now_ms: int) -> int:
        """When ``tenant``'s next fire may happen (``now_ms``: at once), not booked: the
        trigger processor holds a source partition back until then
        (``streams.triggers.processor``)."""
        at = self._next(tenant, now_ms)
        return now_ms if at <= now_ms else int(at + 0.999)

    def book(self, tenant: str, count: int, now_ms: int) -> int:
        """Book ``count`` fires of ``tenant`` at once: the moment the last of them may
        happen (``now_ms``: all within its burst). A sender that cannot hold them one by
        one (the flows coordinator's event) waits until then and sends them all."""
        at = now_ms
        if self.limited(tenant):
            for _ in range(count):
                at = self.reserve(tenant, now_ms)
        return at

    def take(self, tenant: str, want: int, now_ms: int) -> int:
        """How many of ``want`` fires may happen at ``now_ms``, booked; the others wait
        (ask again at ``ready_at``): a sender that can hold them (a backfill) asks this."""
        if not self.limited(tenant):
            return want
        taken = 0
        while taken < want and self.ready_at(tenant, now_ms) <= now_ms:
            self.reserve(tenant, now_ms)
            taken += 1
        return taken

    def reserve(self, tenant: str, now_ms: int) -> int:
        """When ``tenant``'s next fire may happen (``now_ms``: at once), booked."""
        at = self._next(tenant, now_ms)
        booked = self._booked.get(tenant)
        if booked is None:
            booked = self._booked[tenant] = deque()
        booked.append(at)
        fires, window = self._window(tenant)
        while len(booked) > fires or booked[0] <= at - window:
            booked.popleft()  # no later moment is measured against it
        if at <= now_ms:
            return now_ms
        self.deferred[tenant] += 1
        return int(at + 0.999)


class Held(Generic[T]):
    """Items over their tenant's rate, each held until the moment ``rates`` booked for
    it and then given back (``due``), in the order of those moments: deferred, never
    dropped. Items of tenants not limited are never held."""

    def __init__(self, rates: TenantRates) -> None:
        self.rates = rates
        self._heap: list[tuple[int, int, T]] = []
        self._seq = itertools.count()  # ties keep their order (items are not compared)

    def __len__(self) -> int:
        return len(self._heap)

    def admit(self, tenant: str, item: T, now_ms: int) -> bool:
        """True: ``item`` may go now (booked); False: held until its moment."""
        if not self.rates.limited(tenant):
            return True
        at = self.rates.reserve(tenant, now_ms)
        if at <= now_ms:
            return True
        heapq.heappush(self._heap, (at, next(self._seq), item))
        return False

    def due(self, now_ms: int) -> list[T]:
        """The held items whose moment came, oldest moment first (no longer held)."""
        heap, out = self._heap, []
        while heap and heap[0][0] <= now_ms:
            out.append(heapq.heappop(heap)[2])
        return out
