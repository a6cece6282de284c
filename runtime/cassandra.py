"""Cassandra clients, configured one way for every process (the sink, history queries,
the bootstrap's migrations, health checks)."""

from __future__ import annotations

from typing import Any

from runtime.settings import Settings


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
