"""The history sink and queries against the real Kafka and Cassandra: every outcome
lands once per primary key, redelivery rewrites, a 30 s Cassandra outage loses nothing,
rows carry the configured TTL, and queries cross day/hour buckets and page; what a run
printed is kept with its own TTL and read with `history --run ID --output`."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from cronstream.consumers.core.buckets import hour_of, write_timestamp
from cronstream.consumers.history import History
from cronstream.consumers.output import OutputTable
from cronstream.infra import stack as stack_mod
from cronstream.infra.cassandra_node import Cassandra
from cronstream.producers.client import JobClient
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.kafka.clients import kafka_admin, kafka_producer
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import DeadLetter, RunOutcome, RunStatus, to_ms
from cronstream.schemas.serde import Codec
from tests.integration.helpers import (
    CronstreamProcess,
    cronstream,
    group_caught_up,
    read_topic,
    wait_shares,
)
from tests.integration.history_runs import runs_of

pytestmark = pytest.mark.integration
# Long enough for several of the sink's retries (backoff 0.5 s doubling to 10 s); the
# outage's length changes nothing else (it was 60 s: 30 s more of the suite's time).
OUTAGE_S = float(os.environ.get("CRONSTREAM_TEST_CASSANDRA_OUTAGE_S", "30"))


def start_sink(
    ns: Settings, tmp: Path, procs: list[CronstreamProcess], *args: str
) -> CronstreamProcess:
    proc = CronstreamProcess(ns, tmp, f"sink{len(procs)}", *args, command="sink")
    procs.append(proc)
    proc.wait_live(1, text="assigned")
    return proc


TABLES = ("runs_by_id", "runs_by_tenant_status", "runs_by_job")


def expected_rows(outcomes: list[RunOutcome]) -> dict[str, int]:
    """Rows per table: runs_by_status is no longer written (history_tenants indexes
    the tenants of each hour instead)."""
    by_id = {(o.run_id, o.attempt, o.recorded_at, o.status) for o in outcomes}
    by_job = {(o.run_id, o.attempt) for o in outcomes if o.status is not RunStatus.DUPLICATE}
    tenant_hours = {(o.tenant, o.status, hour_of(o.recorded_at)) for o in outcomes}
    return {
        "runs_by_id": len(by_id),
        "runs_by_tenant_status": len(by_id),
        "runs_by_job": len(by_job),
        "runs_by_status": 0,
        "history_tenants": len(tenant_hours),
    }


def table_counts(session: Any) -> dict[str, int]:
    return {
        table: session.execute(f"SELECT count(*) FROM {table}", timeout=60).one()[0]
        for table in (*TABLES, "runs_by_status", "history_tenants")
    }


def publish(ns: Settings, outcomes: list[RunOutcome]) -> None:
    publisher = Publisher(ns)
    try:
        for o in outcomes:
            publisher.publish(Topics(ns).history, o)
    finally:
        publisher.close()


def sink_done(ns: Settings) -> bool:
    """The sink group's committed offsets are at the end of every history partition."""
    return group_caught_up(ns, f"{ns.topic_prefix}.sink", Topics(ns).history)


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_every_outcome_lands_once_per_key_and_redelivery_rewrites(  # long: one story
    history_ns: Settings, session: Any, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    now = to_ms(datetime.now(UTC))
    outcomes = runs_of("lands", 600, now - 3_600_000, step_ms=5000)
    publish(ns, outcomes)
    producer = kafka_producer(ns)
    producer.produce(Topics(ns).history, key=b"lands", value=b"\x00not avro at all")
    producer.flush(10)

    sink = start_sink(ns, tmp_path, procs)
    wait_until(lambda: sink_done(ns), 120, "the sink to commit everything")
    expected = expected_rows(outcomes)
    assert table_counts(session) == expected

    # An attempt recorded STARTED and SUCCEEDED in one millisecond reads SUCCEEDED; the
    # attempt that failed keeps its own row; the DUPLICATE did not change the job view.
    rows = {
        (r.run_id, r.attempt): r
        for r in session.execute(
            "SELECT run_id, attempt, status, error, started_at FROM runs_by_job"
        )
    }
    assert rows[("lands@0", 1)].status == "FAILED"
    assert rows[("lands@0", 1)].error == "HttpError: 500"
    assert rows[("lands@0", 2)].status == "SUCCEEDED"
    assert rows[("lands@7", 1)].status == "SUCCEEDED"
    assert rows[("lands@missed", 1)].status == "MISSED"

    # The configured TTL (CRONSTREAM_HISTORY_TTL, default 30d) is on every table.
    ttl = ns.history_ttl_days * 86400
    for table in TABLES:
        (left,) = session.execute(f"SELECT TTL(trigger) FROM {table} LIMIT 1").one()
        assert ttl - 600 < left <= ttl, (table, left)

    # The undecodable record went to the DLQ, stage sink.
    with registry_client(ns, writer=True) as registry:
        codec = Codec(registry)
        letters = [codec.decode(r.value, DeadLetter) for r in read_topic(ns, Topics(ns).dlq)]
    assert [(d.stage, d.source_topic) for d in letters] == [("sink", Topics(ns).history)]

    # Redelivery: rewind the group to the beginning and run a sink again.
    stamp = session.execute(
        "SELECT WRITETIME(tenant) FROM runs_by_id WHERE run_id = 'lands@3'"
    ).one()[0]
    sink.stop()
    group = f"{ns.topic_prefix}.sink"
    topic = Topics(ns).history
    rewind = [TopicPartition(topic, p, 0) for p in range(ns.partitions)]
    admin = kafka_admin(ns, superuser=True)
    for future in admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, rewind)]
    ).values():
        future.result()
    assert not sink_done(ns)
    start_sink(ns, tmp_path, procs)
    wait_until(lambda: sink_done(ns), 120, "the second sink to commit everything")
    assert table_counts(session) == expected
    again = session.execute(
        "SELECT WRITETIME(tenant) FROM runs_by_id WHERE run_id = 'lands@3'"
    ).one()[0]
    assert again == stamp  # rewritten with the same timestamp: the same cells
    lands3 = [o for o in outcomes if o.run_id == "lands@3"]
    assert stamp == write_timestamp(to_ms(lands3[0].recorded_at), lands3[0].status.value)


def test_two_sinks_each_take_a_share_of_history_and_of_run_output(
    history_ns: Settings, session: Any, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """Each sink of a group owns half of each topic's partitions (counting partitions
    gave one sink all of history and the other all of run-output: the second did
    nothing), and together they write every outcome once."""
    ns = history_ns
    now = to_ms(datetime.now(UTC))
    outcomes = [o for j in range(24) for o in runs_of(f"share{j}", 20, now - 600_000)]
    publish(ns, outcomes)
    first = start_sink(ns, tmp_path, procs)
    second = start_sink(ns, tmp_path, procs)
    topics = Topics(ns)
    for topic in (topics.history, topics.run_output):
        wait_shares([first, second], topic, ns.partitions // 2, timeout=60)
    wait_until(lambda: sink_done(ns), 120, "the two sinks to commit everything")
    assert table_counts(session) == expected_rows(outcomes)


def test_an_outcome_cassandra_would_refuse_is_dead_lettered_and_the_sink_goes_on(
    history_ns: Settings, session: Any, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """Found by the chaos suite: an outcome with a 100 KB run id made Cassandra refuse
    its row (a key over 64 KiB), and the sink stopped on it, every time it restarted."""
    ns = history_ns
    now = to_ms(datetime.now(UTC))
    good = runs_of("after", 3, now - 60_000)
    hostile = replace(good[0], run_id="after@" + "x" * 100_000)
    publish(ns, [hostile, *good])
    sink = start_sink(ns, tmp_path, procs)
    wait_until(lambda: sink_done(ns), 120, "the sink to commit everything")
    assert table_counts(session) == expected_rows(good)
    assert sink.proc.poll() is None
    with registry_client(ns, writer=True) as registry:
        codec = Codec(registry)
        (letter,) = [codec.decode(r.value, DeadLetter) for r in read_topic(ns, Topics(ns).dlq)]
    assert letter.stage == "sink"
    assert "over the limits: run id" in letter.reason


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


@pytest.mark.restarts_stack  # stops the shared Cassandra: alone, after the rest
def test_cassandra_down_for_half_a_minute_loses_nothing(
    history_ns: Settings, session: Any, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    port = 19000 + os.getpid() % 1000
    sink = start_sink(ns, tmp_path, procs, "--metrics-port", str(port))
    stop_publishing = threading.Event()
    published: list[RunOutcome] = []

    def produce() -> None:
        publisher = Publisher(ns)
        i = 0
        try:
            while not stop_publishing.is_set():
                at = to_ms(datetime.now(UTC))
                batch = runs_of(f"outage{i}", 20, at)
                for o in batch:
                    publisher.publish(Topics(ns).history, o)
                publisher.flush()
                published.extend(batch)
                i += 1
                time.sleep(0.2)
        finally:
            publisher.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    cassandra = Cassandra(ns)
    try:
        time.sleep(8)
        cassandra.stop()
        went_down = time.monotonic()
        wait_until(
            lambda: "cronstream_sink_cassandra_up 0.0" in _scrape(port),
            60,
            "the sink to report cassandra down",
        )
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - went_down)))
    finally:
        stack_mod.up(ns, say=lambda _m: None)
    time.sleep(5)
    stop_publishing.set()
    producer.join(60)
    assert sink.proc.poll() is None, sink.log()[-3000:]
    wait_until(lambda: sink_done(ns), 180, "the sink to catch up after the outage")
    assert "cronstream_sink_cassandra_up 1.0" in _scrape(port)
    assert "did not acknowledge" in sink.log() or "unreachable" in sink.log()
    topic_count = len(read_topic(ns, Topics(ns).history))
    assert topic_count == len(published)
    cluster, fresh = cassandra_session(ns, keyspace=ns.keyspace)
    try:
        assert table_counts(fresh) == expected_rows(published)
    finally:
        cluster.shutdown()


def test_what_a_run_printed_is_kept_two_weeks_and_read_with_history_run_output(
    history_ns: Settings, session: Any, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """docs/run-output.md: a failing shell command's output (stdout and stderr) and a
    python callable's return value go from the worker through the sink into run_output,
    with CRONSTREAM_OUTPUT_TTL (14d) as their TTL, not history's year."""
    ns = history_ns
    start_sink(ns, tmp_path, procs)
    worker = CronstreamProcess(ns, tmp_path, "w", "--shell-allow", "sh -c *", command="worker")
    procs.append(worker)
    worker.wait_live(1, text="assigned")
    script = "echo hello from $CRONSTREAM_RUN_ID; echo oops >&2; exit 3"
    specs = [
        {"id": "noisy", "target": "shell", "command": f"sh -c '{script}'", "max_attempts": 1},
        {"id": "digest", "target": "python", "callable": "examples.tasks:send_digest"},
    ]
    with JobClient(ns) as client:
        client.put_many([job_from_spec(spec, max_payload_bytes=65536) for spec in specs])
        noisy, digest = (client.trigger_many(job, ["k"])[0].run_id for job in ("noisy", "digest"))
    table = OutputTable(session, ns.keyspace)
    wait_until(lambda: table.of(noisy) and table.of(digest), 90, "both outputs in Cassandra")
    shown = cronstream(ns, "history", "--run", noisy, "--output")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("--- attempt 1 DEAD_LETTERED ")  # its only attempt failed
    assert lines[1:] == ["hello from noisy@manual:k", "oops"]
    (as_json,) = map(
        json.loads,
        cronstream(ns, "history", "--run", digest, "--output", "--json").stdout.splitlines(),
    )
    assert as_json["output"] == "digest for run digest@manual:k"
    assert (as_json["status"], as_json["target_type"], as_json["dropped"]) == (
        "SUCCEEDED",
        "python",
        None,
    )
    ttl = session.execute("SELECT TTL(output) FROM run_output WHERE run_id = %s", (noisy,)).one()[0]
    assert 13 * 86400 < ttl <= 14 * 86400
    # the outcome holds no output: history's record of the run is as before
    (failed,) = [
        r for r in History(session, ns.keyspace).run(noisy) if r.status.value == "DEAD_LETTERED"
    ]
    assert failed.error is not None
    assert "exit status 3" in failed.error
    missing = cronstream(ns, "history", "--run", "noisy@manual:none", "--output")
    assert missing.returncode == 4
    assert "no output kept for run noisy@manual:none" in missing.stderr
