"""The faults, one function each: inject, wait, restore. Each returns (fault start,
the instant recovery is measured from) as epoch seconds (``docs/chaos.md`` says why
each one measures from where it does)."""

from __future__ import annotations

import io
import json
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import fastavro

from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.events import JobDefinition, Priority, RunRequest, Trigger, utc_now
from cronstream.schemas.ids import manual_run_id
from tests.bench.common import job
from tests.chaos import stack
from tests.chaos.hostile import flood, job_records, run_records
from tests.chaos.load import MANUAL_JOB, SESSION_TIMEOUT_MS, Pipeline, say
from tests.chaos.tenants import TenantFlood

Fault = Callable[[Pipeline, Settings], tuple[float, float]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    fault: Fault
    extra_jobs: int = 0  # daily jobs loaded besides the firing ones
    # Before the members start (the target is up): flags, members, tenants of its own.
    prepare: Callable[[Pipeline, Settings], None] | None = None
    # After the measurement: what the fault left broken put back (a node left down).
    restore: Callable[[Settings], None] | None = None


def kill_and_restart(member: str, role: str) -> Callable[[Pipeline, Settings], tuple[float, float]]:
    """A scenario: kill -9 ``member`` (a ``role``), start it again 5 s later."""

    def fault(p: Pipeline, _stack: Settings) -> tuple[float, float]:
        t = time.time()
        say(f"kill -9 {role} {member}")
        p.members[member].kill9()
        time.sleep(5)
        say(f"restart {role} {member}")
        p.members[member].restart()
        return t, t

    return fault


def scheduler_freeze(p: Pipeline, _stack: Settings) -> tuple[float, float]:
    t = time.time()
    frozen = SESSION_TIMEOUT_MS / 1000 + 8
    say(f"SIGSTOP scheduler s1 for {frozen:.0f} s (session timeout {SESSION_TIMEOUT_MS} ms)")
    p.members["s1"].signal(signal.SIGSTOP)
    time.sleep(frozen)
    say("SIGCONT scheduler s1")
    p.members["s1"].signal(signal.SIGCONT)
    return t, t


def _outage(name: str, seconds: float, during: Callable[[], None] | None = None) -> Fault:
    def fault(_p: Pipeline, stack_settings: Settings) -> tuple[float, float]:
        svc = stack.service(stack_settings, name)
        t = time.time()
        say(f"kill -9 {name}")
        stack.kill9(svc)
        if during is not None:
            during()
        time.sleep(max(0.0, t + seconds - time.time()))
        say(f"restart {name} after {time.time() - t:.0f} s")
        took = stack.start(svc, timeout=300)
        say(f"{name} answers again ({took:.1f} s to start)")
        return t, time.time()

    return fault


def broker_outage(p: Pipeline, s: Settings) -> tuple[float, float]:
    return _outage("kafka", 20)(p, s)


def cassandra_outage(p: Pipeline, s: Settings) -> tuple[float, float]:
    return _outage("cassandra", 120)(p, s)


def registry_outage(p: Pipeline, s: Settings) -> tuple[float, float]:
    """Down for a minute. Meanwhile records arrive written with schema ids no process
    has seen yet (a newer compatible schema of JobDefinition and RunRequest, registered
    before the outage), and a scheduler and a worker are restarted (kill -9)."""
    jobs_v2, runs_v2 = _evolved(p)
    publisher = Publisher(p.settings)

    def during() -> None:
        time.sleep(5)
        say("definition updates and manual runs written with not-yet-seen schema ids")
        manual = p.definition(MANUAL_JOB)
        topic = p.topics.runs(Priority.NORMAL)
        for job_id in p.jobs[:200]:
            changed = replace(p.definition(job_id), payload="v2")
            publisher.producer.produce(
                p.topics.jobs, key=job_id.encode(), value=jobs_v2(changed.to_avro())
            )
        now = utc_now()
        ids = [manual_run_id(MANUAL_JOB, f"v2-{uuid.uuid4().hex}") for _ in range(20)]
        for run_id in ids:
            run = manual.run_request(
                run_id=run_id, scheduled_at=now, fired_at=now, trigger=Trigger.MANUAL
            )
            publisher.producer.produce(topic, key=MANUAL_JOB.encode(), value=runs_v2(run.to_avro()))
        publisher.flush()
        p.triggered.extend((time.time(), r) for r in ids)
        time.sleep(5)
        say("kill -9 and restart scheduler s2 and worker w2 (the registry is down)")
        p.members["s2"].restart()
        p.members["w2"].restart()

    try:
        return _outage("registry", 60, during)(p, s)
    finally:
        publisher.close()


def _evolved(p: Pipeline) -> tuple[Callable[[dict[str, Any]], bytes], ...]:
    """Encoders for JobDefinition and RunRequest in a newer schema (one more optional
    field), registered now under the jobs and runs subjects."""
    encoders = []
    with registry_client(p.settings, writer=True) as registry:
        for topic, event in (
            (p.topics.jobs, JobDefinition),
            (p.topics.runs(Priority.NORMAL), RunRequest),
        ):
            schema = json.loads(schema_json(event.AVRO_NAME))
            schema["fields"].append(
                {"name": "chaos_note", "type": ["null", "string"], "default": None}
            )
            schema_id = registry.register(f"{topic}-value", json.dumps(schema))
            parsed = fastavro.parse_schema(schema)

            def encode(record: dict[str, Any], parsed: Any = parsed, sid: int = schema_id) -> bytes:
                buf = io.BytesIO()
                buf.write(b"\x00" + sid.to_bytes(4, "big"))
                fastavro.schemaless_writer(buf, parsed, {**record, "chaos_note": "v2"})
                return buf.getvalue()

            encoders.append(encode)
    return tuple(encoders)


def hostile_flood(p: Pipeline, _stack: Settings) -> tuple[float, float]:
    t = time.time()
    publisher = Publisher(p.settings, **{"message.max.bytes": 4_000_000})
    say("flooding the jobs topic with 2,000 malformed/hostile records")
    jobs = flood(
        publisher,
        p.topics.jobs,
        job_records(publisher, p.topics, p.jobs, 2000, p.definition),
        per_s=1000,
    )
    say(f"flooding the runs topics with 10,000 ({jobs} on jobs written)")
    runs = 0
    for priority in Priority:
        records = run_records(publisher, p.topics, 3334, p.url)
        runs += flood(publisher, p.topics.runs(priority), records, per_s=1000)
    publisher.close()
    say(f"flood written: {jobs} on jobs, {runs} on runs")
    return t, time.time()


def definitions_changed(p: Pipeline, _stack: Settings) -> tuple[float, float]:
    """Every one of the 100,000 definitions rewritten while they fire: the firing jobs
    with a new payload (same schedule), the daily ones at another time."""
    from cronstream.schemas.events import Target
    from tests.bench.common import put_jobs

    t = time.time()
    firing = len(p.jobs)
    daily = 100_000 - firing
    say(f"rewriting {firing:,} firing and {daily:,} daily definitions")
    target = Target(type="http", url=p.url)
    took = put_jobs(
        p.settings,
        100_000,
        lambda i: (
            p.definition(p.jobs[i], payload=f"changed-{i}")
            if i < firing
            else job(
                f"chaos-daily-{i - firing}", cron=f"{i % 60} {i // 60 % 60} 4 * * *", target=target
            )
        ),
    )
    say(f"100,000 definitions rewritten in {took:.1f} s")
    return t, time.time()


TENANT_FLOOD = TenantFlood()
SCENARIOS = [
    Scenario(
        "worker-kill", "worker kill -9 (restarted after 5 s)", kill_and_restart("w1", "worker")
    ),
    Scenario(
        "scheduler-kill",
        "scheduler kill -9 (restarted after 5 s)",
        kill_and_restart("s1", "scheduler"),
    ),
    Scenario(
        "scheduler-freeze", "scheduler SIGSTOP past its session timeout, SIGCONT", scheduler_freeze
    ),
    Scenario("broker", "broker kill -9, restarted 20 s later", broker_outage),
    Scenario("cassandra", "Cassandra kill -9, down 2 minutes", cassandra_outage),
    Scenario("registry", "registry kill -9, down 1 minute", registry_outage),
    Scenario("flood", "12,000 malformed/hostile records on jobs and runs", hostile_flood),
    Scenario(
        "tenant-flood",
        "a tenant floods its commands topic with 2,000 hostile records",
        TENANT_FLOOD.fault,
        prepare=TENANT_FLOOD.prepare,
    ),
    Scenario(
        "definitions",
        "100,000 definitions changed while firing",
        definitions_changed,
        extra_jobs=98_000,
    ),
]
