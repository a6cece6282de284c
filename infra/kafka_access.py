"""Who may use cronstream's Kafka topics: the operators' and the roles' SCRAM users and
their ACLs (``schemas.catalog.ROLES``), made by the bootstrap (``infra.bootstrap``) and
by a tenant's onboarding (``infra.tenants``)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from cronstream.infra.errors import BootstrapError
from cronstream.infra.security import ensure_client_certificate, ensure_secret, write_private
from cronstream.runtime.credentials import security_dir, tls_dir
from cronstream.runtime.kafka.security import (
    BENCH_PLAIN_PREFIX,
    client_properties,
    kafka_secret_path,
)
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import ADMIN, issue_token
from cronstream.schemas.catalog import (
    ROLES,
    TENANT_TOPICS,
    RoleAccess,
    Topics,
    role_user,
)


def ensure_access(settings: Settings, admin: AdminClient, *, timeout: float = 30.0) -> None:
    """The operators' Kafka user (``settings.kafka_user``) exists with the stack's
    password for it and may read, write and describe every topic and group under the
    topic prefix (prefixed ACLs on ``<prefix>.``: a prefix never reaches another one
    that merely starts the same); each of cronstream's roles has its own user
    (``cronstream-<role>``) that may use the topics ``schemas.catalog.ROLES`` gives it
    and nothing else; anonymous plaintext clients may use ``bench-plain.`` only.
    Idempotent."""
    if settings.kafka_security == "plaintext":
        return
    user = settings.kafka_user
    # The roles' users before the one wait_until_usable waits for.
    ensure_scram_users(
        settings, admin, list(dict.fromkeys([*map(role_user, ROLES), user])), timeout
    )
    admin_acls(admin, namespace_acls(settings) + _bench_plain_access(), timeout)
    if (tls_dir(settings) / "ca-key.pem").exists():  # the local stack's CA: certificates
        # For kcat -F (README, "Security").
        ensure_client_certificate(settings, user)
        issue_token(settings, ADMIN)  # for `cronstream api` (runtime.tokens)
        properties = security_dir(settings) / f"{user}.properties"
        write_private(properties, client_properties(settings).encode())


def ensure_scram_user(
    settings: Settings, admin: AdminClient, user: str, timeout: float = 30.0
) -> None:
    ensure_scram_users(settings, admin, [user], timeout)


def ensure_scram_users(
    settings: Settings, admin: AdminClient, users: list[str], timeout: float = 30.0
) -> None:
    """Kafka users ``users`` exist, each with the password the stack keeps for it (made
    at first use; a user the broker knows under a password the stack does not keep, as
    a retired tenant's, gets the kept one). One describe for all. Idempotent."""
    fresh = {user for user in users if not kafka_secret_path(settings, user).exists()}
    passwords = {user: ensure_secret(settings, user) for user in users}
    known = scram_users_known(admin, [u for u in users if u not in fresh], timeout)
    for user in users:
        if user in fresh or user not in known:
            set_scram_password(admin, user, passwords[user].encode(), timeout)


def scram_user_known(admin: AdminClient, user: str, timeout: float = 30.0) -> bool:
    return user in scram_users_known(admin, [user], timeout)


def scram_users_known(admin: AdminClient, users: list[str], timeout: float = 30.0) -> set[str]:
    """Which of ``users`` the broker has SCRAM credentials for (one request)."""
    if not users:  # an empty list would describe every user
        return set()
    described = admin.describe_user_scram_credentials(users)
    assert isinstance(described, dict)
    known = set()
    for user, future in described.items():
        try:
            if future.result(timeout).scram_credential_infos:
                known.add(user)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.RESOURCE_NOT_FOUND:
                raise BootstrapError(f"describing Kafka user {user}: {exc}") from exc
    return known


def set_scram_password(admin: AdminClient, user: str, password: bytes, timeout: float) -> None:
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password
    )
    admin.alter_user_scram_credentials([upsert])[user].result(timeout)


def namespace_acls(settings: Settings) -> list[AclBinding]:
    """Every ACL of ``settings``' topic prefix: each role's (``_role_access``), then the
    operators' user's, which may read, write and describe every topic and group under
    the prefix, and the groups' configs (``<prefix>.``: a prefix never reaches another
    that merely starts the same)."""
    topics = Topics(settings)
    bindings = [
        binding
        for role, access in ROLES.items()
        for binding in _role_access(topics, access, f"User:{role_user(role)}")
    ]
    allow, prefixed = AclPermissionType.ALLOW, ResourcePatternType.PREFIXED
    # Groups' configs too: a worker run as this user sets its group's session timeout.
    ops = {
        ResourceType.TOPIC: (
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
        ),
        ResourceType.GROUP: (
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS,
        ),
    }
    principal = f"User:{settings.kafka_user}"
    bindings += [
        AclBinding(kind, f"{settings.topic_prefix}.", prefixed, principal, "*", op, allow)
        for kind, kind_ops in ops.items()
        for op in kind_ops
    ]
    return bindings


def _bench_plain_access() -> list[AclBinding]:
    """Anonymous plaintext clients: the ``bench-plain.`` topics and groups, nothing else."""
    allow, prefixed = AclPermissionType.ALLOW, ResourcePatternType.PREFIXED
    return [
        AclBinding(
            kind, BENCH_PLAIN_PREFIX, prefixed, "User:ANONYMOUS", "*", AclOperation.ALL, allow
        )
        for kind in (ResourceType.TOPIC, ResourceType.GROUP)
    ]


def delete_acls(admin: AdminClient, bindings: list[AclBinding], timeout: float = 30.0) -> None:
    """Delete exactly ``bindings`` (one that is not there is no error)."""
    filters = [
        AclBindingFilter(
            b.restype,
            b.name,
            b.resource_pattern_type,
            b.principal,
            b.host,
            b.operation,
            b.permission_type,
        )
        for b in bindings
    ]
    for binding, future in admin.delete_acls(filters, request_timeout=timeout).items():
        try:
            future.result()
        except KafkaException as exc:
            raise BootstrapError(f"deleting ACL {binding}: {exc}") from exc


def _role_access(topics: Topics, access: RoleAccess, principal: str) -> list[AclBinding]:
    """The ACLs of one of cronstream's roles (``schemas.catalog.ROLES``): literal topic
    names, so a role reaches no topic it does not use."""
    allow, literal, prefixed = (
        AclPermissionType.ALLOW,
        ResourcePatternType.LITERAL,
        ResourcePatternType.PREFIXED,
    )
    wanted = {
        (topics.name(spec), literal, op)
        for spec in access.reads
        for op in (AclOperation.READ, AclOperation.DESCRIBE)
    }
    wanted |= {
        (topics.name(spec), literal, op)
        for spec in access.writes
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    }
    if access.tenant_topics:
        ops = (AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE)
        wanted |= {(f"{topics.prefix}.{TENANT_TOPICS}", prefixed, op) for op in ops}
    if access.internal:  # a framework's own topics: "<prefix>.flows-coordinator-..."
        own = (
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DESCRIBE,
            AclOperation.DESCRIBE_CONFIGS,
        )
        wanted |= {(f"{topics.prefix}.{access.internal}", prefixed, op) for op in own}
    bindings = [
        AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, allow)
        for name, pattern, op in sorted(wanted, key=str)
    ]
    group_ops = [AclOperation.READ, AclOperation.DESCRIBE]
    if access.group_configs:
        group_ops += [AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS]
    bindings += [
        AclBinding(ResourceType.GROUP, f"{topics.prefix}.", prefixed, principal, "*", op, allow)
        for op in group_ops
    ]
    return bindings


def admin_acls(admin: AdminClient, bindings: list[AclBinding], timeout: float) -> None:
    """Create ``bindings`` (creating one that exists changes nothing)."""
    for binding, future in admin.create_acls(bindings, request_timeout=timeout).items():
        try:
            future.result()
        except KafkaException as exc:
            raise BootstrapError(f"creating ACL {binding}: {exc}") from exc
