"""The archive keeps a year: whole days past the retention are deleted, others kept; their
files go once no snapshot needs them. On a single machine's table (SQLite catalog, local
warehouse: ``runtime.lakehouse.local_environment``), the same code as on S3."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from cronstream.consumers import compaction
from cronstream.consumers.compaction import compact, compact_finished
from cronstream.consumers.lakehouse import ArchiveTable, Part, keep_days, to_arrow
from cronstream.runtime.lakehouse import lakehouse, local_environment
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, RunStatus

TODAY = date(2026, 11, 26)


def _outcome(day: date) -> RunOutcome:
    at = datetime(day.year, day.month, day.day, 3, tzinfo=UTC)
    return RunOutcome(
        run_id=f"j@{day}", job_id="j", status=RunStatus.SUCCEEDED, scheduled_at=at, recorded_at=at
    )


def test_days_past_the_retention_go_whole_and_the_rest_stay(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    assert where.s3 is None
    table = ArchiveTable(where)
    try:
        backs = (0, 1, 365, 366, 367, 800)
        table.write(0, None, 6, to_arrow([_outcome(TODAY - timedelta(days=b)) for b in backs]))
        later = datetime.now(UTC) + timedelta(days=2)  # the writing snapshots are old then
        gone = table.expire(TODAY, 366, now=later)
        assert [p.start for p in gone] == [TODAY - timedelta(days=800), TODAY - timedelta(days=367)]
        kept = sorted(p.start for p in table.partitions())
        assert kept == [TODAY - timedelta(days=b) for b in (366, 365, 1, 0)]
        parquet = sorted(tmp_path.rglob("*.parquet"))
        assert table.remove_orphans(now=later) >= 2  # the two days' files, old manifests
        assert len(sorted(tmp_path.rglob("*.parquet"))) == len(parquet) - 2
        assert table.expire(TODAY, 0) == []  # 0: kept forever
        assert len(table.partitions()) == 4
        assert table.scan().num_rows == 4
        assert table.checkpoint(0) == 6
    finally:
        table.close()


def test_the_retention_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONSTREAM_ARCHIVE_KEEP", raising=False)
    monkeypatch.delenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", raising=False)
    assert keep_days() == 366
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP", "30d")
    assert keep_days() == 30
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP", "0")
    assert keep_days() == 0  # keeps all
    monkeypatch.delenv("CRONSTREAM_ARCHIVE_KEEP")
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", "45")  # the older spelling, a release
    assert keep_days() == 45
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP", "a year")
    with pytest.raises(ValueError, match="CRONSTREAM_ARCHIVE_KEEP="):
        keep_days()
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP", "36h")
    with pytest.raises(ValueError, match="whole days"):
        keep_days()


def _daily(first: date, days: int, tenants: tuple[str, ...] = ("default",)) -> list[RunOutcome]:
    """One run a day per tenant from ``first``, two outcomes each (STARTED, SUCCEEDED)."""
    found = []
    for i in range(days):
        day = first + timedelta(days=i)
        at = datetime(day.year, day.month, day.day, 3, tzinfo=UTC)
        for tenant in tenants:
            for status in (RunStatus.STARTED, RunStatus.SUCCEEDED):
                found.append(
                    RunOutcome(
                        run_id=f"j@{day}",
                        job_id="j",
                        status=status,
                        scheduled_at=at,
                        recorded_at=at,
                        tenant=tenant,
                    )
                )
    return found


def _rows(table: ArchiveTable) -> list[tuple[object, ...]]:
    rows = table.scan().to_pylist()
    return sorted((r["tenant"], r["run_id"], r["status"]) for r in rows)


def test_finished_months_become_one_file_per_tenant_and_days_stay_days(tmp_path: Path) -> None:
    """September and October (finished by November 26) are folded into one file per
    tenant in a month partition; November's days before yesterday one file a day; the
    rows are the same, and new writes still go by day."""
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    try:
        outcomes = _daily(date(2026, 9, 20), 68, ("default", "acme"))  # .. 2026-11-26
        for i in range(0, len(outcomes), 40):  # several files a day and partition
            table.write(0, i or None, i + 40, to_arrow(outcomes[i : i + 40]))
        before = _rows(table)
        done = compact_finished(table, TODAY)
        months = {(p.label(), p.tenant) for p in done if p.month}
        assert months == {(m, t) for m in ("2026-09", "2026-10") for t in ("default", "acme")}
        assert all(
            not p.month and p.start < TODAY - timedelta(days=1) for p in done if p.start.month == 11
        )
        parts = table.partitions()
        assert {p.label() for p in parts if p.month} == {"2026-09", "2026-10"}
        assert all(
            files == 1
            for p, files in parts.items()
            if p.month or p.start < TODAY - timedelta(days=1)
        )
        assert sorted(p.start for p in parts if not p.month and p.tenant == "acme") == [
            date(2026, 11, d) for d in range(1, 27)
        ]
        assert _rows(table) == before
        assert compact_finished(table, TODAY) == {}  # nothing left to merge
        late = _daily(date(2026, 10, 5), 1)  # a late outcome of a finished month: its
        table.write(0, table.checkpoint(0), 10_000, to_arrow(late[1:]))  # day's partition
        assert Part(date(2026, 10, 5), "default", False) in table.partitions()
        assert compact(table, date(2026, 10, 5), TODAY) == 2  # folded into the month
        assert Part(date(2026, 10, 5), "default", False) not in table.partitions()
        assert _rows(table) == sorted([*before, ("default", "j@2026-10-05", "SUCCEEDED")])
    finally:
        table.close()


def test_a_month_goes_when_its_last_day_is_past_the_retention(tmp_path: Path) -> None:
    """Expiry deletes whole partitions: a compacted month spanning the cutoff stays
    whole (never rewritten), the months and days wholly before it go."""
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    try:
        table.write(0, None, 1, to_arrow(_daily(date(2025, 9, 1), 120)))  # .. 2025-12-29
        compact_finished(table, TODAY)
        assert {p.label() for p in table.partitions()} == {
            "2025-09",
            "2025-10",
            "2025-11",
            "2025-12",
        }
        gone = table.expire(TODAY, 366)  # the cutoff, 2025-11-25, is inside November
        assert [p.label() for p in gone] == ["2025-09", "2025-10"]
        assert {p.label() for p in table.partitions()} == {"2025-11", "2025-12"}
        assert table.scan().num_rows == 2 * (30 + 29)
        assert len(table.expire(TODAY + timedelta(days=6), 366)) == 1  # November's end
    finally:
        table.close()


def test_a_table_made_before_months_gains_their_spec_and_keeps_days_the_default(
    tmp_path: Path,
) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    try:
        specs = table.table.specs()
        assert table.table.spec().spec_id == 0
        assert [f.name for f in table.table.spec().fields] == ["day", "tenant"]
        assert len(specs) == 2
        again = ArchiveTable(where)  # a second process: the spec is found, not added
        assert len(again.table.specs()) == 2
        again.close()
    finally:
        table.close()


def test_a_partition_bigger_than_a_chunk_is_rewritten_in_files_of_disjoint_job_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory is one chunk: a month of 40 jobs in chunks of ~100 rows becomes several
    sorted files, each job's rows in one of them; settled, it is not rewritten again."""
    monkeypatch.setattr(compaction, "CHUNK_ROWS", 100)
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    try:
        outcomes = [
            replace(o, job_id=f"job-{j:02d}", run_id=f"job-{j:02d}@{o.scheduled_at}")
            for j in range(40)
            for o in _daily(date(2026, 9, 1), 10)
        ]
        for i in range(0, len(outcomes), 200):
            table.write(0, i or None, i + 200, to_arrow(outcomes[i : i + 200]))
        before = _rows(table)
        assert compact_finished(table, TODAY) == {Part(date(2026, 9, 1), "default", True): 40}
        files = compaction.partition_files(table, TODAY)[Part(date(2026, 9, 1), "default", True)]
        assert len(files) >= 4
        assert compaction.settled(
            Part(date(2026, 9, 1), "default", True), files, table.specs.months
        )
        assert sum(f.rows for f in files) == 800
        assert _rows(table) == before
        assert compact_finished(table, TODAY) == {}
    finally:
        table.close()
