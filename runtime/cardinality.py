"""Label values that come from records, kept bounded: a label per distinct tenant or job id
a record names would grow a metric without end. Plain bookkeeping (no prometheus_client):
``runtime.metrics`` holds the metrics these feed."""

from __future__ import annotations

from typing import Any, Protocol


class LabelledGauge(Protocol):
    """What ``FailureStreaks`` uses of a labelled prometheus_client Gauge."""

    def labels(self, *values: Any) -> Any: ...

    def remove(self, *values: Any) -> None: ...


class TenantLabels:
    """A ``tenant`` label with bounded cardinality: the first ``limit`` tenants seen keep
    their name, any later one is counted as ``_other`` (a run request's tenant comes
    from a record, and a label per distinct string would grow without end)."""

    OTHER = "_other"

    def __init__(self, limit: int = 100) -> None:
        self.limit = limit
        self._known: set[str] = set()

    def __call__(self, tenant: str) -> str:
        if tenant in self._known:
            return tenant
        if len(self._known) < self.limit:
            self._known.add(tenant)
            return tenant
        return self.OTHER


class FailureStreaks:
    """``job_failure_streak``'s bookkeeping: a series per failing job only, so a
    scheduler of 100,000 healthy jobs exports none, and at most ``limit`` named (the
    job id comes from a record); a streak restarts on another worker after failover.
    The label is ``job_id``: Prometheus's own ``job`` label names the scrape job."""

    FAILURES = frozenset({"FAILED", "TIMED_OUT", "DEAD_LETTERED"})
    OTHER = "_other"

    def __init__(self, gauge: LabelledGauge, limit: int = 100, track: int = 100_000) -> None:
        self.gauge, self.limit, self.track = gauge, limit, track
        self._streaks: dict[str, int] = {}
        self._named: set[str] = set()
        self._overflowed = False

    def note(self, job: str, status: str) -> None:
        if status == "SUCCEEDED":
            if self._streaks.pop(job, None) is None:
                return
            if job in self._named:
                self._named.discard(job)
                self.gauge.remove(job)
        elif status in self.FAILURES:
            if job not in self._streaks and len(self._streaks) >= self.track:
                return
            streak = self._streaks[job] = self._streaks.get(job, 0) + 1
            if job in self._named or len(self._named) < self.limit:
                self._named.add(job)
                self.gauge.labels(job).set(streak)
        else:
            return
        unnamed = len(self._streaks) - len(self._named)
        if unnamed or self._overflowed:
            self._overflowed = True
            self.gauge.labels(self.OTHER).set(unnamed)
