"""Replication settings and the bootstrap's rule (infra.replication): the defaults by
the cluster's size, the refusal of factor 1 on a cluster, the topics it would make."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cronstream.consumers.migrations import keyspace_replication
from cronstream.infra.errors import BootstrapError
from cronstream.infra.replication import new_topic, topic_replication, under_replicated
from cronstream.runtime.cassandra import CONSISTENCY
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.kafka.clients import PRODUCER_DEFAULTS, consumer_config, producer_config
from cronstream.runtime.settings import Settings


def settings(**env: str) -> Settings:
    return Settings.from_env({"CRONSTREAM_HOME": "/tmp/cs-replication", **env})


def test_one_node_is_the_default_with_one_copy() -> None:
    s = settings()
    assert s.nodes == 1
    assert s.replication(1) == (1, 1)
    assert s.cassandra_replication == 1
    assert s.cassandra_hosts == ("127.0.0.1",)
    assert s.bootstrap_servers == "127.0.0.1:9092"
    assert s.admin_servers == "127.0.0.1:9095"
    assert (s.kafka_heap_mb, s.cassandra_heap_mb) == (768, 1024)


def test_three_nodes_replicate_three_times_with_two_in_sync() -> None:
    s = settings(
        CRONSTREAM_NODES="3", CRONSTREAM_KAFKA_PORT="19092", CRONSTREAM_KAFKA_ADMIN_PORT="19095"
    )
    assert s.replication(3) == (3, 2)
    assert s.cassandra_replication == 3
    assert s.cassandra_hosts == ("127.0.0.1", "127.0.0.2", "127.0.0.3")
    assert s.bootstrap_servers == "127.0.0.1:19092,127.0.0.1:19102,127.0.0.1:19112"
    assert s.admin_servers == "127.0.0.1:19095,127.0.0.1:19105,127.0.0.1:19115"
    assert (s.kafka_heap_mb, s.cassandra_heap_mb) == (512, 768)


def test_the_default_follows_the_brokers_found() -> None:
    s = settings()  # a production cluster: CRONSTREAM_NODES says nothing about it
    assert s.replication(5) == (3, 2)
    assert s.replication(2) == (2, 1)


def test_explicit_replication_wins() -> None:
    s = settings(CRONSTREAM_REPLICATION="5", CRONSTREAM_MIN_INSYNC="3")
    assert s.replication(7) == (5, 3)
    with pytest.raises(SettingsError, match="CRONSTREAM_REPLICATION"):
        settings(CRONSTREAM_REPLICATION="0")


def test_bootstrap_refuses_factor_one_on_a_cluster() -> None:
    with pytest.raises(BootstrapError, match="CRONSTREAM_ALLOW_RF1"):
        topic_replication(settings(CRONSTREAM_REPLICATION="1"), 3)
    allowed = settings(CRONSTREAM_REPLICATION="1", CRONSTREAM_ALLOW_RF1="1")
    assert topic_replication(allowed, 3) == (1, 1)
    assert topic_replication(settings(), 1) == (1, 1)


def test_bootstrap_refuses_what_cannot_work() -> None:
    with pytest.raises(BootstrapError, match="needs 3 brokers"):
        topic_replication(settings(CRONSTREAM_REPLICATION="3"), 1)
    with pytest.raises(BootstrapError, match="no write could ever succeed"):
        topic_replication(settings(CRONSTREAM_REPLICATION="2", CRONSTREAM_MIN_INSYNC="3"), 3)


def test_new_topics_carry_their_factor_and_min_insync() -> None:
    topic = new_topic("cs.jobs", 12, {"cleanup.policy": "compact"}, (3, 2))
    assert (topic.topic, topic.num_partitions, topic.replication_factor) == ("cs.jobs", 12, 3)
    assert topic.config == {"cleanup.policy": "compact", "min.insync.replicas": "2"}


def test_existing_topics_with_fewer_copies_are_reported() -> None:
    def topic(replicas: int) -> SimpleNamespace:
        return SimpleNamespace(partitions={0: SimpleNamespace(replicas=list(range(replicas)))})

    metadata = SimpleNamespace(topics={"a": topic(1), "b": topic(3)})
    assert under_replicated(metadata, ["a", "b", "gone"], 3) == [
        "a has replication factor 1, the settings want 3"
    ]


def test_producers_wait_for_every_in_sync_replica() -> None:
    assert PRODUCER_DEFAULTS["acks"] == "all"
    assert PRODUCER_DEFAULTS["enable.idempotence"] is True


def test_a_request_to_a_cut_off_leader_is_given_up_long_before_the_cut_heals() -> None:
    """Producers and consumers give a request in flight 10 s (librdkafka's 60 s default
    held every write to a leader cut off for 30 s until the link healed, though its
    leadership had moved after 4 s: the leader-isolated row's 56 s stall)."""
    s = settings(CRONSTREAM_NODES="3", CRONSTREAM_KAFKA_SECURITY="plaintext")
    for config in (producer_config(s), consumer_config(s), consumer_config(s, **{"group.id": "g"})):
        assert s.broker_session_ms < config["socket.timeout.ms"] <= 10_000


def test_keyspaces_use_network_topology_at_local_quorum() -> None:
    assert keyspace_replication(3, "datacenter1") == (
        "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}"
    )
    assert CONSISTENCY == "LOCAL_QUORUM"


@pytest.mark.parametrize(
    ("env", "session", "heartbeat"),
    [
        ({}, 9000, 2250),
        ({"CRONSTREAM_NODES": "3"}, 4000, 1000),
        ({"CRONSTREAM_NODES": "3", "CRONSTREAM_BROKER_SESSION_TIMEOUT": "6s"}, 6000, 1500),
    ],
)
def test_a_lost_broker_is_fenced_after_the_broker_session(
    env: dict[str, str], session: int, heartbeat: int
) -> None:
    """Every write waits for a broker killed -9 until the controller fences it (its
    leaderships and ISR places given up): 4 s on a cluster, Kafka's 9 s on one node."""
    from cronstream.infra.services import Kafka

    lines = Kafka(settings(**env), 1)._replication_lines()
    assert f"broker.session.timeout.ms={session}" in lines
    assert f"broker.heartbeat.interval.ms={heartbeat}" in lines
