"""Workers dividing the runs topics: each worker of a group gets its share of
every priority's partitions, so that with every job at one priority a second and a
third worker take work; and no run is lost or executed twice while they join."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from cronstream.producers.client import JobClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import Priority, RunOutcome
from cronstream.schemas.ids import partition_for
from tests.integration.helpers import CronstreamProcess, Target, decoded, wait_shares

pytestmark = pytest.mark.integration


def spread_jobs(partitions: int, per_partition: int) -> list[str]:
    """Job ids whose runs land ``per_partition`` on each partition (a job's runs go to
    the partition of its id)."""
    jobs: dict[int, list[str]] = {p: [] for p in range(partitions)}
    i = 0
    while any(len(ids) < per_partition for ids in jobs.values()):
        job_id = f"j{i}"
        home = jobs[partition_for(job_id, partitions)]
        if len(home) < per_partition:
            home.append(job_id)
        i += 1
    return [job_id for ids in jobs.values() for job_id in ids]


def trigger_all(client: JobClient, jobs: list[str], keys: list[str]) -> list[str]:
    return [run.run_id for job in jobs for run in client.trigger_many(job, keys)]


def test_three_workers_share_one_priority_and_run_everything_once(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    topics = Topics(ns)
    normal = topics.runs(Priority.NORMAL)
    partitions = topics.partitions(topics.spec(normal))  # type: ignore[arg-type]
    jobs = spread_jobs(partitions, 2)
    target.slow_s = 0.1
    with JobClient(ns) as client:
        for job in jobs:
            client.put(
                job_from_spec(
                    {"id": job, "target": "http", "url": f"{target.url}/slow"},
                    max_payload_bytes=65536,
                )
            )

        def worker(name: str) -> CronstreamProcess:
            proc = CronstreamProcess(
                ns,
                tmp_path,
                name,
                "--http-allow",
                "127.0.0.0/8",
                "--concurrency",
                "4",
                command="worker",
            )
            procs.append(proc)
            return proc

        a = worker("a")
        a.wait_live(1, text="assigned")
        # Runs a alone cannot finish before the others join: partitions move with runs
        # executing, held in the backlog and not yet fetched.
        first = trigger_all(client, jobs, [f"x{i}" for i in range(20)])
        b, c = worker("b"), worker("c")
        took = wait_shares([a, b, c], normal, partitions // 3, timeout=90)
        second = trigger_all(client, jobs, [f"y{i}" for i in range(12)])
    runs = first + second
    deadline = time.monotonic() + 120
    while not set(runs) <= set(target.keys("/slow")):
        assert time.monotonic() < deadline, f"{len(set(target.keys('/slow')))} of {len(runs)} ran"
        time.sleep(0.5)
    for proc in (a, b, c):
        proc.stop()
    executed = target.keys("/slow")
    assert max(executed.values()) == 1, [k for k, n in executed.items() if n > 1]
    by = Counter(
        o.worker
        for o in decoded(ns, topics.history, RunOutcome)
        if o.run_id in set(second) and o.status.value == "SUCCEEDED"
    )
    print(
        f"\n{normal} shared 4/4/4 {took:.1f} s after two workers joined; the second "
        f"{len(second)} runs executed by {dict(by)}; {len(runs)} runs, each once"
    )
    assert set(by) == {"a", "b", "c"}, by
