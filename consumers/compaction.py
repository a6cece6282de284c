"""Compaction of the archive table (``consumers.lakehouse``): a day's files into sorted
files with disjoint job ranges, and a finished month's into its month partition.

The archiver appends a file per flush and day partition: a day is many small files, each
holding every job. A query for one job reads a row group of each, so a year by days is
365 files a tenant at best. ``compact_finished`` (hourly, by the archiver that owns
history partition 0; ``cronstream archive compact``) rewrites each day before yesterday,
and each finished month (its last day before yesterday) into the month's partition, as
sorted files of at most ``CHUNK_ROWS`` rows whose job ranges do not overlap: a job's
rows of a month are then in one file, and a year is 12 months and this month's days.

A partition is **settled** when its files' job ranges (the manifests' bounds of
``job_id``, kept whole) are disjoint and, for a month, all written under the month spec:
a settled partition is not rewritten again. A month is written under the month spec for
the rewrite's commit alone (Iceberg's partition evolution: the table's default spec stays
the day's, so an archiver appending meanwhile writes by day, and the rewrite, finding the
table moved, starts again from the new snapshot). Memory: one chunk of rows at a time
(``CHUNK_ROWS``), whatever the partition's size; the chunks' job boundaries come from
the row groups' statistics of the files (their footers), not from the rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression
from pyiceberg.manifest import DataFile as IcebergFile

from cronstream.consumers.lakehouse import (
    ARROW,
    COMMIT_TRIES,
    ArchiveTable,
    Part,
    day_filter,
    eq,
    filesystem,
    finished_month,
    ge,
    lt,
    path_of,
    set_default_spec,
    sort,
)

CHUNK_ROWS = 2_000_000  # rows a rewrite holds at once (about 350 MB of Arrow), and per file
_JOB = ARROW.names.index("job_id")


@dataclass(frozen=True, slots=True)
class FileBounds:
    """One data file of a partition, as the manifests describe it."""

    path: str
    spec_id: int
    rows: int
    first_job: str
    last_job: str


def compact(table: ArchiveTable, day: date, today: date | None = None) -> int:
    """Compact each tenant's files of ``day``, or of its month when the month is
    finished; returns the files merged."""
    today = today or datetime.now(UTC).date()
    month = finished_month(day, today) and table.specs.months is not None
    start = day.replace(day=1) if month else day
    done = _compact(table, lambda part: (part.start, part.month) == (start, month), today)
    return sum(done.values())


def compact_finished(table: ArchiveTable, today: date) -> dict[Part, int]:
    """Compact each finished month into its month partition, and each day before
    yesterday of the months still going (yesterday's late outcomes, retries and slow runs
    still arrive); returns the files merged per partition."""
    return _compact(table, lambda part: part.end < today - timedelta(days=1), today)


def _compact(table: ArchiveTable, chosen: Callable[[Part], bool], today: date) -> dict[Part, int]:
    found = partition_files(table, today)
    return {
        part: len(files)
        for part, files in sorted(found.items())
        if chosen(part) and not settled(part, files, table.specs.months) and rewrite(table, part)
    }


def partition_files(table: ArchiveTable, today: date) -> dict[Part, list[FileBounds]]:
    """Each partition's data files; a finished month's day files under its month (they
    are folded into it)."""
    found: dict[Part, list[FileBounds]] = {}
    table.table.refresh()
    if table.table.current_snapshot() is None:
        return found
    months = table.specs.months is not None
    columns = ["file_path", "spec_id", "partition", "record_count", "readable_metrics"]
    for row in table.table.inspect.files().select(columns).to_pylist():
        part = Part.of(row["partition"])
        if months and not part.month and finished_month(part.start, today):
            part = Part(part.start.replace(day=1), part.tenant, True)
        job = row["readable_metrics"]["job_id"]
        found.setdefault(part, []).append(
            FileBounds(
                row["file_path"],
                row["spec_id"],
                row["record_count"],
                job["lower_bound"] or "",
                job["upper_bound"] or "",
            )
        )
    return found


def settled(part: Part, files: list[FileBounds], months: int | None) -> bool:
    """Whether ``part``'s files are compacted already: their job ranges disjoint and, a
    month's, all under the month spec."""
    if part.month and any(f.spec_id != months for f in files):
        return False
    ordered = sorted(files, key=lambda f: (f.first_job, f.last_job))
    return all(a.last_job < b.first_job for a, b in itertools.pairwise(ordered))


def rewrite(table: ArchiveTable, part: Part) -> bool:
    """``part``'s rows as sorted files of disjoint job ranges, in one commit: a day's in
    its day partition, a month's in its month partition. False when the table kept
    moving under it (``COMMIT_TRIES``)."""
    where = And(day_filter(part.start, part.end), eq("tenant", part.tenant))
    for _ in range(COMMIT_TRIES):
        table.table.refresh()
        tasks = list(table.table.scan(row_filter=where).plan_files())
        tx = table.table.transaction()
        if part.month:
            tx._apply((set_default_spec(spec_id=table.specs.months),))
        tx.delete(where)  # whole files: a metadata-only delete
        for chunk in job_ranges(table, [t.file for t in tasks]):
            rows = table.table.scan(row_filter=And(where, chunk)).to_arrow()
            if rows.num_rows:
                tx.append(sort(rows.cast(ARROW)))
        if part.month:
            tx._apply((set_default_spec(spec_id=table.specs.days),))
        try:
            tx.commit_transaction()
        except CommitFailedException:  # the archiver appended meanwhile
            continue
        return True
    return False


def job_ranges(table: ArchiveTable, files: list[IcebergFile]) -> Iterator[BooleanExpression]:
    """Filters on ``job_id`` that cut ``files``' rows into chunks of about
    ``CHUNK_ROWS`` (one when they are fewer), each job in one chunk: the boundaries are
    row groups' first jobs, in order, read from the files' footers."""
    if sum(f.record_count for f in files) <= CHUNK_ROWS:
        yield AlwaysTrue()
        return
    fs, _ = filesystem(table.where, table.where.warehouse)
    groups: list[tuple[str, int]] = []
    for file in files:
        footer = pq.read_metadata(fs.open_input_file(path_of(file.file_path)))
        for i in range(footer.num_row_groups):
            group = footer.row_group(i)
            stats = group.column(_JOB).statistics
            if stats is not None and stats.has_min_max:
                groups.append((stats.min, group.num_rows))
    bounds: list[str] = []
    held = 0
    for first, rows in sorted(groups):
        if held + rows > CHUNK_ROWS and held and (not bounds or first > bounds[-1]):
            bounds.append(first)
            held = 0
        held += rows
    edges: list[str | None] = [None, *bounds, None]
    for low, high in itertools.pairwise(edges):
        above = AlwaysTrue() if low is None else ge("job_id", low)
        yield above if high is None else And(above, lt("job_id", high))
