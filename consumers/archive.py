"""History's queries over the cold tier (the Iceberg table of ``consumers.lakehouse``),
and across the hot/cold boundary.

Cassandra keeps the hot window (its rows live ``CRONSTREAM_HISTORY_TTL_DAYS``); the
archive table keeps every outcome, for a year or longer. A query plans its files through
the catalog (Iceberg's manifests prune by day, month and tenant partitions, and by the
files' job ranges), reads the row groups whose job range holds the job (Parquet statistics),
then keeps each attempt's latest outcome with one sort in Arrow (``latest``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And

from consumers.core.buckets import STATUS_RANK, day_of
from consumers.history import History
from consumers.lakehouse import ARROW, COLUMNS, ArchiveTable, eq, filesystem, ge, lt, path_of
from runtime.lakehouse import Lakehouse
from runtime.settings import Settings
from schemas.events import RunOutcome, RunStatus, Trigger, from_ms

REFRESH_S = 5.0  # how stale the table's snapshot a query plans from may be
# A year is about 40 files (12 months and this month's days) read at once: pyarrow's own
# I/O threads (8 by default) wait on the store for each one's column chunks.
IO_THREADS = 32
FOOTERS = 4096  # files whose footers a reader keeps (a year's day files: 365 a tenant)
READERS = 8  # files read at once by one query (each read waits on the store, then decodes)
_JOB_AT = ARROW.names.index("job_id")
BATCH = 10_000
_STATUS = {s.value: s for s in RunStatus}
_TRIGGER = {t.value: t for t in Trigger}


class Archive:
    """The history queries over the archive table (``cronstream history --archive``,
    the API and the dashboard). Thread-safe: the dashboard's threads share one."""

    def __init__(self, where: Lakehouse) -> None:
        self.table = ArchiveTable(where)
        if pa.io_thread_count() < IO_THREADS:
            pa.set_io_thread_count(IO_THREADS)
        self._fs, _ = filesystem(where, where.warehouse)
        self._footers: dict[str, pq.FileMetaData] = {}  # path -> its footer, oldest first
        self._pool = ThreadPoolExecutor(READERS, thread_name_prefix="archive")
        self._lock = threading.Lock()
        self._refreshed = time.monotonic()

    def close(self) -> None:
        self._pool.shutdown()
        self.table.close()

    def _rows(self, job_id: str, start: datetime, end: datetime,
              tenant: str | None) -> pa.Table:  # fmt: skip
        """The rows of ``job_id``'s runs scheduled in [start, end) (of ``tenant``'s).

        pyiceberg plans the files (day and tenant partitions, then the files' job
        bounds, from the manifests); each file's row groups whose job range holds the
        job (Parquet statistics) are read in parallel, directly (a footer read once per
        reader: ``_footer``; Iceberg never rewrites a file under its name), and their
        rows filtered. Measured on a year of 100,000,000 outcomes (365 day files): 0.65 s
        against 1.1 s through pyarrow's dataset scanner and 5-11 s through pyiceberg's
        own reader. That holds while no delete file applies (the table is written
        copy-on-write); otherwise pyiceberg reads."""
        with self._lock:  # the archiver's new snapshots, every REFRESH_S at most
            if time.monotonic() - self._refreshed > REFRESH_S:
                self.table.table.refresh()
                self._refreshed = time.monotonic()
        where = And(eq("job_id", job_id), And(ge("scheduled_at", start.isoformat()),
                                              lt("scheduled_at", end.isoformat())))  # fmt: skip
        if tenant is not None:
            where = And(eq("tenant", tenant), where)
        scan = self.table.table.scan(row_filter=where)
        tasks = list(scan.plan_files())
        wanted = _Wanted(job_id, start, end, tenant)
        if any(task.delete_files for task in tasks):
            return wanted.of(scan.to_arrow())
        files = [path_of(task.file.file_path) for task in tasks]
        parts = list(self._pool.map(lambda path: self._part(path, wanted), files))
        found = [part for part in parts if part is not None]
        return pa.concat_tables(found) if found else ARROW.empty_table()

    def _part(self, path: str, wanted: _Wanted) -> pa.Table | None:
        """The rows ``wanted`` of one file, from its row groups that may hold them."""
        footer = self._footer(path)
        groups = [
            i
            for i in range(footer.num_row_groups)
            if _may_hold(footer.row_group(i).column(_JOB_AT).statistics, wanted.job)
        ]
        if not groups:
            return None
        source = self._fs.open_input_file(path)
        rows = pq.ParquetFile(source, metadata=footer, pre_buffer=True).read_row_groups(groups)
        return wanted.of(rows)

    def _footer(self, path: str) -> pq.FileMetaData:
        """A file's footer, read from the store once per reader."""
        with self._lock:
            found = self._footers.pop(path, None)
            if found is not None:
                self._footers[path] = found  # the most recent last
                return found
        footer = pq.read_metadata(self._fs.open_input_file(path))
        with self._lock:
            self._footers[path] = footer
            while len(self._footers) > FOOTERS:
                self._footers.pop(next(iter(self._footers)))
        return footer

    def job_runs_table(self, job_id: str, start: datetime, end: datetime,
                       tenant: str | None = None) -> pa.Table:  # fmt: skip
        """``job_runs`` as one Arrow table (instants as epoch milliseconds), for callers
        that take columns (charts, exports): no Python object per run."""
        return latest(self._rows(job_id, start, end, tenant))

    def job_runs(
        self, job_id: str, start: datetime, end: datetime, statuses: Sequence[str] = (),
        tenant: str | None = None,
    ) -> Iterator[RunOutcome]:  # fmt: skip
        """As ``History.job_runs``: a job's attempts scheduled in [start, end), latest
        first, each with its latest status (a DUPLICATE is not a status of the attempt)."""
        found = latest(self._rows(job_id, start, end, tenant))
        if statuses:
            wanted = pa.array(sorted({s.upper() for s in statuses}))
            found = found.filter(pc.is_in(found["status"], value_set=wanted))
        for at in range(0, found.num_rows, BATCH):
            columns = [c.to_pylist() for c in found.slice(at, BATCH).columns]
            for row in zip(*columns, strict=True):
                yield _outcome(row)


def latest(found: pa.Table) -> pa.Table:
    """Each attempt's latest row of ``found`` (by ``recorded_at``, then the status's
    rank: ``STATUS_RANK``; a DUPLICATE is none), newest slot first (then run id, then
    the later attempt), instants as epoch milliseconds. One sort in Arrow: an attempt's
    rows are then adjacent, its latest first (measured on a job's year, 210,240 rows:
    80 ms, DuckDB's window over the same rows 120-140 ms)."""
    rows = found.filter(pc.not_equal(found["status"], "DUPLICATE"))
    rank = pc.fill_null(pc.take(_RANKS, pc.index_in(rows["status"], value_set=_RANKED)), 0)
    order = pc.sort_indices(rows.append_column("_rank", rank), sort_keys=_ORDER)
    rows = rows.take(order).combine_chunks()
    if rows.num_rows > 1:
        run, attempt = rows["run_id"].chunk(0), rows["attempt"].chunk(0)
        later = pc.and_(pc.equal(run[1:], run[:-1]), pc.equal(attempt[1:], attempt[:-1]))
        rows = rows.filter(pa.concat_arrays([pa.array([True]), pc.invert(later)]))
    return pa.table([_ms(rows[name]) if name in _AT else rows[name] for name in COLUMNS],
                    names=list(COLUMNS))  # fmt: skip


def _ms(instants: pa.ChunkedArray) -> pa.ChunkedArray:
    """Instants (microseconds) as epoch milliseconds: outcomes carry milliseconds."""
    return pc.cast(pc.cast(instants, pa.timestamp("ms", tz="UTC"), safe=False), pa.int64())


@dataclass(frozen=True, slots=True)
class _Wanted:
    """What a job query keeps of the rows it reads."""

    job: str
    start: datetime
    end: datetime
    tenant: str | None

    def of(self, rows: pa.Table) -> pa.Table:
        """The wanted rows of ``rows``, in the table's columns (a column a file was
        written without, added to the table since, is null)."""
        slot = rows["scheduled_at"]
        mask = pc.and_(pc.equal(rows["job_id"], self.job), pc.and_(
            pc.greater_equal(slot, pa.scalar(self.start, slot.type)),
            pc.less(slot, pa.scalar(self.end, slot.type))))  # fmt: skip
        if self.tenant is not None:
            mask = pc.and_(mask, pc.equal(rows["tenant"], self.tenant))
        rows = rows.filter(mask)
        for name in ARROW.names:
            if name not in rows.column_names:
                rows = rows.append_column(name, pa.nulls(rows.num_rows, ARROW.field(name).type))
        return rows.select(ARROW.names).cast(ARROW)


def _may_hold(stats: pq.Statistics | None, job: str) -> bool:
    """Whether a row group whose job column has ``stats`` may hold ``job``'s rows."""
    if stats is None or not stats.has_min_max:
        return True
    return bool(stats.min <= job <= stats.max)


_RANKED = pa.array(list(STATUS_RANK))
_RANKS = pa.array(list(STATUS_RANK.values()), pa.int32())
_ORDER = [("scheduled_at", "descending"), ("run_id", "ascending"), ("attempt", "descending"),
          ("recorded_at", "descending"), ("_rank", "descending")]  # fmt: skip
_AT = {c for c in COLUMNS if c.endswith("_at")}
_STATUS_AT = COLUMNS.index("status")
_TRIGGER_AT = COLUMNS.index("trigger")
_INSTANTS = tuple(i for i, c in enumerate(COLUMNS) if c.endswith("_at"))


def _outcome(row: Sequence[Any]) -> RunOutcome:
    values = list(row)
    for i in _INSTANTS:
        if values[i] is not None:
            values[i] = from_ms(values[i])
    values[_STATUS_AT] = _STATUS[values[_STATUS_AT]]
    values[_TRIGGER_AT] = _TRIGGER[values[_TRIGGER_AT]]
    return RunOutcome(**dict(zip(COLUMNS, values, strict=True)))


def hot_from(settings: Settings, now: datetime) -> datetime:
    """The start of the first UTC day whose runs Cassandra still holds in full: earlier
    slots are read from the archive."""
    first = day_of(now - timedelta(days=settings.history_ttl_days)) + timedelta(days=1)
    return datetime(first.year, first.month, first.day, tzinfo=UTC)


def tiered_job_runs(hot: History, archive: Archive, boundary: datetime,
                    job_id: str, start: datetime, end: datetime,
                    statuses: Sequence[str] = (), tenant: str | None = None,
                    ) -> Iterator[RunOutcome]:  # fmt: skip
    """A job's runs over [start, end) across the tiers, latest first: slots from
    ``boundary`` on from Cassandra (``hot``: a ``History``), earlier ones from the
    archive; the ranges do not overlap, so each run comes once."""
    if end > boundary:
        yield from hot.job_runs(job_id, max(start, boundary), end, statuses)
    if start < boundary:
        yield from archive.job_runs(job_id, start, min(end, boundary), statuses, tenant)
