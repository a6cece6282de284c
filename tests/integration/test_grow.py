"""A one-node stack grown to three keeps its data and then outlives its first node.

``make up`` then ``make up NODES=3`` on the same data: brokers 2 and 3 start as
observers of the quorum and join it as controllers (``infra.growth.grow``), the
bootstrap gives every topic three replicas by a partition reassignment and the keyspace
three by ``ALTER KEYSPACE`` and a full repair (``infra.growth``). Shown the hard way:
after the growth node 1 (its broker and its Cassandra node) is killed, and every record
and row written on the single node is still read from the other two, and a new record
is still written with ``acks=all`` (every topic at ``min.insync.replicas`` 2). Before
the kill, each Cassandra node holds every row itself (its own partition count).

The stack is one of its own, on the loopback as ``make up NODES=3`` runs it (ports
+20000, ``.stack/grow`` or ``CRONSTREAM_GROW_HOME``), from empty data directories.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cassandra import OperationTimedOut, ReadTimeout, Unavailable
from cassandra.cluster import NoHostAvailable
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource

from cronstream.infra.cassandra_access import admin_session
from cronstream.infra.cassandra_node import Cassandra
from cronstream.infra.growth import nodetool
from cronstream.infra.quorum import voters
from cronstream.infra.services import Kafka
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.settings import REPO_ROOT, Settings
from cronstream.schemas.catalog import Topics
from tests.chaos import stack
from tests.integration.helpers import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

GROW_PORT_OFFSET = 20000
RECORDS = 500


def grow_environment(nodes: int) -> dict[str, str]:
    home = os.environ.get("CRONSTREAM_GROW_HOME") or str(REPO_ROOT / ".stack" / "grow")
    env = stack.chaos_environment(offset=GROW_PORT_OFFSET, home=home, heaps={})
    env.update(
        CRONSTREAM_NODES=str(nodes),
        CRONSTREAM_NETNS="",
        CRONSTREAM_KAFKA_HEAP_MB="",
        CRONSTREAM_CASSANDRA_HEAP_MB="",
    )
    return env


@pytest.fixture(scope="module")
def one_node() -> Iterator[Settings]:
    """The grow stack with one node, from empty data directories; every node it
    grew to stopped afterwards."""
    with stack.fresh(grow_environment(1)) as settings:
        yield settings


def _write_records(settings: Settings, topic: str, keys: list[str]) -> None:
    producer = Producer({**admin_security(settings), "acks": "all", "enable.idempotence": True})
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"grown")
    assert producer.flush(60) == 0


def _partitions_on(settings: Settings, node: int, table: str) -> int:
    """The partitions of ``table`` that Cassandra node ``node`` holds itself, after a
    flush (nodetool's estimate, from its sstables' cardinality sketches: within a few
    per cent)."""
    svc = Cassandra(settings, node)
    flushed = nodetool(svc, "flush", *table.split("."))
    assert flushed.returncode == 0, flushed.stdout + flushed.stderr
    stats = nodetool(svc, "tablestats", table)
    match = re.search(r"Number of partitions \(estimate\): (\d+)", stats.stdout)
    assert match is not None, stats.stdout + stats.stderr
    return int(match.group(1))


def _ids(session: Any, table: str, within: float = 60.0) -> set[int]:
    """Every id of ``table`` (read at the session's LOCAL_QUORUM); read again while the
    coordinator still counts on a killed node (gossip marks it down a few seconds after
    the kill: until then a read waits for its answer and times out)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return {row.id for row in session.execute(f"SELECT id FROM {table}", timeout=30)}
        except (ReadTimeout, Unavailable, OperationTimedOut, NoHostAvailable):
            if time.monotonic() > deadline:
                raise
            time.sleep(2.0)


@pytest.mark.timeout(1800)
def test_a_stack_grown_from_one_node_to_three_keeps_its_data_and_outlives_node_one(
    one_node: Settings,
) -> None:
    jobs = Topics(one_node).jobs
    keys = [f"grow-{i}" for i in range(RECORDS)]
    _write_records(one_node, jobs, keys)
    cluster, session = admin_session(one_node)
    try:
        table = f"{one_node.keyspace}.grow_check"
        session.execute(f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY, v text)")
        for i in range(RECORDS):
            session.execute(f"INSERT INTO {table} (id, v) VALUES (%s, 'grown')", [i])
    finally:
        cluster.shutdown()

    with stack.environment(grow_environment(3)) as three:
        stack.up(three)

        assert voters(Kafka(three, 1)) == {1, 2, 3}
        admin = kafka_admin(three, superuser=True)
        topics = admin.list_topics(timeout=30).topics
        short = {
            f"{name}[{pid}]": (len(p.replicas), len(p.isrs))
            for name, t in topics.items()
            for pid, p in t.partitions.items()
            if len(p.replicas) < 3 or len(p.isrs) < 3
        }
        assert short == {}, short
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
        insync = {
            r.name: int(f.result(30)["min.insync.replicas"].value)
            for r, f in admin.describe_configs(resources).items()
        }
        assert {name for name, n in insync.items() if n != 2} == set(), insync

        # Every row on every node, each node's own count (a LOCAL_QUORUM read below shows
        # only that each row is on one of two; node 3 alone cannot be asked: a login and
        # each permission check read system_auth at QUORUM). Before the repair node 3
        # held the ranges it took over, about a third.
        partitions = {n: _partitions_on(three, n, table) for n in (1, 2, 3)}
        print(f"partitions of {table} held by each Cassandra node: {partitions}")
        assert all(count >= RECORDS * 0.9 for count in partitions.values()), partitions

        stack.kill9(stack.service(three, "kafka"))
        stack.kill9(stack.service(three, "cassandra"))
        assert {r.key.decode() for r in read_topic(three, jobs) if r.key} == set(keys)
        _write_records(three, jobs, ["after-node-1"])
        cluster, session = admin_session(three)
        try:
            assert _ids(session, table) == set(range(RECORDS))
            replication = session.execute(
                "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
                [three.keyspace],
            ).one()
            assert dict(replication.replication)[three.cassandra_datacenter] == "3"
        finally:
            cluster.shutdown()
