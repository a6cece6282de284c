"""Each of cronstream's processes connects as its own Kafka user, and the
broker lets it touch only the topics ``schemas.catalog.ROLES`` gives it: a compromised
worker cannot rewrite job definitions, a sink can write nothing but dead letters."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition

from cronstream.runtime.kafka.clients import kafka_consumer, kafka_producer
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import ROLES, Topics

pytestmark = pytest.mark.integration


def _write_each(settings: Settings, topics: list[str]) -> dict[str, KafkaError | None]:
    """Write one record to partition 0 of each topic as ``settings``' user."""
    outcome: dict[str, KafkaError | None] = {}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        outcome[str(msg.topic())] = err

    producer = kafka_producer(settings, **{"message.timeout.ms": 20_000})
    for topic in topics:
        producer.produce(topic, value=b"probe", key=b"probe", partition=0, on_delivery=delivered)
    producer.flush(30)
    return outcome


def _read_each(settings: Settings, topics: list[str]) -> tuple[set[str], dict[str, str]]:
    """The topics ``settings``' user may see (describe), and per visible topic 'read' or
    the broker's refusal, reading partition 0 from the start (a topic it may not
    describe does not exist for it: no answer, no error)."""
    consumer = kafka_consumer(settings, **{"group.id": f"{settings.topic_prefix}.probe-roles"})
    visible = set(consumer.list_topics(timeout=10).topics) & set(topics)
    consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in visible])
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 30
    try:
        while len(seen) < len(visible) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is None:
                seen[str(msg.topic())] = "read"
            elif err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                seen[str(msg.topic())] = err.name()
    finally:
        consumer.close()
    return visible, seen


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_role_writes_and_reads_only_its_own_topics(ns: Settings, role: str) -> None:
    topics = Topics(ns)
    catalog = [name for name, _ in topics.all()]
    assert _write_each(ns, catalog) == dict.fromkeys(catalog)  # the operators' user: all
    as_role = ns.as_role(role)
    assert as_role.kafka_user == f"cronstream-{role}"
    access = ROLES[role]

    writable = {topics.name(spec) for spec in access.writes}
    if not writable and not access.internal and not access.tenant_topics:
        # No WRITE on any topic (the archiver): the broker gives its idempotent producer
        # no producer id, so nothing at all is written.
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            _write_each(as_role, catalog)
    else:
        wrote = _write_each(as_role, catalog)
        assert {t for t, err in wrote.items() if err is None} == writable
        for topic in set(catalog) - writable:
            refusal = wrote[topic]
            assert refusal is not None, topic
            assert refusal.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    readable = {topics.name(spec) for spec in access.reads}
    visible, read = _read_each(as_role, catalog)
    assert visible == readable | writable  # DESCRIBE comes with READ and with WRITE
    assert {t for t, how in read.items() if how == "read"} == readable
    assert set(read) == visible, f"no answer for {visible - set(read)}"
