"""Tenants on the secured broker: identity from authentication, isolation
by ACLs and by the admission, quotas with their reasons visible to the tenant."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import KafkaError, Message

from cronstream.infra.errors import TenantError
from cronstream.infra.quotas import quota_record, quotas_of, set_quotas
from cronstream.infra.tenants import add_tenant, list_tenants, remove_tenant
from cronstream.producers.tenant import TenantClient, tenant_settings
from cronstream.runtime.kafka.clients import kafka_consumer, kafka_producer
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    ControlCommand,
    CronSchedule,
    JobDefinition,
    Priority,
    RunRequest,
    Target,
    Trigger,
)
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import RefusalCode, tenant_user
from tests.integration.helpers import cronstream, read_topic, record_count
from tests.integration.tenants import AdmissionThread

pytestmark = pytest.mark.integration

T0 = datetime(2026, 11, 24, tzinfo=UTC)
E = TypeVar("E", JobDefinition, RunRequest, ControlCommand)


def _job(job_id: str, tenant: str = "default") -> JobDefinition:
    return JobDefinition(
        job_id=job_id,
        tenant=tenant,
        updated_at=T0,
        schedule=CronSchedule(expression="0 2 * * *"),
        target=Target(type="http", url="https://example.com/hook"),
    )


def _decoded(ns: Settings, topic: str, kind: type[E]) -> list[tuple[str, E | None]]:
    """(the job_id header, the decoded value or None) of every record of ``topic``."""
    with registry_client(ns, writer=True) as registry:
        codec = Codec(registry)
        return [
            (r.headers["job_id"], None if r.value is None else codec.decode(r.value, kind))
            for r in read_topic(ns, topic)
        ]


def _stored(ns: Settings) -> dict[str, JobDefinition | None]:
    """The jobs topic's latest value per key."""
    return dict(_decoded(ns, Topics(ns).jobs, JobDefinition))


def test_a_tenant_acts_on_its_own_jobs_only_and_its_tenant_comes_from_its_login(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    a, b = two
    with TenantClient(ns, a) as ca, TenantClient(ns, b) as cb:
        # The record claims tenant b: the admission stamps the tenant of the topic.
        put = ca.put(_job("nightly", tenant=b))
        assert put.accepted, put.reason
        stored = _stored(ns)[f"{a}/nightly"]
        assert stored is not None
        assert (stored.tenant, stored.job_id) == (a, f"{a}/nightly")
        # b cannot reach a's job: in b's namespace there is no such job.
        for refused in (
            cb.delete("nightly"),
            cb.pause("nightly"),
            cb.trigger("nightly"),
            cb.cancel("nightly@manual:k1"),
        ):
            assert not refused.accepted
            assert refused.reason == "no job 'nightly'"
            assert refused.code is RefusalCode.NOT_FOUND
        assert _stored(ns)[f"{a}/nightly"] == stored
        # Nor by naming it with a's prefix: that is b's job "<a>/nightly", which it lacks.
        assert cb.delete(f"{a}/nightly").reason == f"no job '{a}/nightly'"
        # a can.
        trigger = ca.trigger("nightly", "k1")
        assert trigger.accepted
        assert trigger.run_id == "nightly@manual:k1"
        assert ca.cancel("nightly@manual:k1").accepted
        assert ca.pause("nightly").accepted
        assert _stored(ns)[f"{a}/nightly"].paused  # type: ignore[union-attr]
        assert ca.delete("nightly").accepted
    runs = [run for _, run in _decoded(ns, Topics(ns).runs(Priority.NORMAL), RunRequest)]
    assert [(r.run_id, r.tenant, r.trigger) for r in runs if r] == [
        (f"{a}/nightly@manual:k1", a, Trigger.MANUAL)
    ]
    cancels = [c for _, c in _decoded(ns, Topics(ns).control, ControlCommand)]
    assert [c.run_id for c in cancels if c] == [f"{a}/nightly@manual:k1"]
    assert _stored(ns)[f"{a}/nightly"] is None  # the tombstone


def _delivery(settings: Settings, topic: str) -> KafkaError | None:
    errors: list[KafkaError | None] = []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        errors.append(err)

    producer = kafka_producer(settings, **{"message.timeout.ms": 15_000})
    producer.produce(topic, value=b"x", key=b"k", on_delivery=delivered)
    producer.flush(20)
    return errors[0]


def _read_error(settings: Settings, topic: str, group: str) -> KafkaError | None:
    consumer = kafka_consumer(settings, **{"group.id": group})
    try:
        consumer.subscribe([topic])
        for _ in range(40):
            for msg in consumer.consume(num_messages=10, timeout=0.5):
                if msg.error():
                    return msg.error()
        return None
    finally:
        consumer.close()


def test_a_tenant_cannot_write_cronstreams_topics_nor_touch_another_tenants(
    ns: Settings, two: tuple[str, str]
) -> None:
    a, b = two
    topics = Topics(ns)
    as_a = tenant_settings(ns, a)
    for topic in (
        topics.jobs,
        topics.runs(Priority.HIGH),
        topics.control,
        topics.history,
        topics.tenant_commands(b),
        topics.tenant_results(a),
    ):
        error = _delivery(as_a, topic)
        assert error is not None, topic
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, error)
    for topic in (
        topics.history,
        topics.runs(Priority.NORMAL),
        topics.jobs,
        topics.tenant_results(b),
    ):
        # In a group of its own (a group outside it is refused first).
        error = _read_error(as_a, topic, f"{ns.topic_prefix}.t.{a}.probe")
        assert error is not None, topic
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (topic, error)
    for topic in (topics.jobs, topics.runs(Priority.HIGH), topics.control, topics.history):
        assert record_count(ns, topic) == 0
    assert _delivery(as_a, topics.tenant_commands(a)) is None  # its own, which it may
    group = _read_error(as_a, topics.tenant_results(a), f"{ns.topic_prefix}.t.{b}.probe")
    assert group is not None
    assert group.code() == KafkaError.GROUP_AUTHORIZATION_FAILED  # b's groups are b's


def test_quotas_refuse_with_the_reason_on_the_tenants_results_topic(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    a, b = two
    with TenantClient(ns, a) as ca, TenantClient(ns, b) as cb:
        assert all(ca.put(_job(f"j{i}")).accepted for i in range(3))
        over = ca.put(_job("j3"))
        assert not over.accepted
        assert over.reason == f"job quota: tenant '{a}' has 3 of its 3 jobs"
        assert over.code is RefusalCode.QUOTA
        assert ca.put(_job("j0")).accepted  # changing one it has is no new job
        assert cb.put(_job("j0")).accepted  # b's quota is b's own
        assert [ca.trigger("j1").accepted for _ in range(2)] == [True, True]
        late = ca.trigger("j1")
        assert not late.accepted
        assert late.reason is not None
        assert late.reason.startswith(
            "trigger quota: at most 2 manual runs per minute; the next fits in "
        )
        assert cb.trigger("j0").accepted
        assert ca.delete("j2").accepted
        assert ca.put(_job("j3")).accepted  # room again
    assert f"{a}/j3" in _stored(ns)
    assert record_count(ns, Topics(ns).runs(Priority.NORMAL)) == 3


def test_an_unreadable_command_is_answered_and_changes_nothing(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread
) -> None:
    a, _ = two
    with TenantClient(ns, a) as ca:
        producer = ca.publisher.producer
        offsets: list[int] = []
        producer.produce(
            ca.commands,
            value=b"\x00\x00\x00\x00\x01garbage",
            key=b"x",
            on_delivery=lambda _e, m: offsets.append(m.offset() or 0),
        )
        producer.flush(20)
        answer = ca.answer("-", offsets[0], 30)
    assert not answer.accepted
    assert answer.action is None
    assert answer.reason is not None
    assert answer.reason.startswith("undecodable command")
    assert answer.code is RefusalCode.UNREADABLE
    assert record_count(ns, Topics(ns).jobs) == 0


def test_a_tenant_refused_or_unknown_gets_a_clear_error(ns: Settings, tmp_path: Path) -> None:
    with pytest.raises(TenantError, match="reserved"):
        add_tenant(ns, "admin")
    with pytest.raises(TenantError, match="must be 1-32 characters"):
        add_tenant(ns, "Acme.Corp")
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text("- {id: x, cron: '0 2 * * *', target: http, url: https://e.x/h}\n")
    # A tenant never onboarded has no password: the CLI says so, writes nothing.
    run = cronstream(ns, "tenant", "--tenant", "ghost", "put", str(jobs_file))
    assert run.returncode == 2, run.stderr
    assert "no password for Kafka user 'tenant-ghost'" in run.stderr


def test_the_cli_puts_a_tenants_jobs_through_the_admission(
    ns: Settings, two: tuple[str, str], admission: AdmissionThread, tmp_path: Path
) -> None:
    a, _ = two
    assert set(two) <= set(list_tenants(ns))
    jobs_file = tmp_path / "jobs.yaml"
    jobs_file.write_text(
        "- {id: x, cron: '0 2 * * *', target: http, url: https://e.x/h}\n"
        "- {id: y, cron: 'not cron', target: http, url: https://e.x/h}\n"
    )
    run = cronstream(ns, "tenant", "--tenant", a, "put", str(jobs_file))
    assert run.returncode == 2, run.stderr  # the file has an invalid job: nothing is sent
    assert "nothing was written" in run.stderr
    jobs_file.write_text("- {id: x, cron: '0 2 * * *', target: http, url: https://e.x/h}\n")
    run = cronstream(ns, "tenant", "--tenant", a, "put", str(jobs_file))
    assert run.returncode == 0, run.stderr
    assert '"accepted": true' in run.stdout
    assert '"action": "PUT"' in run.stdout
    assert f"{a}/x" in _stored(ns)
    run = cronstream(ns, "tenant", "--tenant", a, "trigger", "nope")
    assert run.returncode == 2
    assert "no job 'nope'" in run.stdout


def test_a_tenants_kafka_quotas_are_set_and_the_broker_throttles_it(ns: Settings) -> None:
    """Kafka client quotas per tenant principal, set by Kafka's own ConfigCommand; a
    tenant producing over its byte rate is throttled by the broker."""
    name = f"q{uuid.uuid4().hex[:8]}"
    quotas = {
        "producer_byte_rate": 262_144,
        "consumer_byte_rate": 524_288,
        "request_percentage": 10,
    }
    add_tenant(ns, name, quotas=quotas)
    try:
        assert quotas_of(ns, tenant_user(name)) == {k: float(v) for k, v in quotas.items()}
        throttles: list[int] = []

        def stats(text: str) -> None:
            for broker in json.loads(text).get("brokers", {}).values():
                if broker.get("throttle", {}).get("max"):
                    throttles.append(broker["throttle"]["max"])

        producer = kafka_producer(
            tenant_settings(ns, name),
            **{"compression.type": "none", "statistics.interval.ms": 500, "stats_cb": stats},
        )
        started = time.monotonic()
        for _ in range(40):  # 4 MB, well over what the quota window lets through at once
            producer.produce(Topics(ns).tenant_commands(name), value=os.urandom(100_000))
            producer.poll(0)
        assert producer.flush(120) == 0
        elapsed = time.monotonic() - started
        producer.poll(1.5)  # one more statistics report
        assert throttles, "the broker never throttled the tenant"
        assert elapsed > 3, elapsed
        # 0 removes one; a quota the user does not have is no error
        set_quotas(ns, tenant_user(name), {"request_percentage": 0, "controller_mutation_rate": 0})
        assert set(quotas_of(ns, tenant_user(name))) == {"producer_byte_rate", "consumer_byte_rate"}
    finally:
        remove_tenant(ns, name)
    assert quotas_of(ns, tenant_user(name)) == {}  # a retired tenant keeps no quotas
    assert not quota_record(ns, tenant_user(name)).exists()
