"""Event triggers end to end through the CLI: a job applied from a jobs file
with `on:`, a trigger processor, a worker and the sink; a matching record on the source
topic becomes a run the worker executes with the record's fields as its payload, and
`cronstream history` reads back its success; a record the filter refuses runs nothing.
A flow with `on:` starts a flow run per matching record (its node run once)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from cronstream.infra.kafka_access import admin_acls, delete_acls
from cronstream.infra.tenants import trigger_source_acls
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.settings import Settings
from tests.acceptance.test_pipeline import history_json, ok
from tests.integration.helpers import CronstreamProcess, Target, cronstream, eventually

pytestmark = pytest.mark.acceptance


@pytest.fixture
def topic(history_ns: Settings) -> Iterator[str]:
    name = f"cstest-src.{uuid.uuid4().hex[:8]}.orders"
    admin = kafka_admin(history_ns, superuser=True)
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=2, replication_factor=1)]
    ).values():
        future.result(30)
    admin_acls(admin, trigger_source_acls(name), 30)
    yield name
    for future in admin.delete_topics([name], operation_timeout=30).values():
        future.result()
    delete_acls(admin, trigger_source_acls(name))


def test_a_matching_record_runs_the_job_and_history_reads_its_success(
    history_ns: Settings,
    topic: str,
    tmp_path: Path,
    target: Target,
    procs: list[CronstreamProcess],
) -> None:
    ns = history_ns
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""
- id: big-orders
  target: http
  url: {target.url}/orders
  on:
    topic: {topic}
    filter: 'value.amount >= 100 and headers["source"] == "web"'
    fields: {{order: value.id, who: key}}
""")
    procs += [
        CronstreamProcess(ns, tmp_path, "worker", "--http-allow", "127.0.0.0/8", command="worker"),
        CronstreamProcess(ns, tmp_path, "sink", command="sink"),
        CronstreamProcess(ns, tmp_path, "triggers", command="triggers"),
    ]
    ok(cronstream(ns, "jobs", "apply", "-f", str(jobs)))
    assert f"on {topic} if" in ok(cronstream(ns, "jobs", "list"))
    for proc in procs:
        proc.wait_live(1, text="assigned")
    producer = Producer(admin_security(ns))
    for n, (amount, source) in enumerate([(250, "web"), (5, "web"), (300, "app"), (120, "web")]):
        producer.produce(
            topic,
            key=f"cust-{n}",
            headers=[("source", source.encode())],
            value=json.dumps({"id": n, "amount": amount}).encode(),
        )
    assert producer.flush(30) == 0
    rows = eventually(
        lambda: history_json(ns, "big-orders", "--since", "1h"),
        lambda rows: sum(r["status"] == "SUCCEEDED" for r in rows) >= 2,
        "two event runs to succeed",
    )
    done = [r for r in rows if r["status"] == "SUCCEEDED"]
    assert len(done) == 2
    assert all("@evt:" + topic in r["run_id"] for r in done)
    assert len(target.keys("/orders")) == 2  # each run called the target once
    for proc in procs:
        proc.stop()


def test_a_flow_with_on_starts_a_flow_run_per_matching_record(
    history_ns: Settings,
    topic: str,
    tmp_path: Path,
    target: Target,
    procs: list[CronstreamProcess],
) -> None:
    """A flow's `on:` goes on its schedule job: a matching record starts a flow run
    under the record's run id, and its node runs as `FLOW@evt:.../NODE`, once."""
    ns = history_ns
    flows = tmp_path / "flows.yaml"
    flows.write_text(f"""
flows:
- id: ingest
  on:
    topic: {topic}
    filter: 'value.kind == "csv"'
  nodes:
  - name: load
    target: http
    url: {target.url}/load
""")
    procs += [
        CronstreamProcess(ns, tmp_path, "worker", "--http-allow", "127.0.0.0/8", command="worker"),
        CronstreamProcess(
            ns, tmp_path, "flows", "--log-level", "INFO", command="flows-coordinator"
        ),
        CronstreamProcess(ns, tmp_path, "triggers", command="triggers"),
    ]
    ok(cronstream(ns, "flows", "put", "-f", str(flows)))
    for proc, text in zip(procs, ("assigned", "Ready", "assigned"), strict=True):
        proc.wait_live(1, text=text, timeout=120)
    producer = Producer(admin_security(ns))
    for kind in ("json", "csv"):
        producer.produce(topic, key="files", value=json.dumps({"kind": kind}).encode())
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 120
    while not target.keys("/load") and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # nothing more comes
    (run,) = target.keys("/load").elements()
    assert run.startswith(f"ingest@evt:{topic}:"), run  # the csv record's, alone
    assert run.endswith("/load"), run
    for proc in procs:
        proc.stop()
