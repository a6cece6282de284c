"""Kafka client factories, configured one way for every process, and the client's
names the rest of cronstream uses (only ``runtime.kafka`` and ``infra`` import
``confluent_kafka``: an import-linter contract).

Every confluent-kafka producer is built here so that ``partitioner=murmur2_random`` (the
Java/aiokafka default) is never forgotten: a key must land on the same partition whoever
produced it, or the scheduler's co-partitioning of jobs and timers breaks.
"""

from __future__ import annotations

from typing import Any, Literal

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from cronstream.runtime.kafka.logs import routed
from cronstream.runtime.kafka.security import admin_security, client_security
from cronstream.runtime.settings import Settings

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "AdminClient",
    "Balance",
    "Consumer",
    "KafkaError",
    "KafkaException",
    "Producer",
    "TopicPartition",
    "consume_ready",
    "consumer_config",
    "group_consumer",
    "kafka_admin",
    "kafka_consumer",
    "kafka_producer",
    "producer_config",
]

# How long a request in flight waits for its answer before the connection is given up
# and what it carried is sent again (to the partition's new leader, when it moved).
# librdkafka's 60 s default outlasted a network partition: with a runs partition's leader
# cut off for 30 s, its produce requests, the group coordinator's commits and heartbeats
# waited for the link to heal, though the controller had moved the leadership after 4 s;
# firing, executions and commits stood still for the whole cut and 25 s after (the
# leader-isolated row). A request is sent again under the idempotent producer's
# sequence numbers: a write is not doubled.
REQUEST_TIMEOUT: dict[str, Any] = {"socket.timeout.ms": 10_000}

PRODUCER_DEFAULTS: dict[str, Any] = {
    **REQUEST_TIMEOUT,
    "partitioner": "murmur2_random",
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "compression.type": "lz4",
}


def producer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        **PRODUCER_DEFAULTS,
        **client_security(settings),
        **routed(),  # librdkafka's lines through logging, where asked (runtime.kafka.logs)
        **overrides,
    }


def kafka_producer(settings: Settings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


def consumer_config(settings: Settings, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **REQUEST_TIMEOUT,
        **client_security(settings),
        **routed(),
        **overrides,
    }
    if "group.id" not in config:
        # Read-only consumers (tail, jobs list) assign partitions themselves; Python's
        # Consumer still wants a group id, which they never commit to (under the topic
        # prefix, where the ACLs of cronstream's user reach). librdkafka connects to its
        # coordinator all the same: one more handshake per reader (runtime.kafka.logs).
        config["group.id"] = f"{settings.topic_prefix}.reader"
    return config


def kafka_consumer(settings: Settings, **overrides: Any) -> Consumer:
    return Consumer(consumer_config(settings, **overrides))


Balance = Literal["count", "per-topic"]


def group_consumer(
    settings: Settings,
    *,
    group: str,
    name: str,
    session_timeout_ms: int,
    balance: Balance = "count",
    **overrides: Any,
) -> Consumer:
    """A member of a cronstream processing group (scheduler, workers): manual commits,
    partitions that move incrementally (a membership change moves only what it must),
    and one of two ways to divide them.

    - ``count`` (the classic protocol, cooperative-sticky): every member gets about as
      many partitions as the others, whatever their topics; the session timeout is the
      member's own (``session_timeout_ms``: how fast a killed member's partitions move).
      Right for one topic, or many topics of one partition each (the admission's
      tenants: range would give every partition 0 to one member).
    - ``per-topic`` (KIP-848's consumer protocol, the broker's ``range`` assignor):
      every member gets its share of each topic. Several topics of many partitions that
      are not equally busy need it: the workers' three runs topics, where count
      balance once gave one of three workers all 12 partitions of ``runs.normal``.
      The broker keeps the session timeout and heartbeat interval as the
      group's configs (librdkafka refuses them here): ``set_group_timeouts`` sets them.
    """
    if balance == "per-topic":
        membership: dict[str, Any] = {
            "group.protocol": "consumer",
            "group.remote.assignor": "range",
        }
    else:
        membership = {
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": max(500, session_timeout_ms // 5),
        }
    return kafka_consumer(
        settings, **{"group.id": group, **membership, "client.id": name, **overrides}
    )


def kafka_admin(settings: Settings, *, superuser: bool = False, **overrides: Any) -> AdminClient:
    """An admin client as cronstream's user, or (``superuser``) as the stack's super user
    on the admin listener: creating topics, users and ACLs."""
    if superuser:
        return AdminClient({**admin_security(settings), **routed(), **overrides})
    config = {"bootstrap.servers": settings.bootstrap_servers, **client_security(settings)}
    return AdminClient({**config, **routed(), **overrides})


def consume_ready(consumer: Any, most: int, timeout: float) -> list[Any]:
    """Up to ``most`` records (or events), waiting at most ``timeout`` for the first and
    not at all for the rest. ``Consumer.consume(most, timeout)`` itself waits out the
    whole timeout unless ``most`` arrive (measured: one record, timeout 2 s -> 2.0 s),
    which put half a second into every API call that waited for an answer."""
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(num_messages=most - 1, timeout=0)] if most > 1 else [first]
