"""The archive's job queries (``consumers.archive.Archive``) on a single machine's table
(SQLite catalog, local warehouse): each attempt's latest outcome, newest slot first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyiceberg.catalog.sql import SqlCatalog

from cronstream.consumers.archive import REFRESH_S, Archive
from cronstream.consumers.lakehouse import ArchiveTable, to_arrow
from cronstream.runtime.lakehouse import lakehouse, local_environment
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, RunStatus, Trigger
from cronstream.schemas.ids import run_id_for

T0 = datetime(2026, 3, 10, 4, tzinfo=UTC)
S = RunStatus


def _slot_run(
    job: str,
    hour: int,
    status: RunStatus,
    recorded_s: int,
    *,
    attempt: int = 1,
    run_id: str | None = None,
    tenant: str = "default",
    worker: str | None = None,
) -> RunOutcome:
    slot = T0 + timedelta(hours=hour)
    return RunOutcome(
        run_id=run_id or run_id_for(job, slot),
        job_id=job,
        status=status,
        scheduled_at=slot,
        recorded_at=slot + timedelta(seconds=recorded_s),
        attempt=attempt,
        trigger=Trigger.SCHEDULE,
        tenant=tenant,
        worker=worker,
    )


def _o(run: int, status: RunStatus, recorded_s: int, *, job: str = "j", **more: Any) -> RunOutcome:
    """Run ``run`` of ``job`` (its run id ``job@run``), by worker w1."""
    return _slot_run(job, run, status, recorded_s, run_id=f"{job}@{run}", worker="w1", **more)


def test_each_attempt_is_its_latest_outcome_newest_slot_first(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    rows = [
        _o(0, S.STARTED, 1),
        _o(0, S.SUCCEEDED, 5),  # the later row wins
        _o(1, S.STARTED, 3),
        _o(1, S.FAILED, 3),  # a tie on time: the status's rank
        _o(1, S.STARTED, 9, attempt=2),
        _o(1, S.SUCCEEDED, 12, attempt=2),
        _o(2, S.SUCCEEDED, 4),
        _o(2, S.DUPLICATE, 8),  # a duplicate is not a status
        _o(3, S.STARTED, 2),  # still running when archived
        _o(2, S.SUCCEEDED, 4, job="other"),
        _o(1, S.FAILED, 4, job="acme/j", tenant="acme"),
    ]
    first, second = rows[:5], rows[5:]  # a run's rows in two files
    table.write(0, None, 1, to_arrow(first))
    table.write(0, 1, 2, to_arrow(second))
    table.close()
    cold = Archive(where)
    try:
        year = (T0 - timedelta(days=1), T0 + timedelta(days=1))
        found = [(o.run_id, o.attempt, o.status) for o in cold.job_runs("j", *year)]
        assert found == [
            ("j@3", 1, S.STARTED),
            ("j@2", 1, S.SUCCEEDED),
            ("j@1", 2, S.SUCCEEDED),
            ("j@1", 1, S.FAILED),
            ("j@0", 1, S.SUCCEEDED),
        ]
        assert [o.run_id for o in cold.job_runs("j", *year, tenant="acme")] == []
        assert [o.run_id for o in cold.job_runs("acme/j", *year, tenant="acme")] == ["acme/j@1"]
        assert [o.run_id for o in cold.job_runs("acme/j", *year, tenant="beta")] == []
        failed = list(cold.job_runs("j", *year, statuses=["failed"]))
        assert [(o.run_id, o.attempt) for o in failed] == [("j@1", 1)]
        one = next(cold.job_runs("j", *year))
        assert one == rows[8]
        columns = cold.job_runs_table("j", *year)
        assert columns.column("run_id").to_pylist() == ["j@3", "j@2", "j@1", "j@1", "j@0"]
        at = int((T0 + timedelta(hours=3)).timestamp() * 1000)
        assert columns.column("scheduled_at").to_pylist()[0] == at  # epoch milliseconds
        window = (T0 + timedelta(hours=1), T0 + timedelta(hours=3))
        assert [o.run_id for o in cold.job_runs("j", *window)] == ["j@2", "j@1", "j@1"]
    finally:
        cold.close()


def test_outcomes_by_status_and_a_runs_records_each_once(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    manual = "j@manual:deploy-1"
    rows = [
        _slot_run("j", 0, S.STARTED, 1),
        _slot_run("j", 0, S.FAILED, 5),
        _slot_run("j", 0, S.SUCCEEDED, 70, attempt=2),
        _slot_run("k", 1, S.FAILED, 2),
        _slot_run("k", 1, S.FAILED, 2),  # carried twice
        _slot_run("j", 2, S.SUCCEEDED, 3, run_id=manual),
        _slot_run("j", 3, S.FAILED, 1, run_id=manual, attempt=2),
        _slot_run("acme/j", 1, S.FAILED, 9, tenant="acme"),
        _slot_run("f", 4, S.SUCCEEDED, 8, run_id=f"{run_id_for('f', T0 + timedelta(hours=4))}/a"),
    ]
    table.write(0, None, 1, to_arrow(rows[:4]))
    table.write(0, 1, 2, to_arrow(rows[4:]))
    table.close()
    cold = Archive(where)
    try:
        day = (T0 - timedelta(hours=1), T0 + timedelta(days=1))
        failed = [(o.run_id, o.attempt, o.tenant) for o in cold.by_status(["failed"], *day)]
        assert failed == [  # latest recorded first; the record carried twice once
            (manual, 2, "default"),
            ("acme/j@2026-03-10T05:00:00.000Z", 1, "acme"),
            ("k@2026-03-10T05:00:00.000Z", 1, "default"),
            ("j@2026-03-10T04:00:00.000Z", 1, "default"),
        ]
        assert [o.run_id for o in cold.by_status(["FAILED"], *day, tenant="acme")] == [failed[1][0]]
        window = (T0 + timedelta(seconds=2), T0 + timedelta(hours=2))  # by recorded time
        assert [o.job_id for o in cold.by_status(["FAILED", "SUCCEEDED"], *window)] == [
            "acme/j",
            "k",
            "j",
            "j",
        ]
        assert list(cold.by_status(["DEAD"], *day)) == []

        slot = run_id_for("j", T0)
        assert [(o.attempt, o.status) for o in cold.run(slot)] == [
            (1, S.STARTED),
            (1, S.FAILED),
            (2, S.SUCCEEDED),
        ]
        assert cold.run(slot)[2] == rows[2]
        assert [(o.attempt, o.status) for o in cold.run(manual)] == [
            (1, S.SUCCEEDED),
            (2, S.FAILED),
        ]
        node = rows[-1].run_id
        assert cold.run(node) == [rows[-1]]
        assert len(cold.run("k@2026-03-10T05:00:00.000Z")) == 1  # the record carried twice
        assert cold.run("j@manual:unknown") == []
        assert cold.run("no run id") == []
        assert cold.run(manual, T0 + timedelta(hours=2))[0] == rows[5]  # its slot known
    finally:
        cold.close()


def test_a_table_no_archiver_made_yet_answers_nothing_and_is_not_made(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    cold = Archive(where)
    try:
        year = (T0 - timedelta(days=365), T0)
        assert list(cold.job_runs("j", *year)) == []
        assert list(cold.by_status(["FAILED"], *year)) == []
        assert cold.run(run_id_for("j", T0)) == []
        catalog = SqlCatalog("cronstream", **where.catalog_properties())
        assert catalog.list_namespaces() == []  # a query makes nothing
        table = ArchiveTable(where)  # the archiver's first start
        table.write(0, None, 1, to_arrow([_slot_run("j", 0, S.SUCCEEDED, 1)]))
        table.close()
        cold._refreshed -= REFRESH_S  # the reader looks again after REFRESH_S
        assert [o.status for o in cold.job_runs("j", T0, T0 + timedelta(days=1))] == [S.SUCCEEDED]
    finally:
        cold.close()
