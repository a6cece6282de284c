"""History's queries across both tiers (``consumers.tiers.Tiers``) on the archive bench's
year: what a query older than Cassandra's 30 days costs through the CLI, the API and
the dashboard, beside the archive table read alone in the same loop.

Cassandra's keyspace is a fresh one (its days empty: the year is in the table only), so
the tiers' cost over the table's is Cassandra's per-day queries of the days before the
boundary (a backfilled old slot would be there) and the merge."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any

from cronstream.consumers.archive import Archive
from cronstream.consumers.history import History
from cronstream.consumers.tiers import Tiers, hot_from
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.lakehouse import Lakehouse
from cronstream.runtime.settings import Settings
from tests.bench.common import row
from tests.integration.helpers import history_keyspace

DAY = timedelta(days=1)


def _median_ms(ask: Callable[[], Any], samples: int) -> tuple[float, Any]:
    """The median time of ``samples`` calls of ``ask`` (ms), and its last answer."""
    times, answer = [], None
    for _ in range(samples):
        t0 = time.perf_counter()
        answer = ask()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), answer


def bench_tier_queries(ns: Settings, where: Lakehouse, probe: str, name: str, samples: int) -> None:
    """Rows of ``name``'s table: the probe job's year through the tiers and from the
    table alone, the first 100 of it, one hour's outcomes by status 200 days ago, and one
    run's records by a known slot and by a run id naming none."""
    with history_keyspace(ns, "csbench") as scoped:
        cluster, session = cassandra_session(scoped)
        cold = Archive(where)
        tiers = Tiers(History(session, scoped.keyspace), scoped, archive=cold)
        try:
            year = _year_rows(tiers, cold, probe, samples)
            now = datetime.now(UTC)
            first, _ = _median_ms(
                lambda: list(islice(tiers.job_runs(probe, *year.year), 100)), samples
            )
            hour = (now - 200 * DAY).replace(minute=0, second=0, microsecond=0)
            status, found = _median_ms(
                lambda: list(tiers.by_status(["SUCCEEDED"], hour, hour + timedelta(hours=1))),
                samples,
            )
            one = next(cold.job_runs(probe, hour - DAY, hour))
            slotted, records = _median_ms(lambda: cold.run(one.run_id, one.scheduled_at), samples)
            assert len(records) == 2, records
            scanned, records = _median_ms(lambda: cold.run(one.run_id), max(samples // 4, 1))
            assert len(records) == 2, records
        finally:
            tiers.close()
            cluster.shutdown()
    year.print(name, samples)
    for what, ms, note in (
        (
            "its first 100 through the tiers",
            first,
            "`history JOB --since 366d` (--limit 100): the table is read whole before the merge",
        ),
        (
            "outcomes by status, one hour 200 days ago",
            status,
            f"{len(found):,} SUCCEEDED; files planned by their recorded-at bounds (a finished "
            "month's file read whole: its row groups are ordered by job)",
        ),
        (
            "one run's records, its slot known",
            slotted,
            "an id naming its slot, or one whose records Cassandra still has: that day's files",
        ),
        (
            "one run's records, no slot known",
            scanned,
            "a manual/event id Cassandra no longer has: every file's row groups holding the job",
        ),
    ):
        row(f"{name}, {what}", f"{ms:,.0f} ms", "-", note)


@dataclass(frozen=True)
class _Year:
    """A job's year through the tiers, from the table alone and Cassandra's part: the
    median ms of each and the runs each found."""

    year: tuple[datetime, datetime]
    boundary: datetime
    ms: dict[str, float]
    runs: dict[str, int]

    def print(self, name: str, samples: int) -> None:
        days = (self.boundary - self.year[0]).days
        row(
            f"{name}, a job's year through the tiers (CLI, API, dashboard)",
            f"{self.ms['tiers']:,.0f} ms",
            "-",
            f"{self.runs['tiers']:,} runs (the table's before the boundary); the table alone "
            f"over the whole year {self.ms['table']:,.0f} ms as RunOutcomes "
            f"({self.runs['table']:,} runs), Cassandra's {days} days before the boundary "
            f"{self.ms['hot']:,.0f} ms; {samples} samples each, alternating",
        )


def _year_rows(tiers: Tiers, cold: Archive, probe: str, samples: int) -> _Year:
    """The probe's year three ways, alternating, so each sees the same machine."""
    now = datetime.now(UTC)
    year, boundary = (now - 366 * DAY, now), hot_from(tiers.settings, now)
    whole = list(cold.job_runs(probe, *year))  # footers read, metadata loaded
    # Cassandra's days are empty here: the tiers find the table's runs before them
    expected = {
        "table": len(whole),
        "tiers": sum(1 for r in whole if r.scheduled_at < boundary),
        "hot": 0,
    }
    asks: dict[str, Callable[[], list[Any]]] = {
        "table": lambda: list(cold.job_runs(probe, *year)),
        "tiers": lambda: list(tiers.job_runs(probe, *year)),
        "hot": lambda: list(tiers.hot.job_runs(probe, year[0], boundary)),
    }
    times: dict[str, list[float]] = {what: [] for what in asks}
    for _ in range(samples):
        for what, ask in asks.items():
            t0 = time.perf_counter()
            found = ask()
            times[what].append((time.perf_counter() - t0) * 1000)
            assert len(found) == expected[what], (what, len(found), expected)
    ms = {what: statistics.median(took) for what, took in times.items()}
    return _Year(year, boundary, ms, expected)
