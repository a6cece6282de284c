"""Restarts the whole stack and checks nothing was forgotten. Marked ``restarts_stack``:
the suite runs it after every other test (tests/conftest.py).

Logins included: Kafka 4.3.1 loses every SCRAM user when it starts with a metadata log
holding a credential deletion that its ScramDelta.apply meets before any live user
(hash order; CI saw cronstream-app refused after a restart). ``remove_tenant`` retires
a login instead of deleting it; ``tenant-gone1212`` is the first name in any hash
table of up to 1,024 buckets, so a deletion of it would empty the broker's users."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException

from cronstream.infra import stack as stack_mod
from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.producers.client import JobClient
from cronstream.producers.tenant import tenant_settings
from cronstream.runtime.errors import KafkaAuthError
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import kafka_password
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import JobDefinition
from tests.integration.helpers import cronstream

pytestmark = [pytest.mark.integration, pytest.mark.restarts_stack]


def logs_in(settings: Settings) -> bool:
    """Kafka gives ``settings``' user metadata (False: refused or unreachable)."""
    admin = kafka_admin(settings, **{"socket.timeout.ms": 5000})
    try:
        admin.list_topics(timeout=8)
        admin.poll(0)  # serves a latched authentication error
    except (KafkaException, KafkaAuthError):
        return False
    return True


def test_subjects_ids_jobs_and_logins_survive_down_and_up(
    ns: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept, gone = f"keep{uuid.uuid4().hex[:8]}", "gone1212"
    add_tenant(ns, kept)
    add_tenant(ns, gone)
    retired = tenant_settings(ns, gone)
    assert logs_in(retired)
    old_password = kafka_password(retired)
    remove_tenant(ns, gone)
    monkeypatch.setenv("CRONSTREAM_KAFKA_PASSWORD", old_password)  # its removed password
    assert not logs_in(retired)
    monkeypatch.delenv("CRONSTREAM_KAFKA_PASSWORD")
    put = cronstream(
        ns,
        "jobs",
        "put",
        "survivor",
        "--cron",
        "0 3 * * *",
        "--target",
        "http",
        "--url",
        "https://example.com/h",
    )
    assert put.returncode == 0, put.stderr
    subject = f"{Topics(ns).jobs}-value"
    schema = schema_json(JobDefinition.AVRO_NAME)
    with registry_client(ns, writer=True) as registry:
        id_before = registry.lookup(subject, schema)
    assert id_before is not None

    stack_mod.down(ns, say=lambda _m: None)
    assert not any(s.running for s in stack_mod.status(ns))
    stack_mod.up(ns, say=lambda _m: None)

    with registry_client(ns, writer=True) as registry:
        assert subject in registry.subjects()
        assert registry.lookup(subject, schema) == id_before
    with JobClient(ns) as client:
        job = client.get("survivor")
    assert isinstance(job, JobDefinition)
    assert job.describe_schedule() == "cron 0 3 * * *"
    assert logs_in(ns)
    assert logs_in(tenant_settings(ns, kept))
    monkeypatch.setenv("CRONSTREAM_KAFKA_PASSWORD", old_password)
    assert not logs_in(retired)
    monkeypatch.delenv("CRONSTREAM_KAFKA_PASSWORD")
    remove_tenant(ns, kept)
