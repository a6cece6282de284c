"""Jobs' concurrency policies on the real stack: a worker running a slow python target
(``examples.tasks:slow``, which stops when cancelled), runs triggered while another run
of the same job executes."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from cronstream.producers.client import JobClient
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import RunOutcome
from cronstream.schemas.serde import Codec
from tests.integration.helpers import CronstreamProcess, read_topic

pytestmark = pytest.mark.integration


def _job(ns: Settings, job_id: str, policy: str, seconds: float) -> None:
    spec: dict[str, Any] = {
        "id": job_id,
        "target": "python",
        "callable": "examples.tasks:slow",
        "payload": {"seconds": seconds},
        "concurrency": policy,
    }
    with JobClient(ns) as client:
        client.put(job_from_spec(spec, max_payload_bytes=65536))


def _trigger(ns: Settings, job_id: str, *keys: str) -> list[str]:
    with JobClient(ns) as client:
        return [run.run_id for run in client.trigger_many(job_id, list(keys))]


def _final(ns: Settings, run_ids: list[str], timeout: float = 60) -> dict[str, list[RunOutcome]]:
    """Every outcome of ``run_ids``, once each has a final one."""
    final = {"SUCCEEDED", "CANCELED", "SKIPPED", "DEAD_LETTERED"}
    deadline = time.monotonic() + timeout
    with registry_client(ns, writer=True) as registry:
        codec = Codec(registry)
        while True:
            seen: dict[str, list[RunOutcome]] = defaultdict(list)
            for record in read_topic(ns, Topics(ns).history):
                outcome = codec.decode(record.value, RunOutcome)
                seen[outcome.run_id].append(outcome)
            if all(any(o.status.value in final for o in seen[r]) for r in run_ids):
                return seen
            assert time.monotonic() < deadline, {r: [o.status for o in seen[r]] for r in run_ids}
            time.sleep(0.5)


def _status(outcomes: list[RunOutcome]) -> str:
    return outcomes[-1].status.value


@pytest.fixture
def worker(ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]) -> CronstreamProcess:
    proc = CronstreamProcess(ns, tmp_path, "w", "--concurrency", "8", command="worker")
    procs.append(proc)
    proc.wait_live(1, text="assigned")
    return proc


def test_forbid_skips_runs_that_come_while_one_runs(
    ns: Settings, worker: CronstreamProcess
) -> None:
    _job(ns, "f", "forbid", 3)
    first, *others = _trigger(ns, "f", "a", "b", "c")
    seen = _final(ns, [first, *others])
    assert _status(seen[first]) == "SUCCEEDED"
    for run_id in others:
        assert [o.status.value for o in seen[run_id]] == ["SKIPPED"], seen[run_id]
        (skipped,) = seen[run_id]  # never started: no STARTED record
        assert skipped.status.value == "SKIPPED"
        assert skipped.error == f"concurrency forbid: run {first} of the job is still running"
    (after,) = _trigger(ns, "f", "d")  # the first has ended: the next run starts
    assert _status(_final(ns, [after])[after]) == "SUCCEEDED"


def test_replace_cancels_the_running_run_and_starts_the_new_one(
    ns: Settings, worker: CronstreamProcess
) -> None:
    _job(ns, "r", "replace", 10)
    (old,) = _trigger(ns, "r", "old")
    deadline = time.monotonic() + 30
    while "STARTED" not in [o.status.value for o in _final(ns, [], 0).get(old, [])]:
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.2)
    _job(ns, "r", "replace", 1)  # the new run is short
    (new,) = _trigger(ns, "r", "new")
    seen = _final(ns, [old, new], timeout=30)
    assert _status(seen[old]) == "CANCELED"
    assert seen[old][-1].error == f"replaced by run {new} (concurrency replace)"
    assert _status(seen[new]) == "SUCCEEDED"
    assert (seen[old][-1].duration_ms or 0) < 9_000  # stopped, not worked its 10 s


def test_queue_runs_one_after_the_other_in_order(ns: Settings, worker: CronstreamProcess) -> None:
    _job(ns, "q", "queue", 1)
    run_ids = _trigger(ns, "q", "1", "2", "3")
    seen = _final(ns, run_ids)
    assert [_status(seen[r]) for r in run_ids] == ["SUCCEEDED"] * 3
    spans = [(seen[r][-1].started_at, seen[r][-1].finished_at) for r in run_ids]
    for (_, finished), (started, _) in itertools.pairwise(spans):
        assert finished is not None
        assert started is not None
        assert started >= finished, spans  # each started once the one before ended
