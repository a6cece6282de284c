"""Per-tenant fire rates (issue 16): a tenant's fires beyond its rate are deferred, not
dropped.

One ``TenantRates`` per scheduler processor, shared by its partitions. Each tenant has a
GCRA bucket (the "virtual scheduling" form of a token bucket): ``rate`` fires per second
with a burst of one second's worth. ``reserve`` answers when a fire may happen and
books that moment, so a burst of 100,000 slots due at once is spread at the rate in one
pass (each deferred slot gets its own later moment), instead of being retried every
tick. The processor's share of the tenant's rate is its share of the partitions
(``share``), so N processors together allow about ``rate``.

Tenant ``default`` (operators' jobs, not written through the admission) is not limited.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

UNLIMITED = ("default",)


class TenantRates:
    def __init__(
        self,
        rate_per_s: float,
        *,
        overrides: Mapping[str, float] | None = None,
        exempt: tuple[str, ...] = UNLIMITED,
    ) -> None:
        self.rate_per_s = rate_per_s  # 0: no limit
        self.overrides = dict(overrides or {})
        self.exempt = frozenset(exempt)
        self.share = 1.0  # of the partitions, owned by this processor
        self._tat: dict[str, float] = {}  # tenant -> theoretical arrival time (ms)
        self.deferred: Counter[str] = Counter()  # fires deferred, by tenant (for metrics)

    def limited(self, tenant: str) -> bool:
        return tenant not in self.exempt and self._rate(tenant) > 0

    def _rate(self, tenant: str) -> float:
        return self.overrides.get(tenant, self.rate_per_s) * self.share

    def ready_at(self, tenant: str, now_ms: int) -> int:
        """When ``tenant``'s next fire may happen (``now_ms``: at once), not booked: the
        trigger processor holds a source partition back until then (``streams.triggers``)."""
        rate = self._rate(tenant)
        interval = 1000.0 / rate
        allowed = max(self._tat.get(tenant, now_ms), now_ms) - (max(1.0, rate) - 1) * interval
        return now_ms if allowed <= now_ms else int(allowed + 0.999)

    def reserve(self, tenant: str, now_ms: int) -> int:
        """When ``tenant``'s next fire may happen (``now_ms``: at once), booked."""
        rate = self._rate(tenant)
        interval = 1000.0 / rate
        burst = max(1.0, rate)  # one second's worth
        tat = max(self._tat.get(tenant, now_ms), now_ms)
        allowed = tat - (burst - 1) * interval
        self._tat[tenant] = tat + interval
        if allowed <= now_ms:
            return now_ms
        self.deferred[tenant] += 1
        return int(allowed + 0.999)
