"""The whole pipeline through the CLI, as a user drives it: put jobs, let the scheduler
fire them, workers execute them against a real HTTP target (and python and shell
targets), the sink writes the outcomes to Cassandra, and `cronstream history` reads
back a success, a retry that succeeded, a dead letter and a cancel."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cronstream.runtime.settings import Settings
from tests.integration.helpers import CronstreamProcess, Target, cronstream, eventually

pytestmark = pytest.mark.acceptance


@pytest.fixture
def pipeline(history_ns: Settings, tmp_path: Path) -> Iterator[list[CronstreamProcess]]:
    ns = history_ns
    procs = [
        CronstreamProcess(ns, tmp_path, "scheduler"),
        CronstreamProcess(
            ns,
            tmp_path,
            "worker",
            "--http-allow",
            "127.0.0.0/8",
            "--shell-allow",
            "sleep *",
            command="worker",
        ),
        CronstreamProcess(ns, tmp_path, "sink", command="sink"),
    ]
    yield procs
    for proc in procs:
        proc.cleanup()


def ok(result: Any) -> str:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"
    return str(result.stdout)


def history_json(ns: Settings, *args: str) -> list[dict[str, Any]]:
    out = cronstream(ns, "history", *args, "--json", "--limit", "0")
    if out.returncode == 4:  # --run of a run not recorded yet
        return []
    return [json.loads(line) for line in ok(out).splitlines()]


def test_put_fire_execute_and_read_back_through_the_cli(  # long: one end-to-end scenario, read top to bottom
    history_ns: Settings, pipeline: list[CronstreamProcess]
) -> None:
    ns = history_ns
    target = Target()
    try:
        for proc in pipeline:
            proc.wait_live(1, text="assigned" if proc.name != "scheduler" else " live: ")
        ok(
            cronstream(
                ns,
                "jobs",
                "put",
                "hello",
                "--every",
                "2s",
                "--target",
                "http",
                "--url",
                f"{target.url}/ok",
            )
        )
        ok(
            cronstream(
                ns,
                "jobs",
                "put",
                "flaky",
                "--cron",
                "0 0 1 1 *",
                "--target",
                "python",
                "--callable",
                "examples.tasks:flaky",
                "--max-attempts",
                "3",
                "--backoff",
                "1s..2s",
            )
        )
        ok(
            cronstream(
                ns,
                "jobs",
                "put",
                "hopeless",
                "--cron",
                "0 0 1 1 *",
                "--target",
                "python",
                "--callable",
                "examples.tasks:hopeless",
                "--max-attempts",
                "2",
                "--backoff",
                "1s..1s",
            )
        )
        ok(
            cronstream(
                ns,
                "jobs",
                "put",
                "sleeper",
                "--cron",
                "0 0 1 1 *",
                "--target",
                "shell",
                "--command",
                "sleep 60",
                "--timeout",
                "2m",
            )
        )
        flaky_run = ok(cronstream(ns, "runs", "trigger", "flaky", "--idempotency-key", "a1"))
        flaky_id = flaky_run.split()[1]
        ok(cronstream(ns, "runs", "trigger", "hopeless", "--idempotency-key", "b1"))
        sleeper_id = ok(
            cronstream(ns, "runs", "trigger", "sleeper", "--idempotency-key", "c1")
        ).split()[1]

        # Scheduled runs fire, call the target with their run id, and are read back.
        hello = eventually(
            lambda: history_json(ns, "hello", "--since", "10m"),
            lambda rows: sum(r["status"] == "SUCCEEDED" for r in rows) >= 2,
            "two successful scheduled runs of hello",
        )
        succeeded = {r["run_id"] for r in hello if r["status"] == "SUCCEEDED"}
        assert succeeded <= set(target.keys("/ok"))  # the Idempotency-Key is the run id
        assert {r["trigger"] for r in hello} == {"SCHEDULE"}

        # Retried, then succeeded: two attempts of one run.
        flaky = eventually(
            lambda: history_json(ns, "--run", flaky_id),
            lambda rows: any(r["status"] == "SUCCEEDED" for r in rows),
            "flaky to succeed on a retry",
        )
        finals = [(r["attempt"], r["status"]) for r in flaky if r["status"] != "STARTED"]
        assert finals == [(1, "FAILED"), (2, "SUCCEEDED")]
        # (No STARTED rows for attempts this short: --started-after.)
        failed = next(r for r in flaky if r["status"] == "FAILED")
        assert "first attempts of this example always fail" in failed["error"]
        assert failed["next_attempt_at"] is not None
        job_view = history_json(ns, "flaky", "--since", "10m")
        assert [(r["attempt"], r["status"]) for r in job_view] == [(2, "SUCCEEDED"), (1, "FAILED")]

        # Dead-lettered after its attempts, found by status.
        dead = eventually(
            lambda: history_json(
                ns, "--status", "dead_lettered", "--since", "10m", "--all-tenants"
            ),
            lambda rows: len(rows) >= 1,
            "hopeless to be dead-lettered",
        )
        assert [(r["job_id"], r["attempt"]) for r in dead] == [("hopeless", 2)]
        assert "no attempts left" in dead[0]["error"]

        # Cancelled while running.
        eventually(
            lambda: history_json(ns, "--run", sleeper_id),
            lambda rows: any(r["status"] == "STARTED" for r in rows),
            "sleeper to start",
        )
        ok(cronstream(ns, "runs", "cancel", sleeper_id))
        cancelled = eventually(
            lambda: history_json(ns, "--run", sleeper_id),
            lambda rows: any(r["status"] == "CANCELED" for r in rows),
            "sleeper to be cancelled",
        )
        assert cancelled[-1]["duration_ms"] < 60_000

        # The human-readable table shows the same run.
        table = ok(cronstream(ns, "history", "--run", flaky_id))
        assert "FAILED" in table
        assert "SUCCEEDED" in table
    finally:
        target.server.shutdown()
        target.server.server_close()
