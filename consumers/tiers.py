"""History's queries across its two tiers: Cassandra (the hot days) and the archive table.

Cassandra's rows live ``o.HISTORY_TTL`` (30 days by default) from the moment
the sink writes them; the archive (``consumers.archive``) keeps every outcome for a year
or longer. ``Tiers`` answers ``History``'s queries over any window, reading the archive
only for what Cassandra may no longer hold:

- **a job's runs** (by slot): Cassandra alone when the window starts on or after
  ``hot_from`` (the first UTC day whose records it holds in full). Otherwise the days
  before it are read from both and merged: a run of an old slot recorded lately (a
  backfill, a late catch-up) is in Cassandra and not yet, or not only, in the archive.
  An attempt in both is shown once, as the tier that recorded it last has it.
- **outcomes by status** (by the time they were recorded): Cassandra from ``hot_from``
  on, the archive before it; every outcome is in exactly one of the two ranges.
- **a run's records**: Cassandra's alone when the run's slot (named by its id, or by
  its records) is inside the hot window; otherwise the archive's too, each record once.

The archive is opened by the first query that needs it: a deployment whose queries stay
inside the hot window never connects to the catalog.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import groupby, islice
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from cronstream.consumers.archive import Archive
from cronstream.consumers.core.buckets import day_of, write_timestamp
from cronstream.consumers.errors import ArchiveUnavailable
from cronstream.consumers.history import History, flow_rows
from cronstream.runtime.lakehouse import lakehouse
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, to_ms, utc_now
from cronstream.schemas.ids import slot_of

# A run's first record is not recorded before its slot but by a clock this much behind
# the scheduler's: a run whose slot is this far inside the hot window has all its records
# there.
CLOCK_SKEW = timedelta(minutes=5)
T = TypeVar("T")


def hot_from(settings: Settings, now: datetime) -> datetime:
    """The start of the first UTC day whose records Cassandra still holds in full:
    earlier ones are read from the archive."""
    first = day_of(now - timedelta(days=settings.history_ttl_days)) + timedelta(days=1)
    return datetime(first.year, first.month, first.day, tzinfo=UTC)


class Tiers:
    """``History``'s queries (``job_runs``, ``by_status``, ``run``, ``flow_run``)
    across Cassandra (``hot``) and the archive. Thread-safe as ``History`` and
    ``Archive`` are: the dashboard's threads share one."""

    def __init__(
        self,
        hot: History,
        settings: Settings,
        *,
        archive: Archive | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.hot = hot
        self.settings = settings
        self.clock = clock
        self._archive = archive
        self._lock = threading.Lock()

    def cold(self, ask: Callable[[Archive], T]) -> T:
        """``ask``'s answer from the archive table (opened at the first call); its
        catalog or store not answering: ArchiveUnavailable."""
        try:
            with self._lock:
                if self._archive is None:
                    self._archive = Archive(lakehouse(self.settings))
                archive = self._archive
            return ask(archive)
        except (OSError, SQLAlchemyError) as exc:  # pyarrow's S3 errors, the catalog's
            raise ArchiveUnavailable(f"the archive table did not answer: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._archive is not None:
                self._archive.close()
                self._archive = None

    def job_runs(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        statuses: Sequence[str] = (),
        *,
        limit: int | None = None,
        tenant: str | None = None,
    ) -> Iterator[RunOutcome]:
        """As ``History.job_runs``, over both tiers; ``tenant``: the archive's rows of
        that tenant alone (Cassandra's job ids are the tenant's already)."""
        boundary = hot_from(self.settings, self.clock())
        if start >= boundary:
            return self.hot.job_runs(job_id, start, end, statuses, limit=limit)
        older = min(end, boundary)

        def archived() -> Iterator[RunOutcome]:
            return self.cold(lambda archive: archive.job_runs(job_id, start, older, (), tenant))

        return islice(across(self.hot, archived, boundary, job_id, start, end, statuses), limit)

    def by_status(
        self, statuses: Sequence[str], start: datetime, end: datetime, tenant: str | None = None
    ) -> Iterator[RunOutcome]:
        """As ``History.by_status``, over both tiers: records from ``hot_from`` on from
        Cassandra, earlier ones from the archive."""
        boundary = hot_from(self.settings, self.clock())
        if start >= boundary:
            return self.hot.by_status(statuses, start, end, tenant)
        return self._by_status(boundary, statuses, start, end, tenant)

    def _by_status(
        self,
        boundary: datetime,
        statuses: Sequence[str],
        start: datetime,
        end: datetime,
        tenant: str | None,
    ) -> Iterator[RunOutcome]:
        if end > boundary:
            yield from self.hot.by_status(statuses, boundary, end, tenant)
        older = min(end, boundary)
        yield from self.cold(lambda archive: archive.by_status(statuses, start, older, tenant))

    def run(self, run_id: str) -> list[RunOutcome]:
        """As ``History.run``, over both tiers."""
        rows = self.hot.run(run_id)
        try:
            _, slot = slot_of(run_id)
        except ValueError:  # not a run id: Cassandra said what there is (nothing)
            return rows
        if slot is None and rows:
            slot = min(row.scheduled_at for row in rows)
        expired_before = self.clock() - timedelta(days=self.settings.history_ttl_days)
        if slot is not None and slot - CLOCK_SKEW >= expired_before:
            return rows
        cold = self.cold(lambda archive: archive.run(run_id, slot))
        seen = {_record(row) for row in rows}
        rows += [row for row in cold if _record(row) not in seen]
        rows.sort(key=_record)
        return rows

    def flow_run(self, flow_run_id: str) -> list[RunOutcome]:
        """As ``History.flow_run``, over both tiers."""
        return flow_rows(self.run, self.job_runs, flow_run_id)


def across(
    hot: History,
    cold: Callable[[], Iterator[RunOutcome]],
    boundary: datetime,
    job_id: str,
    start: datetime,
    end: datetime,
    statuses: Sequence[str] = (),
) -> Iterator[RunOutcome]:
    """A job's runs over [start, end), ``start`` before ``boundary``, across the tiers,
    latest first: slots from ``boundary`` on from Cassandra (``hot``), earlier ones from
    both, merged (an attempt in both once, as it was recorded last: ``latest_of``);
    ``cold``: the archive's attempts scheduled in [start, boundary), asked for when the
    iteration reaches them."""
    if end > boundary:
        yield from hot.job_runs(job_id, boundary, end, statuses)
    older = min(end, boundary)
    merged = heapq.merge(hot.job_runs(job_id, start, older), cold(), key=_slot_order)
    wanted = {s.upper() for s in statuses}
    for _, same in groupby(merged, key=_attempt):
        row = latest_of(list(same))
        if not wanted or row.status.value in wanted:
            yield row


def latest_of(rows: list[RunOutcome]) -> RunOutcome:
    """One attempt's row as the tier that recorded it last has it: the later write, as
    Cassandra orders them (``write_timestamp``: recorded time, then the status's rank);
    a tie: the archive's, whose cells have not expired."""
    return max(reversed(rows), key=_written)


def _written(row: RunOutcome) -> int:
    at = row.recorded_at
    return write_timestamp(to_ms(at) if at is not None else 0, row.status.value)


def _slot_order(row: RunOutcome) -> tuple[int, str, int]:
    """``runs_by_job``'s order (and the archive's): newest slot, run id, later attempt."""
    return (-to_ms(row.scheduled_at), row.run_id, -row.attempt)


def _attempt(row: RunOutcome) -> tuple[str, int]:
    return (row.run_id, row.attempt)


def _record(row: RunOutcome) -> tuple[int, int, str]:
    """A record's identity in ``runs_by_id``."""
    at = row.recorded_at
    return (row.attempt, to_ms(at) if at is not None else 0, row.status.value)
