"""The dependency processor (`cronstream dependencies`, a job's ``after:``) on the real
stack: a dependent runs once both jobs it comes after succeeded for the day, and not
before; a failure counts for nothing; a restart (clean or kill -9) does not run it again;
a run emitted just before a crash is emitted again, flagged, and a real worker runs it
once; defined after its upstream jobs succeeded today, it runs at once; a tenant's
dependent after another tenant's job is dead-lettered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
    utc_now,
)
from tests.factories import definition, outcome
from tests.integration.helpers import (
    CronstreamProcess,
    Target,
    decoded,
    eventually,
    free_port,
    group_caught_up,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def publisher(ns: Settings) -> Iterator[Publisher]:
    out = Publisher(ns)
    yield out
    out.close()


def processor(ns: Settings, log_dir: Path, name: str, *args: str) -> CronstreamProcess:
    """A `cronstream dependencies` process, once it has read both topics to their end."""
    proc = CronstreamProcess(ns, log_dir, name, *args, command="dependencies")
    proc.wait_live(1, text="runs owed at start emitted", timeout=120)
    return proc


def put_dependent(
    ns: Settings,
    url: str = "http://127.0.0.1:9/none",
    job_id: str = "dep",
) -> JobDefinition:
    with JobClient(ns) as client:
        return client.put_spec(
            {"id": job_id, "after": ["up1", "up2"], "target": "http", "url": url}
        )


def succeeded(
    publisher: Publisher,
    ns: Settings,
    job_id: str,
    *,
    day: date | None = None,
    status: RunStatus = RunStatus.SUCCEEDED,
    attempt: int = 1,
) -> None:
    """An outcome of ``job_id`` scheduled on ``day`` (today) written to history, as a
    worker writes it."""
    now = utc_now()
    at = now if day is None else datetime(day.year, day.month, day.day, 3, tzinfo=UTC)
    ran = outcome(
        f"{job_id}@{at.isoformat()}",
        status=status,
        scheduled_at=at,
        recorded_at=now,
        attempt=attempt,
        target_type="http",
        worker="w-test",
    )
    publisher.publish(Topics(ns).history, ran)
    publisher.flush()


def dep_runs(ns: Settings, job_id: str = "dep") -> list[RunRequest]:
    runs = decoded(ns, Topics(ns).runs(Priority.NORMAL), RunRequest)
    return [r for r in runs if r.job_id == job_id]


def metrics(port: int) -> dict[str, float]:
    """The dependency processor's figures (its /metrics), by series."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("cronstream_dependency")
    }


def caught_up(ns: Settings) -> None:
    """Until the processor has committed every history record written so far (its
    commit follows the writing of what those records made due)."""
    group = f"{ns.topic_prefix}.dependencies"
    eventually(
        lambda: group_caught_up(ns, group, Topics(ns).history),
        bool,
        "the processor to commit all of history",
    )


def test_a_dependent_runs_once_both_upstream_jobs_succeeded_for_the_day_and_not_before(
    ns: Settings, tmp_path: Path, publisher: Publisher, procs: list[CronstreamProcess]
) -> None:
    put_dependent(ns)
    port = free_port()
    procs.append(first := processor(ns, tmp_path, "deps-1", "--metrics-port", str(port)))
    succeeded(publisher, ns, "up1")
    caught_up(ns)
    assert dep_runs(ns) == []  # one upstream job: nothing
    eventually(
        lambda: metrics(port),
        lambda m: m.get("cronstream_dependency_waiting") == 1,
        "one date waiting",
    )
    succeeded(publisher, ns, "up2", status=RunStatus.FAILED)
    caught_up(ns)
    assert dep_runs(ns) == []  # a failure counts for nothing
    succeeded(publisher, ns, "up2", attempt=2)  # its retry succeeded
    (run,) = eventually(lambda: dep_runs(ns), bool, "the dependency run")
    today = utc_now().date()
    assert run.run_id == f"dep@dep:{today.isoformat()}"
    assert (run.trigger, run.possible_duplicate) == (Trigger.DEPENDENCY, False)
    assert run.scheduled_at == datetime(today.year, today.month, today.day, tzinfo=UTC)
    assert json.loads(run.payload or "") == {"date": today.isoformat(), "after": ["up1", "up2"]}
    figures = eventually(
        lambda: metrics(port),
        lambda m: m.get("cronstream_dependency_waiting") == 0,
        "no date waiting",
    )
    assert figures["cronstream_dependency_dependents"] == 1
    assert figures["cronstream_dependency_lag"] == 0
    assert figures['cronstream_dependency_runs_total{possible_duplicate="false"}'] == 1

    first.stop()  # a clean restart: committed, nothing owed
    procs.append(second := processor(ns, tmp_path, "deps-2"))
    assert "0 runs owed at start emitted" in second.log()
    succeeded(publisher, ns, "up1")  # another success of the day: the date ran already
    caught_up(ns)
    second.kill9()
    procs.append(processor(ns, tmp_path, "deps-3"))
    caught_up(ns)
    assert len(dep_runs(ns)) == 1
    assert decoded(ns, Topics(ns).dlq, DeadLetter) == []


def test_a_run_emitted_just_before_a_crash_is_emitted_again_flagged_and_runs_once(
    ns: Settings, tmp_path: Path, publisher: Publisher, procs: list[CronstreamProcess]
) -> None:
    """The processor commits only at its start here (--commit-interval 10m): killed after
    emitting, its next start reads the upstream successes again, finds no outcome of the
    run yet and emits it again, flagged; the worker that gets both runs it once."""
    target = Target()
    try:
        put_dependent(ns, f"{target.url}/dep")
        procs.append(first := processor(ns, tmp_path, "deps-1", "--commit-interval", "10m"))
        succeeded(publisher, ns, "up1")
        succeeded(publisher, ns, "up2")
        eventually(lambda: dep_runs(ns), bool, "the dependency run")
        first.kill9()
        procs.append(second := processor(ns, tmp_path, "deps-2", "--commit-interval", "10m"))
        assert "1 runs owed at start emitted" in second.log()
        again = dep_runs(ns)
        assert [r.possible_duplicate for r in again] == [False, True]
        assert again[0].run_id == again[1].run_id

        worker = CronstreamProcess(
            ns, tmp_path, "worker", "--http-allow", "127.0.0.0/8", command="worker"
        )
        procs.append(worker)
        run_id = again[0].run_id

        def outcomes() -> list[str]:
            return sorted(
                o.status.value
                for o in decoded(ns, Topics(ns).history, RunOutcome)
                if o.run_id == run_id
            )

        assert eventually(outcomes, lambda s: len(s) >= 2, "both requests settled") == [
            "DUPLICATE",
            "SUCCEEDED",
        ]
        assert list(target.keys("/dep").elements()) == [run_id]  # called once

        second.kill9()  # its outcomes are in history now: nothing owed
        procs.append(third := processor(ns, tmp_path, "deps-3", "--commit-interval", "10m"))
        assert "0 runs owed at start emitted" in third.log()
        assert len(dep_runs(ns)) == 2
        assert list(target.keys("/dep").elements()) == [run_id]
    finally:
        target.server.shutdown()
        target.server.server_close()


def test_a_dependent_defined_after_its_upstream_jobs_succeeded_today_runs_at_once(
    ns: Settings, tmp_path: Path, publisher: Publisher, procs: list[CronstreamProcess]
) -> None:
    yesterday = utc_now().date() - timedelta(days=1)
    for job_id in ("up1", "up2"):  # read at the start (the reader's partitions reused after)
        succeeded(publisher, ns, job_id, day=yesterday)
    procs.append(running := processor(ns, tmp_path, "deps-1"))
    for job_id in ("up1", "up2"):
        succeeded(publisher, ns, job_id)
    caught_up(ns)  # nobody waited for them: their dates were not kept
    put_dependent(ns)
    (run,) = eventually(lambda: dep_runs(ns), bool, "the dependency run")
    assert run.run_id == f"dep@dep:{utc_now().date().isoformat()}"  # not yesterday's
    assert run.possible_duplicate  # found by reading history again, from its day on
    today = datetime.combine(utc_now().date(), datetime.min.time(), UTC)
    assert f"from {(today - timedelta(hours=1)).isoformat()}" in running.log()
    caught_up(ns)
    assert len(dep_runs(ns)) == 1


def test_a_tenants_dependent_after_another_tenants_job_is_dead_lettered(
    ns: Settings, tmp_path: Path, publisher: Publisher, procs: list[CronstreamProcess]
) -> None:
    stray = definition(
        "acme/report",
        tenant="acme",
        schedule=None,
        after=("beta/extract",),
        updated_at=utc_now(),
    )
    publisher.publish(Topics(ns).jobs, stray)  # past the admission (a producer of its own)
    publisher.flush()
    procs.append(processor(ns, tmp_path, "deps-1"))
    (letter,) = eventually(
        lambda: decoded(ns, Topics(ns).dlq, DeadLetter), bool, "the refusal's dead letter"
    )
    assert (letter.stage, letter.job_id) == ("dependencies", "acme/report")
    assert "not the tenant's own: beta/extract" in letter.reason
    succeeded(publisher, ns, "beta/extract")
    caught_up(ns)
    assert dep_runs(ns, "acme/report") == []
