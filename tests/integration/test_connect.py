"""Kafka Connect on the real stack: the stack's Connect worker (distributed
mode, as the ``connect`` role) sinks a namespace's history into the warehouse
(PostgreSQL) with Debezium's JDBC sink connector, reading our Confluent-wire-format
Avro through the registry with Apicurio's AvroConverter. N outcomes produced, N typed
rows; a compatible schema change (a new optional field) adds a column and loses no row;
records delivered again change nothing (upsert on run, attempt and status)."""

from __future__ import annotations

import io
import json
import struct
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC
from pathlib import Path

import fastavro
import httpx
import pytest

from cronstream.infra.connect import (
    HISTORY_SINK,
    JDBC_SINK,
    connect_client,
    connector_secrets_dir,
    delete_connector,
    ensure_warehouse,
    history_sink_config,
    history_table,
    put_connector,
    warehouse,
)
from cronstream.runtime.consoles import stack_console
from cronstream.runtime.credentials import credentials_dir
from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import RunOutcome, RunStatus, from_ms
from cronstream.schemas.serde import MAGIC
from tests.integration.history_runs import attempt_records
from tests.integration.test_history import publish  # cronstream's own publisher

pytestmark = pytest.mark.integration
JOB = "nightly-export"  # one key: one partition, so the records arrive in order
RUNS, LATER_RUNS, AGAIN = 150, 40, 20


def outcomes(count: int, start_ms: int, first: int = 0) -> list[RunOutcome]:
    """``count`` runs, each STARTED then SUCCEEDED: two rows each."""
    out = []
    for i in range(first, first + count):
        at = start_ms + i * 60_000
        base = dict(
            run_id=f"{JOB}@{i}",
            job_id=JOB,
            scheduled_at=from_ms(at),
            target_type="http",
            worker="w1",
        )
        out += attempt_records(base, RunStatus.SUCCEEDED, at + 3, at + 250)
    return out


@pytest.fixture
def sink(ns: Settings) -> Iterator[tuple[str, str]]:
    """A history connector of the test's namespace, and its table (both gone after)."""
    name, table = f"history-{ns.topic_prefix.replace('.', '-')}", history_table(ns)
    ensure_warehouse(ns)
    put_connector(ns, name, history_sink_config(ns, table=table, name=name))
    yield name, table
    delete_connector(ns, name)
    with closing(warehouse(ns)) as db:
        db.run(f"DROP TABLE IF EXISTS {table}")


def count(ns: Settings, table: str, where: str = "TRUE") -> int:
    with closing(warehouse(ns)) as db:
        if not db.run("SELECT 1 FROM information_schema.tables WHERE table_name = :t", t=table):
            return 0
        return int(db.run(f"SELECT count(*) FROM {table} WHERE {where}")[0][0])


def wait_rows(ns: Settings, name: str, table: str, wanted: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (got := count(ns, table)) < wanted:
        status = _status(ns, name)
        assert time.monotonic() < deadline, f"{got} of {wanted} rows; connector: {status}"
        assert '"FAILED"' not in status, status
        time.sleep(1)
    assert got == wanted


def columns(ns: Settings, table: str) -> dict[str, str]:
    with closing(warehouse(ns)) as db:
        rows = db.run(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = :t",
            t=table,
        )
    return {str(name): str(kind) for name, kind in rows}


def publish_with_region(ns: Settings, events: list[RunOutcome], region: str) -> int:
    """As a newer producer would: RunOutcome plus an optional ``region`` field, a
    compatible (BACKWARD) change registered under the topic's subject. Returns its id."""
    schema = json.loads(schema_json(RunOutcome.AVRO_NAME))
    schema["fields"].append({"name": "region", "type": ["null", "string"], "default": None})
    topic = Topics(ns).history
    with registry_client(ns, writer=True) as registry:
        schema_id = registry.register(f"{topic}-value", json.dumps(schema))
    parsed = fastavro.parse_schema(schema)
    producer = kafka_producer(ns)
    for event in events:
        buf = io.BytesIO()
        buf.write(struct.pack(">bI", MAGIC, schema_id))
        fastavro.schemaless_writer(buf, parsed, {**event.to_avro(), "region": region})
        producer.produce(topic, key=event.job_id.encode(), value=buf.getvalue())
    assert producer.flush(30) == 0
    return schema_id


def test_history_lands_as_typed_rows_through_a_compatible_schema_change(
    ns: Settings, sink: tuple[str, str]
) -> None:
    name, table = sink
    start = (int(time.time()) // 60) * 60_000 - RUNS * 60_000
    first = outcomes(RUNS, start)
    publish(ns, first)
    wait_rows(ns, name, table, len(first))

    # Typed: a column per field, timestamps as timestamps (UTC), numbers as numbers.
    kinds = columns(ns, table)
    assert kinds["scheduled_at"].startswith("timestamp"), kinds
    assert kinds["recorded_at"].startswith("timestamp"), kinds
    assert (kinds["attempt"], kinds["duration_ms"], kinds["status"]) == (
        "integer",
        "bigint",
        "text",
    ), kinds
    sample = first[1]
    with closing(warehouse(ns)) as db:
        row = db.run(
            f"SELECT scheduled_at, finished_at, duration_ms, trigger FROM {table} "
            "WHERE run_id = :r AND status = 'SUCCEEDED'",
            r=sample.run_id,
        )
    assert row == [
        [
            sample.scheduled_at.astimezone(UTC).replace(tzinfo=None),
            sample.finished_at.astimezone(UTC).replace(tzinfo=None)  # type: ignore[union-attr]
            if sample.finished_at
            else None,
            247,
            "SCHEDULE",
        ]
    ]

    # Delivered again (at least once): nothing changes. Then the newer producer.
    publish(ns, first[:AGAIN])
    later = outcomes(LATER_RUNS, start, first=RUNS)
    old_id = registry_id(ns)
    assert publish_with_region(ns, later, "eu-west-3") != old_id
    wait_rows(ns, name, table, len(first) + len(later))
    assert "region" in columns(ns, table)
    assert count(ns, table, "region = 'eu-west-3'") == len(later)
    assert count(ns, table, "region IS NULL") == len(first)


def registry_id(ns: Settings) -> int:
    """The id of cronstream's own RunOutcome schema under the history subject."""
    with registry_client(ns) as registry:
        found = registry.lookup(f"{Topics(ns).history}-value", schema_json(RunOutcome.AVRO_NAME))
    assert found is not None
    return found


def test_the_rest_api_answers_the_operator_alone(stack: Settings) -> None:
    access = stack_console(stack, "connect")
    with httpx.Client(base_url=access.url, timeout=10) as anonymous:
        assert anonymous.get("/connectors").status_code == 401
        assert anonymous.get("/connector-plugins").status_code == 401
        assert anonymous.put("/connectors/probe/config", json={}).status_code == 401
        assert anonymous.delete(f"/connectors/{HISTORY_SINK}").status_code == 401
        assert anonymous.get("/connectors", auth=(access.user, "wrong")).status_code == 401
    with connect_client(stack) as operator:
        assert operator.get("/connectors").status_code == 200


def test_a_connector_overrides_its_group_alone_and_reads_no_file_but_its_secrets(
    ns: Settings,
) -> None:
    """The worker's clients keep their login: a connector may name its consumer group,
    never a JAAS module or a config provider of its clients; ``${file:...}`` reads
    the connectors' secrets folder alone, never the stack's credentials."""
    name = f"probe-{ns.topic_prefix.replace('.', '-')}"
    config = history_sink_config(ns, table=history_table(ns), name=name)
    hostile = {
        **config,
        "name": name,
        "consumer.override.sasl.jaas.config": "com.sun.security.auth.module.JndiLoginModule "
        'required user.provider.url="ldap://127.0.0.1:1/x";',
        "consumer.override.config.providers": "file",
    }
    with connect_client(ns) as operator:
        answer = operator.put(f"/connector-plugins/{JDBC_SINK}/config/validate", json=hostile)
    assert answer.status_code == 200, answer.text
    refused = {c["value"]["name"] for c in answer.json()["configs"] if c["value"]["errors"]}
    assert refused == {"consumer.override.sasl.jaas.config", "consumer.override.config.providers"}
    assert Path(config["connection.password"].split(":")[1]).parent == connector_secrets_dir(ns)

    stolen = credentials_dir(ns) / "cronstream-connect.secret"
    put_connector(ns, name, {**config, "connection.password": f"${{file:{stolen}:x}}"})
    try:
        deadline = time.monotonic() + 60
        while '"FAILED"' not in (status := _status(ns, name)):
            assert time.monotonic() < deadline, status
            time.sleep(1)
        # the provider refused the path: the connector got no password at all
        assert "no password was provided" in status, status
        assert stolen.read_text().strip() not in status
    finally:
        delete_connector(ns, name)


def _status(ns: Settings, name: str) -> str:
    with connect_client(ns) as client:
        return client.get(f"/connectors/{name}/status").text
