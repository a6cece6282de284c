"""History's cold tier as an Apache Iceberg table (``<namespace>.history``).

Where it lives (catalog, warehouse, credentials) is ``runtime.lakehouse``. The table holds
one row per outcome (``ARROW``: RunOutcome's fields), partitioned by the UTC day of the
run's slot and by tenant, each data file sorted by job and slot in row groups of
``ROW_GROUP`` rows: a job's runs over a range are planned from the day and tenant
partitions (Iceberg's manifests), then read from the row groups whose job range holds it
(Parquet statistics). Any engine that reads Iceberg through a SQL/JDBC catalog (Trino,
Spark, Flink, DuckDB with pyiceberg) finds it without cronstream.

**Exactly once per outcome.** The archiver (``consumers.archiver``) writes a history
partition's buffer with ``ArchiveTable.write``: one Iceberg transaction that appends the
buffer's data files and sets the table property ``cronstream.offset.<partition>`` to the
offset after its last record. The table is the truth: on assignment the archiver reads
from that property, not from the group's committed offset. A crash before the commit
leaves data files that no snapshot references (removed by ``remove_orphans``) and the
property where it was, so the same records are written again, once; a crash after it
leaves the property past them, so they are not read again. The commit is a
compare-and-swap of the table's metadata (the catalog's row): a writer that lost its
partition to another (a rebalance it has not seen yet) finds the property moved and writes
nothing (``Fenced``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
from pyarrow.fs import FileSelector, FileSystem, FileType, LocalFileSystem
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    LessThan,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.table.update import SetDefaultSpecUpdate
from pyiceberg.transforms import DayTransform, IdentityTransform, MonthTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestamptzType

from cronstream.runtime.lakehouse import Lakehouse
from cronstream.runtime.options import services as o
from cronstream.schemas.events import RunOutcome

log = logging.getLogger("cronstream.lakehouse")
# pyiceberg's predicates are pydantic models taking (term, literal) positionally, which
# mypy does not see through their generated signatures.
eq: Any = EqualTo
ge: Any = GreaterThanOrEqual
lt: Any = LessThan
is_in: Any = In
set_default_spec: Any = SetDefaultSpecUpdate  # pydantic: its field's alias is spec-id
OFFSET = "cronstream.offset."  # + history partition: the offset after what the table holds
COMMIT_TRIES = 20  # writers of other partitions commit meanwhile: reload and try again

ROW_GROUP = 16_384  # rows: one job's rows of a day read in one or two groups
_US = pa.timestamp("us", tz="UTC")
# One row per outcome: RunOutcome's fields (schemas/avro), in the order of their columns;
# a field the Avro contract adds comes last (``ArchiveTable.open`` adds it to the table).
ARROW = pa.schema(
    [
        ("job_id", pa.string()),
        ("scheduled_at", _US),
        ("run_id", pa.string()),
        ("attempt", pa.int32()),
        ("status", pa.string()),
        ("trigger", pa.string()),
        ("recorded_at", _US),
        ("started_at", _US),
        ("finished_at", _US),
        ("duration_ms", pa.int64()),
        ("error", pa.string()),
        ("next_attempt_at", _US),
        ("target_type", pa.string()),
        ("worker", pa.string()),
        ("tenant", pa.string()),
    ]
)
COLUMNS = tuple(ARROW.names)
_ICEBERG_TYPES = {
    pa.string(): StringType(),
    pa.int32(): IntegerType(),
    pa.int64(): LongType(),
    _US: TimestamptzType(),
}
PROPERTIES = {
    "write.parquet.row-group-limit": str(ROW_GROUP),
    "write.parquet.compression-codec": "zstd",
    # The job's bounds of each file whole (not cut at 16 characters): planning prunes by
    # them, and compaction knows a partition's files by their disjoint job ranges.
    "write.metadata.metrics.column.job_id": "full",
    "format-version": "2",
    # Appends merge the manifests (a year of daily appends: one manifest to plan from, not
    # 365 read one by one: 2 s of a query's planning, measured).
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "8",
    # Each commit writes a metadata file; older ones go beyond these (the catalog points
    # at the newest).
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}
ORPHAN_AGE = timedelta(days=1)  # younger unreferenced files may be a commit in progress


class Part(NamedTuple):
    """A partition of the table: a day's (the archiver writes by day), or a finished
    month's (``compact_finished`` folds a month's days into one file per tenant: a
    year is then about 40 files to read, not 365)."""

    start: date  # the day, or the month's first day
    tenant: str
    month: bool

    @property
    def end(self) -> date:
        """The last day the partition holds."""
        if not self.month:
            return self.start
        following = (self.start.replace(day=28) + timedelta(days=4)).replace(day=1)
        return following - timedelta(days=1)

    @classmethod
    def of(cls, value: dict[str, Any]) -> Part:
        """The partition of a row of the table's partitions or files metadata (its
        ``partition`` struct: the day's field or the month's set, the other null)."""
        if value.get("month") is not None:
            return cls(_month_start(value["month"]), value["tenant"], True)
        return cls(_partition_day(value["day"]), value["tenant"], False)

    def label(self) -> str:
        return self.start.strftime("%Y-%m") if self.month else self.start.isoformat()


class Specs(NamedTuple):
    days: int  # the default: (day, tenant)
    months: int | None  # a finished month's files: (tenant, month); None: a table not by day


def finished_month(day: date, today: date) -> bool:
    """Whether ``day``'s month ended before yesterday (no late outcome expected)."""
    return Part(day.replace(day=1), "", True).end < today - timedelta(days=1)


def _partition_day(value: Any) -> date:
    """A day partition's value (pyarrow reads Iceberg's day transform as a date, or
    days since the epoch)."""
    return value if isinstance(value, date) else date(1970, 1, 1) + timedelta(days=int(value))


def _month_start(value: Any) -> date:
    """A month partition's value (months since January 1970) as the month's first day."""
    months = int(value)
    return date(1970 + months // 12, months % 12 + 1, 1)


class Fenced(Exception):
    """Another writer holds the history partition: its property is not where this
    writer's buffer starts."""


def keep_days() -> int:
    """How many days the archive keeps (``o.ARCHIVE_KEEP``, default 366: a year, whatever
    the day of the year); 0 keeps everything. SettingsError (a ValueError) naming the
    variable for a value that is not whole days."""
    return int(o.ARCHIVE_KEEP.get())


def iceberg_schema() -> Schema:
    """The table's columns, with field ids 1..n in ``ARROW``'s order (new columns of
    the Avro contract come last: ``ArchiveTable.open`` adds them)."""
    return Schema(
        *(
            NestedField(i, f.name, _ICEBERG_TYPES[f.type], required=False)
            for i, f in enumerate(ARROW, start=1)
        )
    )


def _spec(schema: Schema) -> PartitionSpec:
    slot, tenant = schema.find_field("scheduled_at"), schema.find_field("tenant")
    return PartitionSpec(
        PartitionField(
            source_id=slot.field_id, field_id=1000, transform=DayTransform(), name="day"
        ),
        PartitionField(
            source_id=tenant.field_id, field_id=1001, transform=IdentityTransform(), name="tenant"
        ),
    )


def _sort(schema: Schema) -> SortOrder:
    return SortOrder(
        SortField(source_id=schema.find_field("job_id").field_id, transform=IdentityTransform()),
        SortField(
            source_id=schema.find_field("scheduled_at").field_id, transform=IdentityTransform()
        ),
    )


def to_arrow(outcomes: Sequence[RunOutcome]) -> pa.Table:
    """``outcomes`` as the table's columns, sorted as its files are."""
    columns: dict[str, list[Any]] = {name: [getattr(o, name) for o in outcomes] for name in COLUMNS}
    for name in ("status", "trigger"):
        columns[name] = [value.value for value in columns[name]]
    return sort(pa.table(columns, schema=ARROW))


def sort(table: pa.Table) -> pa.Table:
    return table.sort_by(
        [
            ("job_id", "ascending"),
            ("scheduled_at", "ascending"),
            ("run_id", "ascending"),
            ("attempt", "ascending"),
            ("recorded_at", "ascending"),
        ]
    )


def day_filter(first: date, last: date) -> BooleanExpression:
    """The rows whose slot is on ``first``..``last`` (UTC days)."""
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    return And(ge("scheduled_at", start.isoformat()), lt("scheduled_at", end.isoformat()))


class ArchiveTable:
    """The namespace's Iceberg history table: written by the archiver, maintained by
    ``consumers.compaction`` and ``expire``, read by ``consumers.archive``."""

    def __init__(self, where: Lakehouse, *, create: bool = True) -> None:
        """The table; ``create=False`` (a reader): as it is, never made or altered
        (NoSuchTableError, NoSuchNamespaceError: no archiver has made it yet)."""
        self.where = where
        if where.catalog_uri.startswith("sqlite:///"):  # a single machine's: its folder
            Path(where.catalog_uri.removeprefix("sqlite:///")).parent.mkdir(
                parents=True, exist_ok=True
            )
        self.catalog = SqlCatalog("cronstream", **where.catalog_properties())
        try:
            self.table = self.open() if create else self.catalog.load_table(where.table)
        except Exception:
            self.close()
            raise
        self.specs = self._month_spec() if create else Specs(self.table.spec().spec_id, None)

    def open(self) -> Table:
        """The table, made on first use; columns the Avro contract added since it was
        made are added to it (new columns are optional: old files read them as null)."""
        self.catalog.create_namespace_if_not_exists(self.where.namespace)
        try:
            table = self.catalog.load_table(self.where.table)
        except NoSuchTableError:
            schema = iceberg_schema()
            table = self.catalog.create_table_if_not_exists(
                self.where.table,
                schema=schema,
                partition_spec=_spec(schema),
                sort_order=_sort(schema),
                properties=PROPERTIES,
            )
        missing = [f.name for f in ARROW if f.name not in table.schema().column_names]
        if missing:
            with table.update_schema() as update:
                update.union_by_name(ARROW)
            log.info("archive table %s: columns added %s", self.where.table, missing)
            table = self.catalog.load_table(self.where.table)
        return table

    def _month_spec(self) -> Specs:
        """The spec ids of the day partitions (the default) and of the finished months'
        (added beside it on first use, the default kept: one commit)."""
        fields = {
            spec.spec_id: {(f.name, str(f.transform)) for f in spec.fields}
            for spec in self.table.specs().values()
        }
        days = self.table.spec().spec_id
        months = [i for i, f in fields.items() if ("month", "month") in f and len(f) == 2]
        if months or ("day", "day") not in fields[days]:
            return Specs(days, months[0] if months else None)
        tx = self.table.transaction()
        with tx.update_spec() as update:
            update.add_field("scheduled_at", MonthTransform(), "month")
            update.remove_field("day")
        tx._apply((set_default_spec(spec_id=days),))
        with contextlib.suppress(CommitFailedException):  # another process added it first
            tx.commit_transaction()
        self.table = self.catalog.load_table(self.where.table)
        return self._month_spec()

    # -- the archiver's -------------------------------------------------------------------
    def checkpoint(self, partition: int) -> int | None:
        """The offset after the last record of history partition ``partition`` the
        table holds (None: none yet)."""
        self.table.refresh()
        raw = self.table.properties.get(f"{OFFSET}{partition}")
        return None if raw is None else int(raw)

    def write(self, partition: int, first: int | None, next_offset: int, rows: pa.Table) -> None:
        """Append ``rows`` (the records of ``partition`` from ``first`` up to
        ``next_offset``) and move the partition's property to ``next_offset``, in one
        snapshot. Raises ``Fenced`` when the property is not ``first`` (None: not set)
        any more: another writer moved it."""
        key = f"{OFFSET}{partition}"
        for _ in range(COMMIT_TRIES):
            self.table.refresh()
            held = self.table.properties.get(key)
            if (None if held is None else int(held)) != first:
                raise Fenced(
                    f"history partition {partition} is at {held} in the archive "
                    f"table, not {first}: another archiver wrote it"
                )
            tx = self.table.transaction()
            if rows.num_rows:
                tx.append(rows)
            tx.set_properties({key: str(next_offset)})
            try:
                tx.commit_transaction()
                return
            except CommitFailedException:  # another partition's writer committed first
                continue
        raise CommitFailedException(
            f"the archive table moved {COMMIT_TRIES} times "
            f"while partition {partition} was committed"
        )

    # -- maintenance ----------------------------------------------------------------------
    def partitions(self) -> dict[Part, int]:
        """Each partition's data files (a day's, or a finished month's), from the table's
        partitions metadata."""
        found: dict[Part, int] = {}
        self.table.refresh()
        if self.table.current_snapshot() is None:
            return found
        for row in self.table.inspect.partitions().to_pylist():
            found[Part.of(row["partition"])] = row["file_count"]
        return found

    def expire(self, today: date, keep: int, *, now: datetime | None = None) -> list[Part]:
        """Delete the partitions wholly more than ``keep`` days before ``today`` (0: none;
        a metadata-only delete: a month goes when its last day does), then forget the
        snapshots older than a day and delete the files no snapshot references any
        more; returns the partitions deleted."""
        if not keep:
            return []
        cutoff = today - timedelta(days=keep)
        parts = self.partitions()
        for part in parts:  # never a part of a month: its file would be rewritten
            if part.start < cutoff <= part.end:
                cutoff = part.start
        gone = sorted(part for part in parts if part.end < cutoff)
        if gone:
            start = datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=UTC)
            self.table.delete(delete_filter=lt("scheduled_at", start.isoformat()))
        self.forget_snapshots(older_than=(now or datetime.now(UTC)) - timedelta(days=1))
        return gone

    def forget_snapshots(self, *, older_than: datetime) -> int:
        """Expire the snapshots before ``older_than`` but the current one; returns how
        many. Their files are deleted by ``remove_orphans``."""
        self.table.refresh()
        current = self.table.current_snapshot()
        old = [
            s.snapshot_id
            for s in self.table.snapshots()
            if s.timestamp_ms < older_than.timestamp() * 1000
            and (current is None or s.snapshot_id != current.snapshot_id)
        ]
        if old:
            self.table.maintenance.expire_snapshots().by_ids(old).commit()
        return len(old)

    def referenced(self) -> set[str]:
        """Every file a snapshot of the table still needs (data, manifests, lists)."""
        self.table.refresh()
        files: set[str] = set()
        io = self.table.io
        for snapshot in self.table.snapshots():
            files.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(io):
                files.add(manifest.manifest_path)
                files.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(io))
        return files

    def remove_orphans(self, *, now: datetime | None = None) -> int:
        """Delete the data files and manifests under the table's location that no
        snapshot references and that are older than ``ORPHAN_AGE`` (written by a commit
        that failed or a crash before it; or left by expired snapshots); returns how
        many."""
        keep = {path_of(f) for f in self.referenced()}
        fs, root = filesystem(self.where, self.table.location())
        before = (now or datetime.now(UTC)) - ORPHAN_AGE
        doomed = [
            info.path
            for info in fs.get_file_info(FileSelector(root, recursive=True))
            if info.type == FileType.File
            and info.path not in keep
            and (info.path.endswith(".parquet") or info.path.endswith(".avro"))
            and info.mtime is not None
            and info.mtime < before
        ]
        for path in doomed:
            fs.delete_file(path)
        return len(doomed)

    def scan(
        self, where: BooleanExpression | None = None, columns: Iterable[str] = ("*",)
    ) -> pa.Table:
        return self.table.scan(
            row_filter=AlwaysTrue() if where is None else where, selected_fields=tuple(columns)
        ).to_arrow()

    def close(self) -> None:
        self.catalog.engine.dispose()


def path_of(uri: str) -> str:
    """A file URI as pyarrow's filesystems name it (no scheme)."""
    return uri.split("://", 1)[1] if "://" in uri else uri


def filesystem(where: Lakehouse, uri: str) -> tuple[FileSystem, str]:
    """The pyarrow filesystem of ``where``'s warehouse, and ``uri``'s path in it."""
    fs = LocalFileSystem() if where.s3 is None else where.s3.filesystem()
    return fs, path_of(uri)
