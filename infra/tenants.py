"""Onboarding tenants: ``python -m cronstream.infra tenants add|list|remove NAME``
(``make tenant``), an operator acting as the super user.

Adding tenant ``acme`` makes, idempotently:

- the Kafka user ``tenant-acme`` (SCRAM-SHA-512) with a random password kept in the
  stack's credentials (``credentials/tenant-acme.secret``, 0600), never printed;
- its two topics, ``<prefix>.t.acme.in`` (commands) and ``<prefix>.t.acme.out``
  (answers), one partition each (one admission decides all of a tenant's commands, in
  order), and their schema subjects;
- an API token for `cronstream api` (``credentials/api-token-acme.secret``; its digest
  in ``api-tokens.json``, ``runtime.tokens``);
- Kafka client quotas for that user (``infra.quotas``: produce and fetch bytes per
  second, request time), from their settings (``infra.quotas``) or the defaults;
- ACLs: WRITE on its commands topic, READ on its answers topic and on consumer groups
  under ``<prefix>.t.acme.`` (literal topics, a prefixed group), and WRITE on the
  topics named ``acme.*`` (its own, which an operator creates: its jobs' kafka targets
  write there as ``tenant-acme``), nothing else. A tenant cannot write cronstream's
  topics, read runs, outcomes or history, or touch another tenant's topics: the
  authorizer refuses (``allow.everyone.if.no.acl.found`` is false);
- READ on the topics ``acme.*`` for the trigger processor's user (``cronstream-triggers``,
  ``trigger_source_acls``): its jobs' event triggers read there.

Removing one retires its user (a random password nobody keeps replaces its own: the
broker's user list still names it, but nobody can log in as it; see ``remove_tenant``
for why it is not deleted), deletes its ACLs, topics and password file; its jobs stay
until deleted (``--purge`` writes their tombstones). Adding it again gives it a new
password.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import AclPermissionType as Permission

from cronstream.infra.bootstrap import create_topics, wait_until_usable
from cronstream.infra.errors import TenantError
from cronstream.infra.kafka_access import (
    admin_acls,
    delete_acls,
    ensure_scram_user,
    scram_user_known,
    set_scram_password,
)
from cronstream.infra.quotas import default_quotas, drop_quotas, set_quotas
from cronstream.infra.replication import new_topic, topic_replication
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import kafka_secret_path
from cronstream.runtime.options import services as o
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import issue_token, revoke_tokens, token_path
from cronstream.schemas.catalog import TENANT_COMMANDS, TENANT_RESULTS, Topics, role_user
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import tenant_of_topic, tenant_problems, tenant_user


def _checked(settings: Settings, tenant: str) -> None:
    problems = tenant_problems(tenant)
    if problems:
        raise TenantError("; ".join(problems))
    if settings.kafka_security == "plaintext":
        raise TenantError(f"tenants need authenticated clients: {o.KAFKA_SECURITY.env}=sasl_ssl")
    if settings.topic_prefix.split(".")[0] == tenant:
        # The tenant's own topics are <tenant>.* (tenant_acls): never cronstream's.
        raise TenantError(f"tenant {tenant!r} would own the topic prefix {settings.topic_prefix!r}")


def egress_prefix(tenant: str) -> str:
    """The topics a tenant owns (an operator creates them): ``<tenant>.``."""
    return f"{tenant}."


def tenant_acls(settings: Settings, tenant: str) -> list[AclBinding]:
    topics, principal = Topics(settings), f"User:{tenant_user(tenant)}"
    literal, prefixed, allow = (
        ResourcePatternType.LITERAL,
        ResourcePatternType.PREFIXED,
        Permission.ALLOW,
    )
    group = f"{settings.topic_prefix}.t.{tenant}."
    grants = [
        (ResourceType.TOPIC, topics.tenant_commands(tenant), literal, AclOperation.WRITE),
        (ResourceType.TOPIC, topics.tenant_commands(tenant), literal, AclOperation.DESCRIBE),
        (ResourceType.TOPIC, topics.tenant_results(tenant), literal, AclOperation.READ),
        (ResourceType.TOPIC, topics.tenant_results(tenant), literal, AclOperation.DESCRIBE),
        (ResourceType.GROUP, group, prefixed, AclOperation.READ),
        # The tenant's own topics, where its jobs' kafka targets write (as the tenant).
        (ResourceType.TOPIC, egress_prefix(tenant), prefixed, AclOperation.WRITE),
        (ResourceType.TOPIC, egress_prefix(tenant), prefixed, AclOperation.DESCRIBE),
    ]
    # The API and the dashboard show the lag of a trigger on the tenant's topics
    # (cronstream.api.triggers): their watermarks and the trigger group's offsets there.
    watchers = [f"User:{role_user(role)}" for role in ("api", "ui")]
    return [
        AclBinding(kind, name, pattern, principal, "*", op, allow)
        for kind, name, pattern, op in grants
    ] + [
        AclBinding(
            ResourceType.TOPIC,
            egress_prefix(tenant),
            prefixed,
            watcher,
            "*",
            AclOperation.DESCRIBE,
            allow,
        )
        for watcher in watchers
    ]


def trigger_source_acls(prefix: str) -> list[AclBinding]:
    """The trigger processor's user may read (and describe) the topics starting with
    ``prefix`` (a tenant's ``<tenant>.``; an operator's topics: ``trigger-sources add``)."""
    principal = f"User:{role_user('triggers')}"
    ops = (AclOperation.READ, AclOperation.DESCRIBE)
    return [
        AclBinding(
            ResourceType.TOPIC,
            prefix,
            ResourcePatternType.PREFIXED,
            principal,
            "*",
            op,
            Permission.ALLOW,
        )
        for op in ops
    ]


def trigger_sources_command(settings: Settings, action: str, prefixes: list[str]) -> int:
    """``python -m cronstream.infra trigger-sources add|remove PREFIX...``: let the trigger
    processor read an operator's source topics (a topic name, or a prefix ending in '.')."""
    if settings.kafka_security == "plaintext":
        raise TenantError(f"ACLs need authenticated clients: {o.KAFKA_SECURITY.env}=sasl_ssl")
    if not prefixes:
        raise TenantError(f"trigger-sources {action} needs at least one topic or prefix")
    admin = kafka_admin(settings, superuser=True)
    bindings = [b for prefix in prefixes for b in trigger_source_acls(prefix)]
    (admin_acls if action == "add" else delete_acls)(admin, bindings, 30.0)
    for prefix in prefixes:
        state = "readable" if action == "add" else "no longer readable"
        print(f"trigger sources: {prefix}* {state} by {role_user('triggers')}")
    return 0


def add_tenant(
    settings: Settings,
    tenant: str,
    *,
    quotas: Mapping[str, int] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Make (or complete) ``tenant``, with Kafka client ``quotas`` when given
    (``infra.quotas``); the topics created."""
    _checked(settings, tenant)
    topics = Topics(settings)
    admin = kafka_admin(settings, superuser=True)
    ensure_scram_user(settings, admin, tenant_user(tenant), timeout)
    names = {
        topics.tenant_commands(tenant): TENANT_COMMANDS,
        topics.tenant_results(tenant): TENANT_RESULTS,
    }
    metadata = admin.list_topics(timeout=timeout)
    replication = topic_replication(settings, len(metadata.brokers))
    new = [
        new_topic(name, 1, dict(spec.config), replication)
        for name, spec in names.items()
        if name not in metadata.topics
    ]
    created = create_topics(admin, new, [], timeout)
    admin_acls(
        admin, tenant_acls(settings, tenant) + trigger_source_acls(egress_prefix(tenant)), timeout
    )
    with registry_client(settings, writer=True) as registry:
        codec = Codec(registry)
        for name, spec in names.items():
            codec.register(f"{name}-value", spec.value_type)
    issue_token(settings, tenant)
    if quotas is not None:
        set_quotas(settings, tenant_user(tenant), quotas)
    # Its login and ACLs are in force on the broker before the tenant is told it exists.
    as_tenant = replace(settings, kafka_user=tenant_user(tenant))
    wait_until_usable(as_tenant, topics.tenant_results(tenant))
    return created


def list_tenants(settings: Settings, *, timeout: float = 30.0) -> list[str]:
    admin = kafka_admin(settings, superuser=True)
    prefix = settings.topic_prefix
    names = (tenant_of_topic(prefix, t) for t in admin.list_topics(timeout=timeout).topics)
    return sorted(n for n in names if n is not None)


def remove_tenant(settings: Settings, tenant: str, *, timeout: float = 30.0) -> None:
    """Retire ``tenant``'s user and delete its ACLs, client quotas and topics (its jobs
    stay)."""
    _checked(settings, tenant)
    admin = kafka_admin(settings, superuser=True)
    delete_acls(
        admin, tenant_acls(settings, tenant) + trigger_source_acls(egress_prefix(tenant)), timeout
    )
    # Retired, not deleted: the login gets a random password nobody keeps. Kafka 4.3.1
    # loses every SCRAM user on its next start once the metadata log holds a credential
    # deletion (ScramDelta.apply drops the whole mechanism when a deletion of a user it
    # has not seen yet comes first in its hash order, then fills a map it no longer
    # holds): CI saw cronstream-app refused after a broker restart.
    user = tenant_user(tenant)
    if scram_user_known(admin, user, timeout):
        set_scram_password(admin, user, secrets.token_bytes(32), timeout)
    drop_quotas(settings, user)
    topics = Topics(settings)
    listed = admin.list_topics(timeout=timeout).topics
    gone = [
        t for t in (topics.tenant_commands(tenant), topics.tenant_results(tenant)) if t in listed
    ]
    for future in admin.delete_topics(gone, operation_timeout=timeout).values():
        future.result()
    kafka_secret_path(settings, user).unlink(missing_ok=True)
    revoke_tokens(settings, tenant)


def tenants_command(settings: Settings, action: str, names: list[str]) -> int:
    """``python -m cronstream.infra tenants ACTION NAMES``: one line per tenant, no secret
    printed."""
    if action == "list":
        for name in list_tenants(settings):
            print(name)
        return 0
    if not names:
        raise TenantError(f"tenants {action} needs at least one NAME")
    for name in names:
        if action == "add":
            created = add_tenant(settings, name, quotas=default_quotas())
            secret = kafka_secret_path(settings, tenant_user(name))
            print(
                f"tenant {name}: Kafka user {tenant_user(name)} (password in {secret}), "
                f"API token in {token_path(settings, name)}, Kafka quotas "
                f"{', '.join(f'{k}={v}' for k, v in default_quotas().items())}, "
                f"topics {', '.join(created) if created else 'already there'}"
            )
        else:
            remove_tenant(settings, name)
            print(f"tenant {name} removed (its jobs stay until deleted)")
    return 0
