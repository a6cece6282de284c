"""Workers against the real broker and a real HTTP target that records every
Idempotency-Key it receives: crash recovery, retries, dead letters, cancels, priority,
graceful restarts and bad input."""

from __future__ import annotations

import os
import random
import time
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import DeadLetter, Priority, RunOutcome
from cronstream.schemas.events import Target as RunTarget
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from tests.bench.malformed import hostile_values, malformed
from tests.echo import echo_target
from tests.integration.helpers import (
    CronstreamProcess,
    Outage,
    Target,
    decoded,
    read_topic,
    record_count,
)

pytestmark = pytest.mark.integration


def worker(
    ns: Settings, tmp: Path, procs: list[CronstreamProcess], name: str, *args: str
) -> CronstreamProcess:
    proc = CronstreamProcess(ns, tmp, name, "--http-allow", "127.0.0.0/8", *args, command="worker")
    procs.append(proc)
    proc.wait_live(1, text="assigned")
    return proc


def put(ns: Settings, **spec: Any) -> None:
    with JobClient(ns) as client:
        client.put(job_from_spec(spec, max_payload_bytes=65536))


def trigger(ns: Settings, job_id: str, keys: list[str]) -> list[str]:
    with JobClient(ns) as client:
        return [run.run_id for run in client.trigger_many(job_id, keys)]


def outcomes(ns: Settings) -> list[RunOutcome]:
    return decoded(ns, Topics(ns).history, RunOutcome)


def wait_for(ns: Settings, predicate: Any, timeout: float = 90) -> list[RunOutcome]:
    deadline = time.monotonic() + timeout
    while True:
        seen = outcomes(ns)
        if predicate(seen):
            return seen
        if time.monotonic() > deadline:
            statuses = Counter(o.status.value for o in seen)
            raise AssertionError(f"timed out; outcomes so far: {dict(statuses)}")
        time.sleep(1)


def settled(run_ids: list[str], status: str = "SUCCEEDED") -> Any:
    def check(seen: list[RunOutcome]) -> bool:
        done = {o.run_id for o in seen if o.status.value == status}
        return all(r in done for r in run_ids)

    return check


def test_kill9_of_a_worker_mid_run_completes_every_run_with_one_effect(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    put(ns, id="slow", target="http", url=f"{target.url}/slow", timeout="10s")
    a = worker(ns, tmp_path, procs, "a", "--concurrency", "8")
    b = worker(ns, tmp_path, procs, "b", "--concurrency", "8")
    time.sleep(3)  # both members settled
    run_ids = trigger(ns, "slow", [f"k{i}" for i in range(80)])
    time.sleep(2.5)  # a is mid-run
    a.kill9()
    wait_for(ns, settled(run_ids), timeout=120)
    b.stop()
    seen = target.keys("/slow")
    assert set(run_ids) <= set(seen), "a run never reached the target"
    repeats = sum(n - 1 for n in seen.values())
    print(
        f"\nkill -9: {len(run_ids)} runs, every one succeeded; {repeats} executions repeated "
        "(runs in flight on the killed worker), each with the same Idempotency-Key"
    )


def test_retries_stay_within_backoff_bounds_then_dead_letter(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    put(ns, id="bad", target="http", url=f"{target.url}/fail", max_attempts=3, backoff="1s..2s")
    sched = CronstreamProcess(ns, tmp_path, "sched")
    procs.append(sched)
    sched.wait_live(12)
    port = 19500 + os.getpid() % 400
    worker(ns, tmp_path, procs, "w", "--metrics-port", str(port))
    (run_id,) = trigger(ns, "bad", ["once"])
    seen = wait_for(ns, settled([run_id], "DEAD_LETTERED"), timeout=60)
    # The worker's metrics count the same story: 3 starts, 2 retried failures, 1 dead
    # letter (and the same by tenant); one fire-to-start and one duration sample per
    # attempt. Every other run counter exists at 0 from the start (for `increase`).
    counted = _worker_metrics(port)
    assert counted['cronstream_worker_runs_finished_total{status="SUCCEEDED",target="http"}'] == 0
    assert {name: value for name, value in counted.items() if value} == {
        'cronstream_worker_runs_started_total{target="http"}': 3.0,
        'cronstream_worker_runs_finished_total{status="FAILED",target="http"}': 2.0,
        'cronstream_worker_runs_finished_total{status="RETRIED",target="http"}': 2.0,
        'cronstream_worker_runs_finished_total{status="DEAD_LETTERED",target="http"}': 1.0,
        'cronstream_worker_tenant_runs_total{status="FAILED",tenant="default"}': 2.0,
        'cronstream_worker_tenant_runs_total{status="RETRIED",tenant="default"}': 2.0,
        'cronstream_worker_tenant_runs_total{status="DEAD_LETTERED",tenant="default"}': 1.0,
        "cronstream_worker_fire_to_start_seconds_count": 3.0,
        "cronstream_worker_run_duration_seconds_count": 3.0,
        # the first attempt was written here without a due time; each retry has its own,
        # counted under the job's priority
        'cronstream_worker_start_skew_seconds_count{priority="NORMAL"}': 2.0,
    }
    mine = sorted((o for o in seen if o.run_id == run_id), key=lambda o: o.recorded_at)
    # Each attempt's end carries its start (a STARTED record only for one that ran
    # longer than --started-after).
    ended = {o.attempt: o for o in mine if o.status.value in ("FAILED", "DEAD_LETTERED")}
    assert sorted(ended) == [1, 2, 3]
    assert all(o.started_at is not None for o in ended.values())
    failed = {o.attempt: o for o in mine if o.status.value == "FAILED"}
    for attempt, ceiling in ((1, 1.0), (2, 2.0)):
        start = ended[attempt + 1].started_at
        assert start is not None
        wait = (start - failed[attempt].recorded_at).total_seconds()
        assert 0 <= wait <= ceiling + 1.0, f"attempt {attempt + 1} waited {wait:.2f}s"
        assert failed[attempt].next_attempt_at is not None
    assert target.keys("/fail")[run_id] == 3
    with registry_client(ns, writer=True) as registry:
        letters = [
            Codec(registry).decode(r.value, DeadLetter) for r in read_topic(ns, Topics(ns).dlq)
        ]
    (letter,) = [d for d in letters if d.run_id == run_id]
    assert "HTTP 500" in letter.reason
    assert letter.attempt == 3


def _worker_metrics(port: int) -> dict[str, float]:
    """The run counters and histogram counts a worker serves, as 'name{labels}': value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    wanted = ("_runs_started_total", "_runs_finished_total", "_tenant_runs_total", "_seconds_count")
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("cronstream_worker") and sample.name.endswith(wanted):
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return out


def test_cancel_stops_a_running_run_and_prevents_a_queued_one(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    put(ns, id="long", target="shell", command="sleep 60", timeout="2m")
    worker(ns, tmp_path, procs, "w", "--shell-allow", "sleep *")
    (running,) = trigger(ns, "long", ["running"])
    wait_for(ns, settled([running], "STARTED"), timeout=30)
    with JobClient(ns) as client:
        client.cancel(running, reason="test")
        client.cancel("long@manual:queued", reason="before it is queued")
    (queued,) = trigger(ns, "long", ["queued"])
    seen = wait_for(ns, settled([running, queued], "CANCELED"), timeout=30)
    assert not [o for o in seen if o.run_id == queued and o.status.value == "STARTED"]
    cancel = next(o for o in seen if o.run_id == running and o.status.value == "CANCELED")
    assert cancel.duration_ms is not None
    assert cancel.duration_ms < 30_000


def test_graceful_restart_re_executes_nothing(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    put(ns, id="ok", target="http", url=f"{target.url}/ok")
    first = worker(ns, tmp_path, procs, "first")
    run_ids = trigger(ns, "ok", [f"g{i}" for i in range(40)])
    time.sleep(0.5)
    first.stop()  # SIGTERM while runs are in flight or queued
    worker(ns, tmp_path, procs, "second")
    wait_for(ns, settled(run_ids), timeout=60)
    time.sleep(2)
    seen = target.keys("/ok")
    assert set(run_ids) <= set(seen)
    assert max(seen.values()) == 1, f"re-executed: {[k for k, n in seen.items() if n > 1]}"


def test_high_priority_backlog_is_served_before_low(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    put(ns, id="hi", target="http", url=f"{target.url}/ok", priority="high")
    put(ns, id="lo", target="http", url=f"{target.url}/ok", priority="low")
    low = trigger(ns, "lo", [f"l{i}" for i in range(40)])
    high = trigger(ns, "hi", [f"h{i}" for i in range(40)])
    worker(ns, tmp_path, procs, "w", "--concurrency", "1")
    wait_for(ns, settled(low + high), timeout=90)
    order = [key for _, _, key in sorted(target.calls)]
    # Priority orders what has been fetched: the first few starts can come before the
    # first fetch of the high partitions has arrived (seen once in a full make test: 6
    # lows first), so the window starts after them.
    window = order[8:48]
    highs = sum(1 for key in window if key.startswith("hi@"))
    print(f"\npriority: {highs} of executions 9-48 were high (40 high, 40 low queued)")
    assert highs >= 30, order
    assert any(key.startswith("lo@") for key in order[:40]), "low priority was starved"


def test_bad_run_records_are_dead_lettered_and_the_partition_keeps_flowing(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    topics = Topics(ns)
    put(ns, id="ok", target="http", url=f"{target.url}/ok")
    put(ns, id="odd", target="http", url=f"{target.url}/ok")
    publisher = Publisher(ns)
    runs = topics.runs(Priority.NORMAL)
    publisher.produce_raw(runs, "ok", b"\x00\x00\x00\x00\x01junk", [])
    # Every kind of damage the malformed-flood bench uses, five of each (found by review:
    # a 70-bit attempt or an out-of-range instant crashed the worker on that record).
    rng = random.Random(7)
    makers = hostile_values(publisher.codec, runs, topics.jobs, rng)
    hostile = [malformed(publisher.codec, [make], rng) for make in makers for _ in range(5)]
    for k, value in enumerate(hostile):
        publisher.produce_raw(runs, f"bad{k}", value, [])
    publisher.flush()
    with JobClient(ns) as client:
        run = client.trigger("odd", idempotency_key="x")
    strange = replace(run, run_id="odd@manual:ftp", target=RunTarget(type="ftp"))
    publisher.publish(topics.runs(Priority.NORMAL), strange)
    publisher.close()
    good = trigger(ns, "ok", ["after"])
    w = worker(ns, tmp_path, procs, "w")
    wait_for(ns, settled(good), timeout=60)
    seen = wait_for(ns, settled(["odd@manual:ftp"], "FAILED"), timeout=30)
    ftp = [o for o in seen if o.run_id == "odd@manual:ftp" and o.status.value == "FAILED"]
    assert len(ftp) == 1, "an unknown target type must not be retried"
    assert "unknown target type 'ftp'" in (ftp[0].error or "")
    assert ftp[0].next_attempt_at is None
    with registry_client(ns, writer=True) as registry:
        letters = [Codec(registry).decode(r.value, DeadLetter) for r in read_topic(ns, topics.dlq)]
    reasons = defaultdict(list)
    for letter in letters:
        reasons[letter.source_topic].append(letter.reason)
    assert sum(r.startswith("undecodable run") for r in reasons[runs]) == 1 + len(hostile)
    assert w.proc.poll() is None, "the worker died on a hostile record"


def test_a_registry_outage_holds_runs_until_it_answers_then_runs_them(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    """Found by review: a run request whose schema id the worker had not cached yet,
    read while the registry was unreachable, raised RegistryUnavailable out of the loop
    and killed the worker (and a worker started during the outage exited at once)."""
    registry = urllib.parse.urlsplit(ns.registry_url)
    outage = Outage(registry.hostname or "127.0.0.1", registry.port or 80)
    env = {
        "CRONSTREAM_REGISTRY_URL": ns.registry_url.replace(
            f"{registry.hostname}:{registry.port}", f"127.0.0.1:{outage.port}"
        )
    }
    put(ns, id="reg", target="http", url=f"{target.url}/reg")
    outage.down()
    w = CronstreamProcess(
        ns, tmp_path, "w", "--http-allow", "127.0.0.0/8", command="worker", env=env
    )
    procs.append(w)
    time.sleep(4)
    assert w.proc.poll() is None, f"the worker exited:\n{w.log()[-3000:]}"
    assert "waiting for the schema registry" in w.log()
    outage.up()
    w.wait_live(1, text="assigned")
    time.sleep(2)
    outage.down()  # the worker has its own schemas now, not the run requests' one
    run_ids = trigger(ns, "reg", ["a", "b", "c"])
    time.sleep(4)
    assert w.proc.poll() is None, f"the worker died:\n{w.log()[-3000:]}"
    assert "run requests held" in w.log()
    assert not target.keys("/reg"), "ran without reading its run request?"
    outage.up()
    wait_for(ns, settled(run_ids), timeout=60)
    assert set(target.keys("/reg")) == set(run_ids)
    assert record_count(ns, Topics(ns).dlq) == 0, "a good run was dead-lettered"
    w.stop()
    outage.down()


def test_secrets_stay_in_their_tenant_and_out_of_history_the_dlq_and_the_log(  # long: one story
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """Found by probing: a tenant's job got the operators' secret, and a target
    echoing it put the value into the history outcome and the DLQ reason."""
    value = "Bearer op-s3cret-value"
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "hook-token").write_text(value + "\n")
    with echo_target(lambda auth: f"bad credentials: {auth}") as (url, got):
        spec = {
            "target": "http",
            "url": url,
            "headers": {"Authorization": "secret:hook-token"},
            "max_attempts": 1,
        }
        put(ns, id="echo", **spec)
        with JobClient(ns) as client:  # as the admission stores a tenant's job
            client.put(
                replace(
                    job_from_spec({"id": "acme/echo", **spec}, max_payload_bytes=65536),
                    tenant="acme",
                )
            )
        # the tenant may call the echo target (its grant): what stops it is the secret
        w = worker(
            ns,
            tmp_path,
            procs,
            "w",
            "--secrets-dir",
            str(secrets),
            "--grant",
            "acme:http=127.0.0.1",
        )
        (ours,) = trigger(ns, "echo", ["once"])
        (theirs,) = trigger(ns, "acme/echo", ["once"])
        seen = wait_for(ns, settled([ours, theirs], "FAILED"), timeout=60)
    assert got == [value]  # the operators' run sent it; the tenant's run sent nothing
    errors = {o.run_id: o.error or "" for o in seen if o.status.value == "FAILED"}
    assert "HTTP 401" in errors[ours]
    assert "bad credentials: ***" in errors[ours]
    assert "secret 'hook-token' is not configured for tenant 'acme'" in errors[theirs]
    with registry_client(ns, writer=True) as registry:
        letters = [
            Codec(registry).decode(r.value, DeadLetter) for r in read_topic(ns, Topics(ns).dlq)
        ]
        # what the target answered is the attempt's output (docs/run-output.md)
        outputs = {
            o.run_id: o.output
            for o in (
                Codec(registry).decode(r.value, RunOutput)
                for r in read_topic(ns, Topics(ns).run_output)
            )
        }
    reasons = [letter.reason for letter in letters if letter.run_id in (ours, theirs)]
    assert len(reasons) == 2
    assert outputs == {ours: "bad credentials: ***"}  # the tenant's run sent nothing
    for text in [*errors.values(), *reasons, *outputs.values(), w.log()]:
        assert "op-s3cret" not in text
