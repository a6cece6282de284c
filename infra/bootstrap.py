"""Create cronstream's topics, schema subjects and Cassandra keyspace; safe to re-run.

Topics come from ``schemas.catalog``. An existing topic whose partition count or
cleanup policy differs from the catalog is reported as an error and left alone: adding
partitions would move job ids to other partitions (breaking the co-partitioning of jobs
and timers), so that change is for an operator to make deliberately.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from cronstream.consumers.migrations import migrate
from cronstream.infra.cassandra_access import admin_session, ensure_cassandra_access, grant_keyspace
from cronstream.infra.errors import BootstrapError
from cronstream.infra.growth import grow_keyspace, grow_topics
from cronstream.infra.kafka_access import ensure_access
from cronstream.infra.objects import ensure_lakehouse
from cronstream.infra.replication import (
    new_topic,
    replicate_system_keyspaces,
    topic_replication,
    under_replicated,
)
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.errors import KafkaAuthError
from cronstream.runtime.kafka.clients import kafka_admin, kafka_consumer
from cronstream.runtime.lakehouse import lakehouse
from cronstream.runtime.options import services as o
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.catalog import (
    TENANT_COMMANDS,
    TENANT_RESULTS,
    Topics,
)
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import tenant_of_topic

COMPATIBILITY = "BACKWARD"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicReport:
    created: list[str]
    existing: list[str]
    mismatches: list[str]
    grown: list[str]  # topics given more replicas (a stack grown to more brokers)


def _say(msg: str) -> None:
    print(f"[bootstrap] {msg}", file=sys.stderr, flush=True)


def ensure_topics(
    settings: Settings, *, timeout: float = 30.0, say: Callable[[str], None] = _say
) -> TopicReport:
    """The catalog's topics under ``settings``' prefix, cronstream's user's access to
    them (``ensure_access``), and every topic of the cluster at the replication the
    brokers allow (``infra.growth.grow_topics``: a stack grown from one node)."""
    topics = Topics(settings)
    admin = kafka_admin(settings, superuser=True)
    ensure_access(settings, admin, timeout=timeout)
    metadata = admin.list_topics(timeout=timeout)
    replication = topic_replication(settings, len(metadata.brokers))
    existing, to_create = [], []
    for name, (partitions, config) in topics.layout().items():
        current = metadata.topics.get(name)
        if current is None or current.error is not None:
            to_create.append(new_topic(name, partitions, dict(config), replication))
            continue
        existing.append(name)
    created = create_topics(admin, to_create, existing, timeout)
    grown = grow_topics(settings, admin, replication, say)
    mismatches = _mismatches(settings, admin, existing, timeout)
    if grown:  # the listing above has their replicas from before
        metadata = admin.list_topics(timeout=timeout)
    mismatches += under_replicated(metadata, existing, replication[0])
    wait_until_usable(settings, topics.jobs)
    return TopicReport(created=created, existing=existing, mismatches=mismatches, grown=grown)


# How long a login or ACL the controller has committed may take to reach the broker's
# authorizer. Usually milliseconds; in make test (2 cores, hundreds of ACL changes) the
# broker once applied new ACLs a minute late, and writes in that minute failed with
# TOPIC_AUTHORIZATION_FAILED.
USABLE_WITHIN_S = 120.0


def wait_until_usable(settings: Settings, topic: str, timeout: float = USABLE_WITHIN_S) -> None:
    """Return once ``settings``' Kafka user logs in and sees ``topic`` (its ACLs are in
    force on the broker, not only committed); BootstrapError after ``timeout``."""
    if settings.kafka_security == "plaintext":
        return
    deadline = time.monotonic() + timeout
    while True:
        why = _usable(settings, topic)
        if why is None:
            return
        if time.monotonic() > deadline:
            raise BootstrapError(
                f"Kafka user {settings.kafka_user} still cannot use {topic} after "
                f"{timeout:.0f} s: {why}"
            )
        time.sleep(0.5)


def _usable(settings: Settings, topic: str) -> str | None:
    """None when ``settings``' user sees ``topic``, else why not."""
    consumer = kafka_consumer(settings, **{"group.id": f"{settings.topic_prefix}.probe"})
    try:
        found = consumer.list_topics(topic, timeout=5).topics.get(topic)
        consumer.poll(0)  # serves a refused login (KafkaAuthError)
    except (KafkaException, KafkaAuthError) as exc:
        return str(exc)
    finally:
        with contextlib.suppress(KafkaException, KafkaAuthError, RuntimeError):
            consumer.close()
    if found is None or found.error is not None:
        return f"metadata: {found.error if found else 'no such topic'}"
    return None


def create_topics(
    admin: AdminClient, to_create: list[NewTopic], existing: list[str], timeout: float
) -> list[str]:
    """Create ``to_create``; a topic someone else created meanwhile joins ``existing``."""
    created: list[str] = []
    if not to_create:
        return created
    for name, future in admin.create_topics(to_create, operation_timeout=timeout).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
                existing.append(name)  # a concurrent bootstrap won the race
            else:
                raise BootstrapError(f"creating topic {name}: {exc}") from exc
    return created


def _mismatches(
    settings: Settings, admin: AdminClient, existing: list[str], timeout: float
) -> list[str]:
    """How topics that were already there differ from the catalog."""
    layout = Topics(settings).layout()
    mismatches = []
    # Partition counts are checked on fresh metadata: a topic another client created a
    # moment ago (TOPIC_ALREADY_EXISTS above) may be missing from the first listing.
    for name in existing:
        have = _partition_count(admin, name, timeout)
        want = layout[name][0]
        if have != want:
            mismatches.append(
                f"{name} has {have} partitions, the catalog wants {want} "
                f"({o.PARTITIONS.env}={settings.partitions})"
            )
    # Cleanup policy matters for the jobs topic (compaction is what makes it the source
    # of truth); check every configured key of the topics that already existed.
    for name, actual in _describe_configs(admin, existing).items():
        for key, want_value in layout[name][1].items():
            entry = actual.get(key)
            if entry is not None and entry.value != want_value:
                mismatches.append(f"{name} has {key}={entry.value}, the catalog wants {want_value}")
    return mismatches


def _partition_count(admin: AdminClient, name: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
        if meta is not None and meta.error is None and meta.partitions:
            return len(meta.partitions)
        if time.monotonic() > deadline:
            raise BootstrapError(f"topic {name} exists but its metadata never arrived")
        time.sleep(0.2)


def _describe_configs(admin: AdminClient, names: list[str]) -> dict[str, Any]:
    """Topic configs by name; retried while a just-created topic is still propagating."""
    result: dict[str, Any] = {}
    pending = list(names)
    for attempt in range(10):
        if not pending:
            break
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in pending])
        retry = []
        for resource, future in futures.items():
            try:
                result[resource.name] = future.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART or attempt == 9:
                    raise BootstrapError(f"describing topic {resource.name}: {exc}") from exc
                retry.append(resource.name)
        pending = retry
        if pending:
            time.sleep(0.5)
    return result


def ensure_subjects(settings: Settings) -> dict[str, int]:
    """Register every topic's value schema and pin BACKWARD compatibility per subject."""
    topics = Topics(settings)
    registry = registry_client(settings, writer=True)
    codec = Codec(registry)
    ids = {}
    try:
        for _, spec in topics.all():
            subject = topics.subject(spec)
            registry.set_compatibility(subject, COMPATIBILITY)
            if not registry.compatible(subject, schema_json(spec.value_type.AVRO_NAME)):
                raise BootstrapError(
                    f"schema of {subject} is not {COMPATIBILITY}-compatible with the "
                    "registered version: evolve it with defaults on new fields"
                )
            ids[subject] = codec.register(subject, spec.value_type)
    finally:
        registry.close()
    return ids


def ensure_tenant_subjects(settings: Settings) -> int:
    """Every onboarded tenant's two subjects (commands, answers) at the current schemas:
    a tenant added before a schema gained a field (TenantResult's ``code``) would
    otherwise make the admission, which may read the registry but not write it, fail to
    publish its answers. Returns the tenants brought up to date."""
    admin = kafka_admin(settings, superuser=True)
    listed = admin.list_topics(timeout=30).topics
    topics = Topics(settings)
    tenants = sorted(
        {t for t in (tenant_of_topic(settings.topic_prefix, name) for name in listed) if t}
    )
    with registry_client(settings, writer=True) as registry:
        codec = Codec(registry)
        for tenant in tenants:
            codec.register(f"{topics.tenant_commands(tenant)}-value", TENANT_COMMANDS.value_type)
            codec.register(f"{topics.tenant_results(tenant)}-value", TENANT_RESULTS.value_type)
    return len(tenants)


def ensure_keyspace(settings: Settings, say: Callable[[str], None] = _say) -> list[str]:
    """The keyspace migrated, at the replication the settings want (raised and repaired
    on a stack grown from one node: ``infra.growth.grow_keyspace``), and readable and
    writable by cronstream's user (as the super user, ``infra.cassandra_access``).
    Returns the migrations applied."""
    if settings.cassandra_security == "none":
        cluster, session = cassandra_session(settings)
    else:
        cluster, session = admin_session(settings)
    try:
        replicate_system_keyspaces(settings, session)
        applied = migrate(
            session,
            settings.keyspace,
            settings.cassandra_replication,
            settings.cassandra_datacenter,
        )
        grow_keyspace(settings, session, settings.keyspace, say)
        if settings.cassandra_security != "none":
            ensure_cassandra_access(settings, session)
            grant_keyspace(settings, session, settings.keyspace)
        return [f"{m.version:03d}_{m.name}" for m in applied]
    finally:
        cluster.shutdown()


def bootstrap(settings: Settings, say: Callable[[str], None] = _say) -> None:
    report = ensure_topics(settings, say=say)
    say(
        f"topics: {len(report.created)} created, {len(report.existing)} already there "
        f"(prefix {settings.topic_prefix!r})"
        + (f", {len(report.grown)} given more replicas" if report.grown else "")
    )
    if report.mismatches:
        raise BootstrapError(
            "existing topics differ from the catalog (schemas/catalog.py); fix them by hand "
            f"or use another {o.TOPIC_PREFIX.env}:\n  " + "\n  ".join(report.mismatches)
        )
    ids = ensure_subjects(settings)
    say(f"schemas: {len(ids)} subjects registered ({COMPATIBILITY} compatibility)")
    tenants = ensure_tenant_subjects(settings)
    if tenants:
        say(f"schemas: the subjects of {tenants} tenants at the current schemas")
    applied = ensure_keyspace(settings, say)
    say(
        f"cassandra: keyspace {settings.keyspace!r}, "
        + (f"applied {', '.join(applied)}" if applied else "migrations up to date")
    )
    ensure_lakehouse(settings)
    say(f"archive: Iceberg table {lakehouse(settings).table!r} (bucket and catalog ready)")
