"""History across its tiers (``consumers.tiers.Tiers``): Cassandra's part played by a
list of outcomes answering as ``History`` does (``tests.fakes.FakeHistory``), the
archive a real table on a local warehouse. What is tested is where each query reads and how the tiers' rows merge."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from cronstream.consumers.archive import Archive
from cronstream.consumers.errors import ArchiveUnavailable
from cronstream.consumers.history import History, flow_rows
from cronstream.consumers.lakehouse import ArchiveTable, to_arrow
from cronstream.consumers.tiers import Tiers, hot_from
from cronstream.runtime.lakehouse import lakehouse, local_environment
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, RunStatus, Trigger
from cronstream.schemas.ids import manual_run_id, run_id_for
from tests.fakes import FakeHistory

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
DAY = timedelta(days=1)
S = RunStatus
SETTINGS = replace(Settings.from_env({}), history_ttl_days=30)
BOUNDARY = hot_from(SETTINGS, NOW)  # 2026-11-01: the first day Cassandra holds in full


def outcome(
    slot: datetime,
    status: RunStatus,
    *,
    recorded: datetime | None = None,
    attempt: int = 1,
    run_id: str | None = None,
    job: str = "j",
) -> RunOutcome:
    return RunOutcome(
        run_id=run_id or run_id_for(job, slot),
        job_id=job,
        status=status,
        scheduled_at=slot,
        recorded_at=recorded or slot + timedelta(seconds=1),
        attempt=attempt,
        trigger=Trigger.SCHEDULE,
        tenant="default",
    )


def tiers(
    tmp_path: Path,
    hot: Sequence[RunOutcome],
    cold: Sequence[RunOutcome],
) -> tuple[Tiers, FakeHistory]:
    where = lakehouse(SETTINGS, local_environment(tmp_path))
    if cold:
        table = ArchiveTable(where)
        table.write(0, None, 1, to_arrow(list(cold)))
        table.close()
    cassandra = FakeHistory(hot)
    found = Tiers(cast(History, cassandra), SETTINGS, archive=Archive(where), clock=lambda: NOW)
    return found, cassandra


def test_a_window_inside_the_hot_days_never_reads_the_archive(tmp_path: Path) -> None:
    recent = outcome(NOW - 2 * DAY, S.SUCCEEDED)
    history, cassandra = tiers(tmp_path, [recent], [])
    history._archive = cast(Archive, None)  # reading it would fail
    assert list(history.job_runs("j", BOUNDARY, NOW)) == [recent]
    assert list(history.by_status(["SUCCEEDED"], BOUNDARY, NOW)) == [recent]
    assert history.run(recent.run_id) == [recent]
    assert [q[0] for q in cassandra.asked] == ["job_runs", "by_status", "run"]


def test_a_jobs_runs_merge_both_tiers_before_the_boundary(tmp_path: Path) -> None:
    old, older = BOUNDARY - 3 * DAY, BOUNDARY - 40 * DAY
    archived = [
        outcome(old, S.STARTED, recorded=old),
        outcome(old, S.FAILED),  # then retried lately
        outcome(older, S.SUCCEEDED),
        outcome(older - DAY, S.FAILED),
    ]
    backfilled = outcome(old - DAY, S.SUCCEEDED, recorded=NOW - DAY)  # recorded lately
    hot = [
        outcome(NOW - DAY, S.SUCCEEDED),
        outcome(old, S.SUCCEEDED, recorded=NOW - 2 * DAY, attempt=2),
        outcome(old, S.FAILED),  # its cells as the archive has them: shown once
        backfilled,
    ]
    history, cassandra = tiers(tmp_path, hot, archived)
    year = (NOW - 365 * DAY, NOW)
    found = [(r.scheduled_at, r.attempt, r.status) for r in history.job_runs("j", *year)]
    assert found == [
        (NOW - DAY, 1, S.SUCCEEDED),
        (old, 2, S.SUCCEEDED),
        (old, 1, S.FAILED),
        (old - DAY, 1, S.SUCCEEDED),
        (older, 1, S.SUCCEEDED),
        (older - DAY, 1, S.FAILED),
    ]
    assert cassandra.asked[:2] == [("job_runs", BOUNDARY, NOW), ("job_runs", year[0], BOUNDARY)]
    failed = [(r.scheduled_at, r.attempt) for r in history.job_runs("j", *year, ["failed"])]
    assert failed == [(old, 1), (older - DAY, 1)]
    assert [r.scheduled_at for r in history.job_runs("j", *year, limit=2)] == [NOW - DAY, old]
    assert list(history.job_runs("j", older - 2 * DAY, older - DAY)) == []


def test_an_attempt_in_both_tiers_is_the_one_recorded_last(tmp_path: Path) -> None:
    slot = BOUNDARY - 5 * DAY
    lagging = outcome(slot, S.STARTED, recorded=slot)  # the archiver has not caught up
    newer = outcome(slot, S.SUCCEEDED, recorded=slot + timedelta(minutes=3))
    history, _ = tiers(tmp_path, [newer], [lagging])
    assert list(history.job_runs("j", slot - DAY, slot + DAY)) == [newer]
    assert list(history.job_runs("j", slot - DAY, slot + DAY, ["STARTED"])) == []
    history, _ = tiers(tmp_path / "2", [lagging], [lagging, newer])
    assert list(history.job_runs("j", slot - DAY, slot + DAY)) == [newer]


def test_outcomes_by_status_come_from_one_tier_each(tmp_path: Path) -> None:
    before = BOUNDARY - 2 * DAY
    archived = outcome(before, S.FAILED)
    still_hot = outcome(before + timedelta(hours=3), S.FAILED)  # not expired: archived too
    recent = outcome(NOW - DAY, S.FAILED)
    history, cassandra = tiers(tmp_path, [still_hot, recent], [archived, still_hot])
    found = list(history.by_status(["FAILED"], NOW - 60 * DAY, NOW))
    assert found == [recent, still_hot, archived]  # latest recorded first, each once
    assert cassandra.asked == [("by_status", BOUNDARY, NOW)]
    assert list(history.by_status(["FAILED"], NOW - 60 * DAY, before + DAY)) == [
        still_hot,
        archived,
    ]
    assert len(cassandra.asked) == 1  # a window before the boundary: the archive alone


def test_a_runs_records_across_the_tiers(tmp_path: Path) -> None:
    slot = BOUNDARY - 2 * DAY
    first = outcome(slot, S.FAILED)  # expired from Cassandra
    retried = outcome(slot, S.SUCCEEDED, recorded=NOW - DAY, attempt=2)
    manual = manual_run_id("j", "deploy-1")
    asked = outcome(NOW - 40 * DAY, S.SUCCEEDED, run_id=manual)
    recent = outcome(NOW - DAY, S.SUCCEEDED, run_id=manual_run_id("j", "deploy-2"))
    history, cassandra = tiers(tmp_path, [retried, recent], [first, retried, asked])
    assert history.run(first.run_id) == [first, retried]  # each record once, oldest first
    assert history.run(manual) == [asked]  # its slot in no id: the archive's job files
    assert history.run(recent.run_id) == [recent]  # its records say its slot: hot
    assert history.run("not a run id") == []
    assert [q[1] for q in cassandra.asked] == [first.run_id, manual, recent.run_id, "not a run id"]


def test_a_flow_run_across_the_tiers(tmp_path: Path) -> None:
    slot = BOUNDARY - 10 * DAY
    flow = run_id_for("f", slot)
    rows = [
        outcome(slot, S.SUCCEEDED, run_id=flow, job="f", recorded=slot + timedelta(minutes=5)),
        outcome(slot, S.SUCCEEDED, run_id=f"{flow}/a", job="f"),
        outcome(
            slot, S.SUCCEEDED, run_id=f"{flow}/b", job="f", recorded=slot + 2 * timedelta(seconds=1)
        ),
    ]
    history, _ = tiers(tmp_path, [], rows)
    assert [r.run_id for r in history.flow_run(flow)] == [flow, f"{flow}/a", f"{flow}/b"]
    assert flow_rows(history.run, history.job_runs, run_id_for("f", slot - DAY)) == []


def test_an_archive_that_does_not_answer_fails_the_query(tmp_path: Path) -> None:
    class Away:
        def by_status(self, *_: Any) -> Iterator[RunOutcome]:
            raise OSError("When reading information for key 'x' in bucket 'b': timeout")

        def close(self) -> None:
            pass

    history, _ = tiers(tmp_path, [outcome(NOW - DAY, S.FAILED)], [])
    history._archive = cast(Archive, Away())
    with pytest.raises(ArchiveUnavailable, match="did not answer: When reading"):
        list(history.by_status(["FAILED"], NOW - 60 * DAY, NOW))
