"""A tenant's kafka targets write as the tenant: on the real broker, tenant A's
job produces to A's own topics (``a.*``) and is refused B's, the worker's own rights
never lent; a tenant without credentials is refused before anything is written."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import NewTopic

from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.egress import TenantProducers
from cronstream.consumers.executors.kafka import KafkaExecutor, TopicPolicy
from cronstream.infra.bootstrap import wait_until_usable
from cronstream.infra.errors import TenantError
from cronstream.infra.tenants import add_tenant
from cronstream.runtime.credentials import credentials_dir
from cronstream.runtime.kafka.clients import kafka_admin, kafka_producer
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import Target
from cronstream.schemas.tenancy import tenant_user

pytestmark = pytest.mark.integration


def _context(tenant: str) -> RunContext:
    return RunContext(
        run_id=f"{tenant}/j@1",
        job_id=f"{tenant}/j",
        attempt=1,
        scheduled_at=datetime.now(UTC),
        payload='{"n": 1}',
        tenant=tenant,
        deadline=time.monotonic() + 20,
    )


def _keys(ns: Settings, topic: str) -> list[bytes | None]:
    """The record keys of a one-partition topic, read as the super user."""
    consumer = Consumer(
        {**admin_security(ns), "group.id": "cstest-egress", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        if high <= low:
            return []
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        keys: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(keys) < high - low and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                keys.append(msg.key())
        return keys
    finally:
        consumer.close()


def test_each_tenant_writes_its_own_topics_only(
    ns: Settings, two: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two
    mine, theirs = f"{a}.events", f"{b}.events"
    admin = kafka_admin(ns, superuser=True)
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1) for t in (mine, theirs)]
    ).values():
        future.result(30)
    # The controller committed the topic; the broker's metadata may apply it later (under
    # CI's load, after the executor asked: "does not exist").
    wait_until_usable(replace(ns, kafka_user=tenant_user(a)), mine)
    worker_producer = kafka_producer(ns)
    tenants = TenantProducers(ns, credentials_dir(ns))
    executor = KafkaExecutor(worker_producer, TopicPolicy(own=frozenset()), tenants)
    try:
        assert executor.execute(Target(type="kafka", topic=mine), _context(a)) == (
            f"produced to {mine} partition 0 offset 0"
        )
        with pytest.raises(TargetInvalid) as refused:
            executor.execute(Target(type="kafka", topic=theirs), _context(a))
        assert f"tenant {a!r} may not write to {theirs!r}" in str(refused.value)
        # Credentials elsewhere: a tenant without a file there is refused at once.
        elsewhere = KafkaExecutor(
            worker_producer, TopicPolicy(own=frozenset()), TenantProducers(ns, tmp_path)
        )
        with pytest.raises(TargetInvalid, match="no Kafka credentials for tenant"):
            elsewhere.execute(Target(type="kafka", topic=mine), _context(a))
    finally:
        tenants.close()
        worker_producer.flush(10)
    assert _keys(ns, mine) == [f"{a}/j@1".encode()]
    assert _keys(ns, theirs) == []
    for future in admin.delete_topics([mine, theirs], operation_timeout=30).values():
        future.result()


def test_a_tenant_cannot_be_named_like_the_topic_prefix(ns: Settings) -> None:
    first = ns.topic_prefix.split(".")[0]
    with pytest.raises(TenantError, match="would own the topic prefix"):
        add_tenant(ns, first)
