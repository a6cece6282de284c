"""The archive's job queries (``consumers.archive.Archive``) on a single machine's table
(SQLite catalog, local warehouse): each attempt's latest outcome, newest slot first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from consumers.archive import Archive
from consumers.lakehouse import ArchiveTable, to_arrow
from runtime.lakehouse import lakehouse, local_environment
from runtime.settings import Settings
from schemas.events import RunOutcome, RunStatus, Trigger

T0 = datetime(2026, 3, 10, 4, tzinfo=UTC)
S = RunStatus


def _o(run: int, status: RunStatus, recorded_s: int, *, attempt: int = 1,
       job: str = "j", tenant: str = "default") -> RunOutcome:  # fmt: skip
    slot = T0 + timedelta(hours=run)
    return RunOutcome(run_id=f"{job}@{run}", job_id=job, status=status, scheduled_at=slot,
                      recorded_at=slot + timedelta(seconds=recorded_s), attempt=attempt,
                      trigger=Trigger.SCHEDULE, tenant=tenant, worker="w1")  # fmt: skip


def test_each_attempt_is_its_latest_outcome_newest_slot_first(tmp_path: Path) -> None:
    where = lakehouse(Settings.from_env({}), local_environment(tmp_path))
    table = ArchiveTable(where)
    rows = [
        _o(0, S.STARTED, 1), _o(0, S.SUCCEEDED, 5),  # the later row wins
        _o(1, S.STARTED, 3), _o(1, S.FAILED, 3),  # a tie on time: the status's rank
        _o(1, S.STARTED, 9, attempt=2), _o(1, S.SUCCEEDED, 12, attempt=2),
        _o(2, S.SUCCEEDED, 4), _o(2, S.DUPLICATE, 8),  # a duplicate is not a status
        _o(3, S.STARTED, 2),  # still running when archived
        _o(2, S.SUCCEEDED, 4, job="other"), _o(1, S.FAILED, 4, job="acme/j", tenant="acme"),
    ]  # fmt: skip
    first, second = rows[:5], rows[5:]  # a run's rows in two files
    table.write(0, None, 1, to_arrow(first))
    table.write(0, 1, 2, to_arrow(second))
    table.close()
    cold = Archive(where)
    try:
        year = (T0 - timedelta(days=1), T0 + timedelta(days=1))
        found = [(o.run_id, o.attempt, o.status) for o in cold.job_runs("j", *year)]
        assert found == [
            ("j@3", 1, S.STARTED), ("j@2", 1, S.SUCCEEDED), ("j@1", 2, S.SUCCEEDED),
            ("j@1", 1, S.FAILED), ("j@0", 1, S.SUCCEEDED),
        ]  # fmt: skip
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
