"""Lookahead on the real stack: the scheduler emits run requests ahead of their due time
(``--lookahead``), the worker holds each until it is due, and a job paused in
between has its early runs cancelled: the worker records them SKIPPED, never runs them.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from cronstream.producers.client import JobClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import JOB_PAUSED, Priority, RunOutcome, RunStatus, to_ms
from tests.integration.helpers import CronstreamProcess, decoded, read_topic

pytestmark = pytest.mark.integration
LOOKAHEAD_MS = 3000


def _outcomes(ns: Settings) -> list[RunOutcome]:
    return decoded(ns, Topics(ns).history, RunOutcome)


def test_runs_leave_ahead_start_when_due_and_a_pause_skips_the_early_ones(  # long: one story
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    for name, command, ready, more in (
        ("s", "scheduler", " live: ", ("--lookahead", f"{LOOKAHEAD_MS}ms")),
        ("w", "worker", "assigned", ()),
    ):
        proc = CronstreamProcess(ns, tmp_path, name, *more, command=command)
        procs.append(proc)
        proc.wait_live(1, text=ready, timeout=120)
    with JobClient(ns) as client:
        for job_id in ("a", "p"):
            client.put(
                job_from_spec(
                    {
                        "id": job_id,
                        "every": "2s",
                        "target": "python",
                        "callable": "examples.tasks:send_digest",
                    },
                    max_payload_bytes=65536,
                )
            )
        time.sleep(8)
        client.pause("p")
        paused_ms = int(time.time() * 1000)
        time.sleep(LOOKAHEAD_MS / 1000 + 4)  # every run emitted before the pause is due

    requests = read_topic(ns, Topics(ns).runs(Priority.NORMAL))
    outcomes = _outcomes(ns)
    by_run: dict[str, list[RunOutcome]] = {}
    for outcome in outcomes:
        by_run.setdefault(outcome.run_id, []).append(outcome)

    # Emitted ahead, carrying the due time; started at it, not before.
    a_runs = [r for r in requests if r.headers["job_id"] == "a"]
    assert len(a_runs) >= 5
    early = [r for r in a_runs if "due_at" in r.headers]
    assert len(early) >= len(a_runs) - 1, "runs were not emitted ahead"
    leads = []
    for record in a_runs:
        run_id = record.headers["run_id"]
        # Its end carries its start (a short run has no STARTED record of its own).
        ended = [
            o
            for o in by_run.get(run_id, [])
            if o.status is not RunStatus.STARTED and o.started_at is not None
        ]
        if not ended:
            continue  # due after the worker stopped being watched
        due = to_ms(ended[0].scheduled_at)  # no jitter: due at its slot
        start_ms = to_ms(ended[0].started_at)
        assert start_ms >= due, f"{run_id} started {due - start_ms} ms before it was due"
        assert start_ms - due < 1500, f"{run_id} started {start_ms - due} ms late"
        leads.append(due - record.timestamp_ms)
    assert len(leads) >= 4
    assert max(leads) > LOOKAHEAD_MS / 2, f"emitted only {max(leads)} ms ahead"

    # The pause cancels p's runs emitted ahead: each recorded SKIPPED by the worker.
    p_after = [
        r.headers["run_id"]
        for r in requests
        if r.headers["job_id"] == "p"
        and r.timestamp_ms < paused_ms
        and to_ms(_slot(r.headers["run_id"])) > paused_ms + 200
    ]
    assert p_after, "no run of p was emitted ahead of the pause"
    for run_id in p_after:
        statuses = [(o.status, o.error, o.worker) for o in by_run.get(run_id, [])]
        assert statuses == [(RunStatus.SKIPPED, JOB_PAUSED, "w")], (run_id, statuses)


def _slot(run_id: str) -> datetime:
    return datetime.fromisoformat(run_id.rpartition("@")[2].replace("Z", "+00:00"))
