"""Client factories for the three services, configured one way for every process.

Every confluent-kafka producer is built here so that ``partitioner=murmur2_random`` (the
Java/aiokafka default) is never forgotten: a key must land on the same partition whoever
produced it, or the scheduler's co-partitioning of jobs and timers breaks.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from cronstream.settings import Settings

PRODUCER_DEFAULTS: dict[str, Any] = {
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
}


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    return {"bootstrap.servers": settings.bootstrap_servers, **PRODUCER_DEFAULTS, **overrides}


def kafka_producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def kafka_consumer(settings: Settings, **overrides: Any) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **overrides,
    }
    if "group.id" not in config:
        # Read-only consumers (tail, jobs list) assign partitions themselves; librdkafka
        # still wants a group id, which they never commit to.
        config["group.id"] = "cronstream-reader"
    return Consumer(config)


def group_consumer(
    settings: Settings, *, group: str, name: str, session_timeout_ms: int, **overrides: Any
) -> Consumer:
    """A member of a cronstream processing group (scheduler, workers): cooperative-sticky
    assignment (a membership change moves only what it must), manual commits, and a
    session timeout that decides how fast a killed member's partitions move."""
    return kafka_consumer(
        settings,
        **{
            "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
            "client.id": name,
            **overrides,
        },
    )


def kafka_admin(settings: Settings, **overrides: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": settings.bootstrap_servers, **overrides})


def cassandra_cluster(hosts: tuple[str, ...], port: int, *, timeout: float = 10.0) -> Any:
    """A cassandra-driver Cluster (not yet connected); the caller shuts it down.

    A host that went down is tried again every 0.5 s doubling to 5 s (the driver's
    default climbs to 10 minutes, which would keep the sink waiting long after a
    restarted Cassandra is back)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy

    profile = ExecutionProfile(
        load_balancing_policy=DCAwareRoundRobinPolicy(), request_timeout=max(timeout, 10.0)
    )
    return Cluster(
        list(hosts),
        port=port,
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=5,
        reconnection_policy=ExponentialReconnectionPolicy(0.5, 5.0),
    )


def cassandra_session(
    settings: Settings, *, timeout: float = 10.0, keyspace: str | None = None
) -> tuple[Any, Any]:
    """A (Cluster, Session) pair on the configured hosts (in ``keyspace`` when given);
    the caller shuts the cluster down."""
    cluster = cassandra_cluster(settings.cassandra_hosts, settings.cassandra_port, timeout=timeout)
    try:
        session = cluster.connect(keyspace)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, session
