"""The archive keeps a year: whole days past the retention are deleted, others kept; their
files go once no snapshot needs them. On a single machine's table (SQLite catalog, local
warehouse: ``runtime.lakehouse.local_environment``), the same code as on S3."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from consumers.lakehouse import ArchiveTable, keep_days, to_arrow
from runtime.lakehouse import lakehouse, local_environment
from runtime.settings import Settings
from schemas.events import RunOutcome, RunStatus

TODAY = date(2026, 11, 26)


def _outcome(day: date) -> RunOutcome:
    at = datetime(day.year, day.month, day.day, 3, tzinfo=UTC)
    return RunOutcome(run_id=f"j@{day}", job_id="j", status=RunStatus.SUCCEEDED,
                      scheduled_at=at, recorded_at=at)  # fmt: skip


def test_days_past_the_retention_go_whole_and_the_rest_stay(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    assert where.s3 is None
    table = ArchiveTable(where)
    try:
        backs = (0, 1, 365, 366, 367, 800)
        table.write(0, None, 6, to_arrow([_outcome(TODAY - timedelta(days=b)) for b in backs]))
        later = datetime.now(UTC) + timedelta(days=2)  # the writing snapshots are old then
        gone = table.expire(TODAY, 366, now=later)
        assert gone == [TODAY - timedelta(days=800), TODAY - timedelta(days=367)]
        kept = sorted(day for day, _ in table.partitions())
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
    monkeypatch.delenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", raising=False)
    assert keep_days() == 366
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", "30")
    assert keep_days() == 30
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", "a year")
    with pytest.raises(ValueError, match="whole number"):
        keep_days()
