"""`cronstream api` on the real stack: tokens, tenant scoping, errors as JSON,
writes through the real admission, history from Cassandra, what a run printed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronstream.consumers.output import OutputTable
from cronstream.producers.client import JobClient
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import ADMIN, token_path
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import RunOutcome, RunStatus, utc_now
from cronstream.schemas.output import RunOutput
from tests.integration.helpers import CronstreamProcess, cronstream, free_port, wait_http_up
from tests.integration.history_runs import write_history
from tests.integration.tenants import Api

pytestmark = pytest.mark.integration

SPEC = {"cron": "0 3 * * *", "target": "http", "url": "https://example.com/x"}


def eventually(call: Any, check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = call()
        if check(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


def test_tokens_scope_every_call_to_the_callers_tenant(  # long: one story
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, b = two
    with api.client(history_ns, a) as ca, api.client(history_ns, b) as cb:
        for bad in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
            refused = httpx.get(f"{api.url}/v1/jobs", headers=bad)
            assert refused.status_code == 401
            assert refused.json() == {
                "error": "a valid API token is required (Authorization: Bearer)"
            }
        put = ca.put("/v1/jobs/report", json={**SPEC, "tenant": b})
        assert put.status_code == 200, put.text
        assert put.json()["accepted"] is True
        mine = eventually(lambda: ca.get("/v1/jobs/report"), lambda r: r.status_code == 200)
        assert mine.status_code == 200
        assert (mine.json()["job_id"], mine.json()["tenant"]) == ("report", a)
        assert [j["job_id"] for j in ca.get("/v1/jobs").json()] == ["report"]
        # b: a's job does not exist for it, whatever it tries.
        assert cb.get("/v1/jobs").json() == []
        for response in (
            cb.get("/v1/jobs/report"),
            cb.delete("/v1/jobs/report"),
            cb.post("/v1/jobs/report/pause"),
            cb.post("/v1/jobs/report/trigger"),
            cb.post("/v1/runs/report@manual:k/cancel"),
            cb.get("/v1/jobs/report/history"),
            cb.get(f"/v1/jobs/{a}/report"),
        ):
            assert response.status_code == 404, response.text
            assert response.json()["error"].startswith("no job")
        trigger = ca.post("/v1/jobs/report/trigger", headers={"Idempotency-Key": "k1"})
        assert trigger.json()["run_id"] == "report@manual:k1"
        assert ca.post("/v1/jobs/report/pause").status_code == 200
        assert ca.post("/v1/jobs/report/explode").status_code == 404
        paused = eventually(lambda: ca.get("/v1/jobs/report").json(), lambda j: j["paused"])
        assert paused["paused"] is True
        # The tenant parameter is for admins only.
        assert ca.get("/v1/jobs", params={"tenant": b}).status_code == 400
    with api.client(history_ns, ADMIN) as admin:
        everything = {j["job_id"] for j in admin.get("/v1/jobs").json()}
        assert f"{a}/report" in everything
        assert admin.put("/v1/jobs/x", json=SPEC).status_code == 400  # for which tenant?
        assert admin.put("/v1/jobs/x", json=SPEC, params={"tenant": b}).status_code == 200

        # Asked again each time (one response's json() never changes: the list read
        # before the API's view had the job failed a loaded full run).
        def theirs() -> Any:
            return admin.get("/v1/jobs", params={"tenant": b}).json()

        listed = eventually(theirs, lambda jobs: [j["job_id"] for j in jobs] == ["x"])
        assert [j["job_id"] for j in listed] == ["x"]
    # The audit trail: a's accepted commands, as the admission applied them; b's refusals
    # of a's job left nothing (its job id is a's, under a's name, which b never reached).
    shown = cronstream(history_ns, "jobs", "log", f"{a}/report", "--json")
    entries = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [e["action"] for e in entries] == ["PUT", "TRIGGER", "PAUSE"], shown.stderr
    assert {e["principal"] for e in entries} == {f"tenant {a}"}
    assert {e["origin"] for e in entries} == {f"api token of {a} from 127.0.0.1"}
    assert entries[1]["detail"] == f"{a}/report@manual:k1"
    assert {c["field"] for c in entries[0]["changes"]} >= {"target.url", "schedule.expression"}
    by_admin = cronstream(history_ns, "jobs", "log", f"{b}/x", "--json").stdout
    assert json.loads(by_admin)["origin"] == f"api token of {ADMIN} from 127.0.0.1"


def test_refusals_are_json_with_their_reason(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, _ = two
    with api.client(history_ns, a) as ca:
        bad = ca.put("/v1/jobs/x", json={**SPEC, "cron": "not cron"})
        assert bad.status_code == 422
        assert "not cron" in bad.json()["error"]
        assert (
            ca.put(
                "/v1/jobs/x", content=b"[", headers={"content-type": "application/json"}
            ).status_code
            == 422
        )
        for i in range(3):  # the fixture's quota: 3 jobs, 2 triggers a minute
            assert ca.put(f"/v1/jobs/j{i}", json=SPEC).status_code == 200
        over = ca.put("/v1/jobs/j3", json=SPEC)
        assert over.status_code == 429
        assert over.json() == {"error": f"job quota: tenant '{a}' has 3 of its 3 jobs"}
        eventually(lambda: ca.get("/v1/jobs/j0"), lambda r: r.status_code == 200)
        assert [ca.post("/v1/jobs/j0/trigger").status_code for _ in range(3)] == [200, 200, 429]
        assert ca.get("/v1/history", params={"status": "exploded"}).status_code == 422
        assert ca.get("/v1/jobs/j0/history", params={"since": "forever"}).status_code == 422
    spec = httpx.get(f"{api.url}/openapi.json").json()
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/history"} <= set(spec["paths"])


def test_history_through_the_api_is_the_tenants_own(
    history_ns: Settings, two: tuple[str, str], api: Api
) -> None:
    a, b = two
    now = utc_now()
    outcomes = [
        RunOutcome(
            run_id=f"{t}/r@{i}",
            job_id=f"{t}/r",
            tenant=t,
            status=RunStatus.FAILED,
            scheduled_at=now - timedelta(minutes=i + 1),
            recorded_at=now - timedelta(minutes=i),
            error="HttpError: 500",
        )
        for t in (a, b)
        for i in range(3)
    ]
    # An operator's job may be named like a tenant's: its run is not the tenant's.
    outcomes.append(
        RunOutcome(
            run_id=f"{a}/op@9",
            job_id=f"{a}/op",
            tenant="default",
            status=RunStatus.FAILED,
            scheduled_at=now,
            recorded_at=now,
            error="operator's secret output",
        )
    )
    write_history(history_ns, outcomes)
    with api.client(history_ns, a) as ca:
        assert ca.put("/v1/jobs/r", json=SPEC).status_code == 200
        runs = eventually(lambda: ca.get("/v1/jobs/r/history"), lambda r: r.status_code == 200)
        assert [r["run_id"] for r in runs.json()] == ["r@0", "r@1", "r@2"]
        failed = ca.get("/v1/history", params={"status": "failed", "since": "1h"}).json()
        assert {(r["job_id"], r["tenant"]) for r in failed} == {("r", a)}
        attempts = ca.get("/v1/runs/r@1")
        assert attempts.status_code == 200
        assert [r["status"] for r in attempts.json()] == ["FAILED"]
        assert ca.get("/v1/runs/op@9").status_code == 404
    with api.client(history_ns, b) as cb:
        assert cb.get("/v1/jobs/r/history").status_code == 404  # b has no job r
        assert cb.get("/v1/runs/r@1").status_code == 200  # b's own run r@1
        assert {r["tenant"] for r in cb.get("/v1/history", params={"status": "failed"}).json()} == {
            b
        }


def test_a_runs_output_through_the_api_is_the_tenants_own(  # long: one story
    history_ns: Settings,
    two: tuple[str, str],
    api: Api,
    tmp_path: Path,
    procs: list[CronstreamProcess],
) -> None:
    """docs/run-output.md: a's python run executed by a worker, its return value through
    the sink to Cassandra, read by a with its own run id; b, asking the same id, gets its
    own run's output or a 404, never a's; an operator's job named under a is not a's."""
    a, b = two
    ns = history_ns
    for role, args in (("sink", ()), ("worker", ("--grant", f"{a}:python=examples"))):
        proc = CronstreamProcess(ns, tmp_path, role, *args, command=role)
        procs.append(proc)
        proc.wait_live(1, text="assigned")
    spec = {"id": "digest", "target": "python", "callable": "examples.tasks:send_digest"}
    with JobClient(ns) as client:  # as the admission stores a's job
        job = job_from_spec(spec, max_payload_bytes=65536)
        client.put(replace(job, job_id=f"{a}/digest", tenant=a))
        (ran,) = client.trigger_many(f"{a}/digest", ["k"])
    now = utc_now()
    cluster, session = cassandra_session(history_ns, keyspace=history_ns.keyspace)
    try:
        table = OutputTable(session, history_ns.keyspace, ttl_s=3600)
        for run_id, tenant, text in (
            (f"{b}/digest@manual:k", b, f"{b}'s own output"),
            (f"{a}/op@1", "default", "operator's output"),
        ):
            session.execute(
                table.row(
                    RunOutput(
                        run_id=run_id,
                        job_id=run_id.partition("@")[0],
                        tenant=tenant,
                        status="SUCCEEDED",
                        scheduled_at=now,
                        recorded_at=now,
                        output=text,
                    )
                )[1]
            )
        deadline = time.monotonic() + 90
        while not table.of(ran.run_id):
            assert time.monotonic() < deadline, "a's output never reached Cassandra"
            time.sleep(0.5)
    finally:
        cluster.shutdown()
    with api.client(history_ns, a) as ca:
        mine = ca.get("/v1/runs/digest@manual:k/output")
        assert mine.status_code == 200, mine.text
        (item,) = mine.json()
        assert (item["run_id"], item["job_id"], item["status"]) == (
            "digest@manual:k",
            "digest",
            "SUCCEEDED",
        )
        assert item["output"] == f"digest for run {a}/digest@manual:k"
        assert ca.get("/v1/runs/op@1/output").status_code == 404
    with api.client(history_ns, b) as cb:
        (theirs,) = cb.get("/v1/runs/digest@manual:k/output").json()  # b's own run
        assert theirs["output"] == f"{b}'s own output"
        for path in (f"/v1/runs/{a}/digest@manual:k/output", "/v1/runs/nothing@1/output"):
            refused = cb.get(path)
            assert refused.status_code == 404, path
            assert "digest for run" not in refused.text
    with api.client(history_ns, ADMIN) as admin:  # the stored id, any tenant's
        (seen,) = admin.get(f"/v1/runs/{a}/digest@manual:k/output").json()
        assert seen["output"] == item["output"]


def test_the_cli_talks_to_the_api_with_a_token(
    history_ns: Settings, two: tuple[str, str], api: Api, tmp_path: Path
) -> None:
    a, b = two
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(
        "jobs:\n  - {id: x, cron: '0 2 * * *', target: http, url: https://e.x/h}\n"
    )
    via = ["tenant", "--api", api.url, "--token-file"]
    put = cronstream(history_ns, *via, str(token_path(history_ns, a)), "put", str(jobs_file))
    assert put.returncode == 0, put.stderr
    assert '"accepted": true' in put.stdout
    other = cronstream(history_ns, *via, str(token_path(history_ns, b)), "delete", "x")
    assert other.returncode == 4, other.stdout
    assert "no job 'x'" in other.stdout
    forged = tmp_path / "forged"
    forged.write_text("not-a-token")
    refused = cronstream(history_ns, *via, str(forged), "delete", "x")
    assert refused.returncode == 5
    assert "a valid API token is required" in refused.stdout


def test_the_api_process_stops_cleanly_on_sigterm(ns: Settings, tmp_path: Path) -> None:
    """uvicorn re-raises the signal it stopped on: with the default handler `cronstream
    api` died by SIGTERM (exit -15) after a clean stop, which `make run` reported as a
    crash. ``CronstreamProcess.stop`` sends SIGTERM and asserts exit 0."""
    port = free_port()
    proc = CronstreamProcess(ns, tmp_path, "api", "--port", str(port), command="api")
    wait_http_up(f"http://127.0.0.1:{port}", log=lambda: proc.log()[-2000:])
    proc.stop()
    assert "api stopped by signal 15" in proc.log()
