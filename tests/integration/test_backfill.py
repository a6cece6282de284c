"""`cronstream runs backfill` on the real stack: a worker executing against an HTTP
target that records each run's Idempotency-Key, the history sink writing Cassandra
(which tells the second backfill what ran)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronstream.consumers.history import History
from cronstream.producers.client import JobClient
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.settings import Settings
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import from_ms, iso
from tests.conftest import cli_env
from tests.integration.helpers import CronstreamProcess, Target, cronstream

pytestmark = pytest.mark.integration


def _start(
    ns: Settings, tmp: Path, procs: list[CronstreamProcess], command: str, *args: str
) -> None:
    proc = CronstreamProcess(ns, tmp, command, *args, command=command)
    procs.append(proc)
    proc.wait_live(1, text="assigned")


def _put(ns: Settings, job_id: str, url: str) -> None:
    with JobClient(ns) as client:
        client.put(
            job_from_spec(
                {"id": job_id, "every": "1s", "target": "http", "url": url}, max_payload_bytes=65536
            )
        )


def _stored(ns: Settings, job_id: str, start_ms: int, end_ms: int) -> int:
    cluster, session = cassandra_session(ns)
    try:
        rows = History(session, ns.keyspace).job_runs(job_id, from_ms(start_ms), from_ms(end_ms))
        return sum(1 for r in rows if r.status.value == "SUCCEEDED")
    finally:
        cluster.shutdown()


def _backfill(
    ns: Settings, *args: str
) -> tuple[dict[str, object], subprocess.CompletedProcess[str]]:
    run = cronstream(ns, "runs", "backfill", *args, "--json")
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout), run


# Alone: beside another test (two at a time on 2 cores) its backfill twice left runs
# that never ended (490 and 947 of 1,000 ended at 120 s and 280 s; under 30 s alone);
# the cause is not found yet.
@pytest.mark.alone
def test_a_backfill_of_1000_slots_run_twice_executes_1000_runs(
    history_ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    job_id = f"bf-{uuid.uuid4().hex[:6]}"
    _put(ns, job_id, f"{target.url}/ok")
    _start(ns, tmp_path, procs, "worker", "--http-allow", "127.0.0.0/8", "--concurrency", "64")
    _start(ns, tmp_path, procs, "sink")
    end = (int(time.time()) - 60) * 1000
    start = end - 1000 * 1000
    bounds = ("--from", iso(from_ms(start)), "--to", iso(from_ms(end)))

    first, run = _backfill(ns, job_id, *bounds, "--max-parallel", "200")
    assert run.returncode == 0, run.stderr
    assert first == {
        "job_id": job_id,
        "slots_to_run": 1000,
        "already_ran": 0,
        "ended": {"SUCCEEDED": 1000},
    }
    assert "backfill " + job_id + ": 1000/1000 ended (1000 succeeded)" in run.stderr
    deadline = time.monotonic() + 60
    while _stored(ns, job_id, start, end) < 1000:  # the sink catches up
        assert time.monotonic() < deadline, "the sink never stored the 1000 runs"
        time.sleep(1)

    second, run = _backfill(ns, job_id, *bounds)
    assert run.returncode == 0, run.stderr
    assert second == {"job_id": job_id, "slots_to_run": 0, "already_ran": 1000, "ended": {}}
    keys = target.keys("/ok")
    assert len(keys) == 1000
    assert set(keys.values()) == {1}, "a slot reached the target twice"
    assert min(keys) == f"{job_id}@{iso(from_ms(start))}"  # the slots' own run ids

    # --rerun: every slot of the range again, under fresh run ids.
    small = ("--from", iso(from_ms(start)), "--to", iso(from_ms(start + 5000)))
    again, run = _backfill(ns, job_id, *small, "--rerun")
    assert again["ended"] == {"SUCCEEDED": 5}, run.stderr
    reruns = [k for k in target.keys("/ok") if "~" in k]
    assert len(reruns) == 5
    assert all(k.startswith(f"{job_id}@") for k in reruns)


NEW_YEAR = "2026-01-01T00:00:00Z"


def _backfill_text(
    ns: Settings, job_id: str, start: str, end: str, *more: str
) -> subprocess.CompletedProcess[str]:
    """`cronstream runs backfill` of ``job_id`` from ``start`` to ``end``, answering in
    text (a refusal, a dry run's plan), not --json as ``_backfill``."""
    return cronstream(ns, "runs", "backfill", job_id, "--from", start, "--to", end, *more)


def test_bad_backfills_are_refused_and_send_nothing(ns: Settings, target: Target) -> None:
    _put(ns, "bf", f"{target.url}/ok")
    now = datetime.now(UTC)
    future = _backfill_text(ns, "bf", iso(now), "2999-01-01T00:00:00Z")
    assert future.returncode == 2, future.stderr
    assert "--to is in the future" in future.stderr
    assert "nothing was written" in future.stderr
    parallel = _backfill_text(ns, "bf", NEW_YEAR, "2026-01-02T00:00:00Z", "--max-parallel", "0")
    assert parallel.returncode == 2
    assert "--max-parallel must be 1 to 10,000" in parallel.stderr
    unknown = _backfill_text(ns, "nope", NEW_YEAR, "2026-01-02T00:00:00Z")
    assert unknown.returncode == 4, unknown.stderr
    dry = _backfill_text(ns, "bf", NEW_YEAR, "2026-01-01T00:01:00Z", "--dry-run", "--rerun")
    assert dry.returncode == 0, dry.stderr
    assert "60 slot(s) to run (2026-01-01T00:00:00.000Z .. 2026-01-01T00:00:59.000Z)" in dry.stderr
    assert target.calls == []


def test_ctrl_c_stops_sending_and_cancels_the_runs_in_flight(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    # Each run takes 5 s: both are still running when the interrupt is handled (with
    # 1 s, a busy machine finished one first, and one cancel was sent: seen in make test).
    target.slow_s = 5.0
    _put(ns, "slow", f"{target.url}/slow")
    _start(ns, tmp_path, procs, "worker", "--http-allow", "127.0.0.0/8")
    end = (int(time.time()) - 60) * 1000
    args = [
        "--from",
        iso(from_ms(end - 30_000)),
        "--to",
        iso(from_ms(end)),
        "--max-parallel",
        "2",
        "--rerun",
    ]
    with subprocess.Popen(
        [sys.executable, "-m", "cronstream.cli", "runs", "backfill", "slow", *args],
        env=cli_env(ns),
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        while "2 running" not in proc.stderr.readline():
            assert time.monotonic() < deadline, "no progress line"
            assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        assert proc.wait(30) == 130, rest
    assert "interrupted: 2 cancel(s) sent" in rest
    time.sleep(3)
    assert len(target.keys("/slow")) < 30  # the rest was never sent
