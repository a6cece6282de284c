"""How many copies of everything the bootstrap makes: one home for the rule.

Topics (the catalog's, the flows coordinator's changelogs, Kafka Connect's, tenants'):
replication factor and ``min.insync.replicas`` from ``Settings.replication`` for the
brokers the cluster has (3 and 2 from three brokers up, 1 and 1 on one broker), set on
each topic (``new_topic``), so a broker's own defaults never decide. Producers send with
``acks=all`` and idempotence (``runtime.kafka.clients``): a write is acknowledged once
two replicas have it, and a lost broker loses no acknowledged write.

The bootstrap refuses factor 1 on a cluster of three or more brokers unless told to
(``o.ALLOW_RF1`` or ``--allow-rf1``): one broker's disk would again be a
single point of failure, which on a cluster is a mistake rather than a choice.

Cassandra: cronstream's keyspaces with NetworkTopologyStrategy and
``o.CASSANDRA_REPLICATION`` replicas (3 on the 3-node stack), read and written at
LOCAL_QUORUM (``runtime.cassandra``); on more than one replica the logins' keyspace
``system_auth`` gets the same replication (``replicate_system_keyspaces``), or a login
would fail while the one node holding it is down.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka.admin import NewTopic

from cronstream.consumers.migrations import keyspace_replication
from cronstream.infra.errors import BootstrapError
from cronstream.runtime.cassandra import CASSANDRA_ADMIN, cassandra_password
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import CLUSTER_NODES, Settings

# Cassandra's own keyspaces that must outlive a node: logins and roles, and the
# bookkeeping of repairs and views.
SYSTEM_KEYSPACES = ("system_distributed", "system_traces", "system_auth")


def topic_replication(settings: Settings, brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``brokers``;
    BootstrapError when that cannot or should not be."""
    factor, insync = settings.replication(brokers)
    if factor > brokers:
        raise BootstrapError(
            f"replication factor {factor} needs {factor} brokers; the cluster has {brokers} "
            f"({o.REPLICATION.env})"
        )
    if insync > factor:
        raise BootstrapError(
            f"min.insync.replicas {insync} is more than the replication factor {factor}: "
            f"no write could ever succeed ({o.MIN_INSYNC.env})"
        )
    if factor == 1 and brokers >= CLUSTER_NODES and not settings.allow_rf1:
        raise BootstrapError(
            f"replication factor 1 on a cluster of {brokers} brokers: losing any one of "
            f"them would lose data. Unset {o.REPLICATION.env} (3 with min.insync.replicas "
            f"2 is the default here), or say it is meant: {o.ALLOW_RF1.env}=1 or "
            "--allow-rf1"
        )
    return factor, insync


def topic_config(config: dict[str, str], insync: int) -> dict[str, str]:
    """A topic's configs with its ``min.insync.replicas`` (a topic's own setting wins)."""
    return {"min.insync.replicas": str(insync), **config}


def new_topic(
    name: str, partitions: int, config: dict[str, str], replication: tuple[int, int]
) -> NewTopic:
    factor, insync = replication
    return NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=factor,
        config=topic_config(config, insync),
    )


def under_replicated(metadata: Any, names: list[str], factor: int) -> list[str]:
    """Which of the existing topics ``names`` keep fewer than ``factor`` replicas (after
    ``infra.growth.grow_topics`` gave them the rest: none, unless it could not)."""
    short = []
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or not topic.partitions:
            continue
        have = min(len(p.replicas) for p in topic.partitions.values())
        if have < factor:
            short.append(f"{name} has replication factor {have}, the settings want {factor}")
    return short


def replicate_system_keyspaces(settings: Settings, session: Any, timeout: float = 60.0) -> None:
    """As the super user: Cassandra's own keyspaces with the keyspace's replication when
    it is more than one (a fresh cluster keeps them at one replica).

    ``system_auth`` last: its rows (the default role, the super user) were written on
    one replica, so right after its replication grows a quorum read may miss them (the
    super user then lacks its permissions: "no ALTER permission"). They are read at ALL
    until that works (the read repairs them onto every replica), then the super user's
    row written again."""
    if settings.cassandra_replication <= 1:
        return
    replication = keyspace_replication(
        settings.cassandra_replication, settings.cassandra_datacenter
    )
    for keyspace in SYSTEM_KEYSPACES:
        session.execute(f"ALTER KEYSPACE {keyspace} WITH replication = {replication}")
    deadline = time.monotonic() + timeout
    while True:
        try:
            _repair_auth(session)
            if settings.cassandra_security != "none":
                password = cassandra_password(settings, CASSANDRA_ADMIN)
                session.execute(f"ALTER ROLE {CASSANDRA_ADMIN} WITH PASSWORD = %s", [password])
            return
        except Exception as exc:  # the driver's Unauthorized, InvalidRequest, Unavailable
            if time.monotonic() > deadline:
                raise BootstrapError(f"system_auth not readable at ALL: {exc}") from exc
            time.sleep(1.0)


def _repair_auth(session: Any) -> None:
    """Every row of ``system_auth`` read at consistency ALL: rows written while it had
    one replica (the default role, the super user) are copied to the others by the
    read's blocking repair, where a repair tool would otherwise be needed (without it
    ``ALTER ROLE cassandra`` answered "Role cassandra doesn't exist")."""
    from cassandra import ConsistencyLevel
    from cassandra.query import SimpleStatement

    tables = session.execute(
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = 'system_auth'"
    )
    for row in list(tables):
        query = SimpleStatement(
            f"SELECT * FROM system_auth.{row.table_name}",
            consistency_level=ConsistencyLevel.ALL,
            fetch_size=1000,
        )
        for _ in session.execute(query, timeout=60):
            pass
