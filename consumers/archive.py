"""The cold tier of history: outcomes as Parquet files, read with DuckDB.

Cassandra keeps the hot window (its rows live ``CRONSTREAM_HISTORY_TTL_DAYS``); the
archive keeps every outcome, for a year or longer, at a fraction of the cost. Layout,
under ``archive_root`` (``$CRONSTREAM_ARCHIVE_DIR`` or ``<home>/archive``, then the
topic prefix)::

    day=2026-11-25/tenant=default/p003-00000000000000123456.parquet   a part
    day=2026-11-25/tenant=default/day.parquet                         a compacted day
    _checkpoints/p003                                                 next offset

``day`` is the UTC day of the run's slot (``scheduled_at``, the day ``runs_by_job``
buckets it by), so one job's runs over a range read only those days' folders. A file
holds one outcome per row (every record, as ``runs_by_id``; the tenant is the folder's),
sorted by job, slot, run and attempt in row groups of ``ROW_GROUP`` rows: a query for one
job reads the row groups whose job range holds it (Parquet's min/max statistics).

The archiver (``consumers.archiver``) writes parts; ``compact`` merges a finished day's
parts into ``day.parquet``. Writes are atomic (a temporary file renamed), and a part is
named after the first offset it holds, so writing the same records again replaces the
same file. Queries read each outcome once even where a crash left a part next to the
compacted file that already holds it (``DISTINCT``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from consumers.core.buckets import STATUS_RANK, day_of
from consumers.history import History
from runtime.settings import Settings
from schemas.events import RunOutcome, RunStatus, Trigger, from_ms

ROW_GROUP = 16_384  # rows: one job's rows of a day read in one or two groups
COMPACTED = "day.parquet"
_MS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema([
    ("job_id", pa.string()), ("scheduled_at", _MS), ("run_id", pa.string()),
    ("attempt", pa.int32()), ("status", pa.string()), ("trigger", pa.string()),
    ("recorded_at", _MS), ("started_at", _MS), ("finished_at", _MS),
    ("duration_ms", pa.int64()), ("error", pa.string()), ("next_attempt_at", _MS),
    ("target_type", pa.string()), ("worker", pa.string()),
])  # fmt: skip
COLUMNS = tuple(SCHEMA.names)
_SORT = [("job_id", "ascending"), ("scheduled_at", "ascending"), ("run_id", "ascending"),
         ("attempt", "ascending"), ("recorded_at", "ascending")]  # fmt: skip
_PART = re.compile(r"^p(\d{3})-(\d{20})\.parquet$")


def archive_root(settings: Settings) -> Path:
    base = os.environ.get("CRONSTREAM_ARCHIVE_DIR") or settings.home / "archive"
    return Path(base) / settings.topic_prefix


def folder(root: Path, day: date, tenant: str) -> Path:
    return root / f"day={day.isoformat()}" / f"tenant={tenant}"


def part_name(partition: int, first_offset: int) -> str:
    return f"p{partition:03d}-{first_offset:020d}.parquet"


def _table(outcomes: Sequence[RunOutcome]) -> pa.Table:
    """The archive's columns of ``outcomes`` (the tenant is the folder's)."""
    columns = {name: [getattr(o, name) for o in outcomes] for name in COLUMNS}
    for name in _ENUMS:
        columns[name] = [value.value for value in columns[name]]
    return pa.table(columns, schema=SCHEMA)


_ENUMS = ("status", "trigger")


def write_table(table: pa.Table, path: Path) -> None:
    """``table`` sorted into ``path``, atomically (a reader sees the old file or the new
    one, a crash leaves a ``.tmp`` that nothing reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table.sort_by(_SORT), tmp, row_group_size=ROW_GROUP, compression="zstd")
    os.replace(tmp, path)


def write_parts(root: Path, partition: int, first_offset: int,
                outcomes: Sequence[RunOutcome]) -> list[Path]:  # fmt: skip
    """One part per (day, tenant) of ``outcomes``, all named after ``first_offset``."""
    groups: dict[tuple[date, str], list[RunOutcome]] = {}
    for o in outcomes:
        groups.setdefault((day_of(o.scheduled_at), o.tenant), []).append(o)
    written = []
    for (day, tenant), rows in sorted(groups.items()):
        path = folder(root, day, tenant) / part_name(partition, first_offset)
        write_table(_table(rows), path)
        written.append(path)
    return written


# -- checkpoints: the next offset of each partition, written after its parts ----------------
def checkpoint(root: Path, partition: int) -> int | None:
    try:
        return int((root / "_checkpoints" / f"p{partition:03d}").read_text())
    except FileNotFoundError:
        return None


def save_checkpoint(root: Path, partition: int, next_offset: int) -> None:
    path = root / "_checkpoints" / f"p{partition:03d}"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(next_offset))
    os.replace(tmp, path)


# -- compaction ---------------------------------------------------------------------------
def days(root: Path) -> list[date]:
    found = []
    for path in root.glob("day=*"):
        try:
            found.append(date.fromisoformat(path.name.removeprefix("day=")))
        except ValueError:
            continue
    return sorted(found)


def compact(root: Path, day: date) -> int:
    """Merge ``day``'s parts (and its compacted file) into one ``day.parquet`` per
    tenant, each outcome once; returns the parts merged. The new file is in place
    before the parts go: a crash between leaves duplicates that readers skip, and the
    next compaction removes. Parts the archiver writes meanwhile stay for the next."""
    merged = 0
    for tenant_dir in sorted((root / f"day={day.isoformat()}").glob("tenant=*")):
        parts = sorted(p for p in tenant_dir.iterdir() if _PART.match(p.name))
        if not parts:
            continue
        inputs = [*parts, *([tenant_dir / COMPACTED] if (tenant_dir / COMPACTED).exists()
                            else [])]  # fmt: skip
        found = duckdb.sql(
            f"SELECT DISTINCT {', '.join(COLUMNS)} FROM read_parquet($files)",
            params={"files": [str(p) for p in inputs]},
        )
        assert found is not None  # a SELECT has rows
        table = found.to_arrow_table()
        write_table(table.cast(SCHEMA), tenant_dir / COMPACTED)
        for part in parts:
            part.unlink()
        merged += len(parts)
    return merged


def compact_finished(root: Path, today: date) -> dict[date, int]:
    """Compact every day before yesterday that has parts (yesterday's late outcomes,
    retries and slow runs, still arrive)."""
    done = {}
    for day in days(root):
        if day < today - timedelta(days=1):
            merged = compact(root, day)
            if merged:
                done[day] = merged
    return done


def keep_days() -> int:
    """How many days the archive keeps (``$CRONSTREAM_ARCHIVE_KEEP_DAYS``, default 366:
    a year, whatever the day of the year); 0 keeps everything."""
    raw = os.environ.get("CRONSTREAM_ARCHIVE_KEEP_DAYS") or "366"
    if not raw.isdigit():
        raise ValueError(f"CRONSTREAM_ARCHIVE_KEEP_DAYS={raw!r} is not a whole number of days")
    return int(raw)


def expire(root: Path, today: date, keep: int) -> list[date]:
    """Delete the days more than ``keep`` days before ``today`` (0: none); returns them.
    A day goes whole (its folder renamed away first, so a reader sees it or not)."""
    gone = []
    for day in days(root):
        if keep and day < today - timedelta(days=keep):
            doomed = root / f".expired-day={day.isoformat()}"
            (root / f"day={day.isoformat()}").rename(doomed)
            shutil.rmtree(doomed)
            gone.append(day)
    return gone


# -- queries ------------------------------------------------------------------------------
_STATUS = {s.value: s for s in RunStatus}
_TRIGGER = {t.value: t for t in Trigger}
_RANK = " ".join(f"WHEN '{status}' THEN {rank}" for status, rank in STATUS_RANK.items())


class Archive:
    """The history queries over the archive (``cronstream history --archive``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = duckdb.connect()
        # Footers parsed once per connection: reading 365 files' footers again was most
        # of a repeated year's query (measured: 107 -> 48 ms for 30 days of 274,000 rows)
        self.db.execute("SET GLOBAL parquet_metadata_cache = true")

    def close(self) -> None:
        self.db.close()

    def _files(self, first: date, last: date) -> list[str]:
        """The files of days ``first``..``last``, every tenant's (a day with none is
        skipped)."""
        return [str(path) for day in days(self.root) if first <= day <= last
                for path in sorted((self.root / f"day={day.isoformat()}")
                                   .glob("tenant=*/*.parquet"))]  # fmt: skip

    def job_runs_table(self, job_id: str, start: datetime, end: datetime) -> pa.Table:
        """``job_runs`` as one Arrow table (instants as epoch milliseconds), for callers
        that take columns (charts, exports): no Python object per run."""
        files = self._files(day_of(start), day_of(end - timedelta(microseconds=1)))
        if not files:
            return pa.table({name: [] for name in _SELECTED_NAMES})
        params = {"files": files, "job": job_id, "start": start, "end": end}
        return self.db.cursor().sql(_JOB_RUNS, params=params).to_arrow_table()

    def job_runs(
        self, job_id: str, start: datetime, end: datetime, statuses: Sequence[str] = ()
    ) -> Iterator[RunOutcome]:
        """As ``History.job_runs``: a job's attempts scheduled in [start, end), latest
        first, each with its latest status (a DUPLICATE is not a status of the attempt);
        read ``BATCH`` rows at a time."""
        files = self._files(day_of(start), day_of(end - timedelta(microseconds=1)))
        if not files:
            return
        wanted = {s.upper() for s in statuses}
        # A cursor per query: one Archive serves the dashboard's threads.
        cursor = self.db.cursor().execute(_JOB_RUNS, {"files": files, "job": job_id,
                                                      "start": start, "end": end})  # fmt: skip
        while batch := cursor.fetchmany(BATCH):
            for row in batch:
                if not wanted or row[_STATUS_AT] in wanted:
                    yield _outcome(row)


BATCH = 10_000
# Instants come out as epoch milliseconds: DuckDB's own datetimes carry pytz zones, whose
# conversion was two thirds of a year's query (5 s of 7 for 105,000 runs).
_SELECTED = [f"epoch_ms({c})" if c.endswith("_at") else c for c in (*COLUMNS, "tenant")]
_SELECTED_NAMES = (*COLUMNS, "tenant")
_STATUS_AT = COLUMNS.index("status")
_TRIGGER_AT = COLUMNS.index("trigger")
_JOB_RUNS = f"""
    WITH rows AS (SELECT DISTINCT {", ".join(COLUMNS)}, tenant
                  FROM read_parquet($files, hive_partitioning = true,
                                    hive_types = {{'day': DATE, 'tenant': VARCHAR}})
                  WHERE job_id = $job AND scheduled_at >= $start
                    AND scheduled_at < $end AND status <> 'DUPLICATE')
    SELECT {", ".join(_SELECTED)} FROM rows
    QUALIFY row_number() OVER (PARTITION BY run_id, attempt
        ORDER BY recorded_at DESC, CASE status {_RANK} ELSE 0 END DESC) = 1
    ORDER BY scheduled_at DESC, run_id ASC, attempt DESC"""
_INSTANTS = tuple(i for i, c in enumerate(COLUMNS) if c.endswith("_at"))


def _outcome(row: Sequence[Any]) -> RunOutcome:
    values = list(row)
    for i in _INSTANTS:
        if values[i] is not None:
            values[i] = from_ms(values[i])
    values[_STATUS_AT] = _STATUS[values[_STATUS_AT]]
    values[_TRIGGER_AT] = _TRIGGER[values[_TRIGGER_AT]]
    return RunOutcome(**dict(zip((*COLUMNS, "tenant"), values, strict=True)))


def hot_from(settings: Settings, now: datetime) -> datetime:
    """The start of the first UTC day whose runs Cassandra still holds in full: earlier
    slots are read from the archive."""
    first = day_of(now - timedelta(days=settings.history_ttl_days)) + timedelta(days=1)
    return datetime(first.year, first.month, first.day, tzinfo=UTC)


def tiered_job_runs(hot: History, archive: Archive, boundary: datetime,
                    job_id: str, start: datetime, end: datetime,
                    statuses: Sequence[str] = ()) -> Iterator[RunOutcome]:  # fmt: skip
    """A job's runs over [start, end) across the tiers, latest first: slots from
    ``boundary`` on from Cassandra (``hot``: a ``History``), earlier ones from the
    archive; the ranges do not overlap, so each run comes once."""
    if end > boundary:
        yield from hot.job_runs(job_id, max(start, boundary), end, statuses)
    if start < boundary:
        yield from archive.job_runs(job_id, start, min(end, boundary), statuses)
