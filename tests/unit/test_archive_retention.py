"""The archive keeps a year: whole days past the retention are deleted, others kept."""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path

import pytest

from consumers.archive import days, expire, keep_days

TODAY = date(2026, 11, 26)


def _day(root: Path, day: date) -> None:
    folder = root / f"day={day.isoformat()}" / "tenant=default"
    folder.mkdir(parents=True)
    (folder / "day.parquet").write_bytes(b"x")


def test_days_past_the_retention_go_whole_and_the_rest_stay(tmp_path: Path) -> None:
    for back in (0, 1, 365, 366, 367, 800):
        _day(tmp_path, TODAY - timedelta(days=back))
    (tmp_path / "_checkpoints").mkdir()
    gone = expire(tmp_path, TODAY, 366)
    assert gone == [TODAY - timedelta(days=800), TODAY - timedelta(days=367)]
    assert days(tmp_path) == [TODAY - timedelta(days=b) for b in (366, 365, 1, 0)]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("day=")) == [
        "_checkpoints"
    ]
    assert expire(tmp_path, TODAY, 0) == []  # 0: kept forever
    assert len(days(tmp_path)) == 4


def test_the_retention_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", raising=False)
    assert keep_days() == 366
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", "30")
    assert keep_days() == 30
    monkeypatch.setenv("CRONSTREAM_ARCHIVE_KEEP_DAYS", "a year")
    with pytest.raises(ValueError, match="whole number"):
        keep_days()
