"""Bootstrap is idempotent and loud about mismatches; status reports every service."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.cimpl import NewTopic

from cronstream.consumers.migrations import load_migrations, migrate
from cronstream.infra.bootstrap import ensure_topics
from cronstream.infra.cassandra_access import admin_session
from cronstream.infra.services import Kafka
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from tests.integration.helpers import cronstream

pytestmark = pytest.mark.integration


def test_bootstrap_twice_creates_nothing_new(ns: Settings) -> None:
    report = ensure_topics(ns)
    assert report.created == []
    # the catalog's 14 topics (triggers-checkpoints the newest), the flows coordinator's 2
    # (found by make test: the config check of an existing internal topic raised
    # KeyError) and Kafka Connect's 3
    assert len(report.existing) == 19
    assert report.mismatches == []


def test_a_topic_with_the_wrong_partition_count_is_reported(stack: Settings) -> None:
    settings = stack.with_namespace(topic_prefix=f"cstest.{uuid.uuid4().hex[:10]}")
    admin = kafka_admin(settings, superuser=True)
    jobs = f"{settings.topic_prefix}.jobs"
    admin.create_topics([NewTopic(jobs, num_partitions=3, replication_factor=1)])[jobs].result()
    try:
        report = ensure_topics(settings)
        assert any(f"{jobs} has 3 partitions, the catalog wants 12" in m for m in report.mismatches)
        assert any(f"{jobs} has cleanup.policy=delete" in m for m in report.mismatches)
    finally:
        topics = Topics(settings)
        names = topics.names()
        for future in admin.delete_topics(names).values():
            future.result()


@pytest.fixture
def keyspace(stack: Settings) -> Iterator[tuple[Settings, object]]:
    name = f"cstest_{uuid.uuid4().hex[:10]}"
    cluster, session = admin_session(stack)  # migrations create tables: the super user
    try:
        yield stack.with_namespace(topic_prefix=stack.topic_prefix, keyspace=name), session
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
        cluster.shutdown()


def test_migrations_apply_once_and_create_the_history_tables(
    keyspace: tuple[Settings, object],
) -> None:
    settings, session = keyspace
    first = migrate(session, settings.keyspace)
    assert [m.version for m in first] == [m.version for m in load_migrations()]
    assert migrate(session, settings.keyspace) == []
    tables = {
        row.table_name
        for row in session.execute(  # type: ignore[attr-defined]
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s",
            (settings.keyspace,),
        )
    }
    assert {"runs_by_job", "runs_by_status", "runs_by_id", "schema_migrations"} <= tables
    # History's year; what runs printed (docs/run-output.md): two weeks.
    for table, days in (("runs_by_job", 365), ("run_output", 14)):
        options = session.execute(  # type: ignore[attr-defined]
            "SELECT default_time_to_live, compaction FROM system_schema.tables "
            "WHERE keyspace_name = %s AND table_name = %s",
            (settings.keyspace, table),
        ).one()
        assert options.default_time_to_live == days * 86400, table
        assert options.compaction["class"].endswith("TimeWindowCompactionStrategy"), table


def test_status_json_reports_every_service(stack: Settings) -> None:
    result = cronstream(stack, "status", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["kafka"]["bootstrap_servers"] == stack.bootstrap_servers
    assert report["schema_registry"]["url"] == stack.registry_url
    assert report["cassandra"]["hosts"] == list(stack.cassandra_hosts)
    assert all(report[s]["ok"] for s in ("kafka", "schema_registry", "cassandra"))


def test_status_exits_non_zero_when_a_service_is_down(stack: Settings) -> None:
    result = cronstream(
        stack,
        "status",
        "--json",
        env={"CRONSTREAM_REGISTRY_URL": "http://127.0.0.1:1/apis/ccompat/v7"},
    )
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["schema_registry"]["ok"] is False
    assert report["kafka"]["ok"] is True


def test_kafka_connect_runtime_is_fetched_with_the_broker(stack: Settings) -> None:
    jars = {p.name.rsplit("-", 1)[0] for p in (Kafka(stack).lib / "jars").glob("*.jar")}
    assert {"connect-runtime", "connect-json", "connect-file", "kafka_2.13"} <= jars
