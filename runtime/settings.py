"""Settings shared by every cronstream process, read once from the environment.

Every knob has a ``CRONSTREAM_*`` environment variable and a default that matches the
local stack started by ``make up``. The README's "Configuration" table lists them all;
keep the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cronstream.runtime.errors import SettingsError
from cronstream.schemas.catalog import ROLES, cassandra_role_user, role_user

REPO_ROOT = Path(__file__).resolve().parents[1]


DEFAULT_KAFKA_USER = "cronstream-app"  # the operators' user (CLI, bootstrap's kcat file)
# Any of these set: every process connects as that user (Settings.as_role keeps it).
EXPLICIT_KAFKA_USER = (
    "CRONSTREAM_KAFKA_USER",
    "CRONSTREAM_KAFKA_PASSWORD",
    "CRONSTREAM_KAFKA_PASSWORD_FILE",
)
DEFAULT_CASSANDRA_USER = "cronstream_app"
EXPLICIT_CASSANDRA_USER = (
    "CRONSTREAM_CASSANDRA_USER",
    "CRONSTREAM_CASSANDRA_PASSWORD",
    "CRONSTREAM_CASSANDRA_PASSWORD_FILE",
)


CLUSTER_NODES = 3  # from this many brokers on, replication defaults to 3 / min ISR 2
NODE_PORT_STEP = 10  # node n of the local stack listens on each base port + (n-1)*10


def node_name(service: str, node: int) -> str:
    """The local stack's name of ``service``'s node ``node`` (1-based): ``kafka``,
    ``kafka-2``, ``kafka-3``; the service's files, pid and host carry it."""
    return service if node == 1 else f"{service}-{node}"


def node_port(base: int, node: int) -> int:
    """The port of the local stack's node ``node`` (1-based) whose node 1 uses ``base``."""
    return base + (node - 1) * NODE_PORT_STEP


# The hosts of the 3-node stack with CRONSTREAM_NETNS=1 (``infra.hosts``): each node in
# a network namespace of its own, with an address on one bridge (the machine is .1).
NETNS_SUBNET = "10.89.0"


def kafka_node_host(node: int, netns: bool = False) -> str:
    """Where the local stack's broker ``node`` (1-based) listens: the loopback (each node
    on ports of its own, ``node_port``), or its host's address with ``netns``."""
    return f"{NETNS_SUBNET}.{10 + node}" if netns else "127.0.0.1"


def registry_host(netns: bool = False) -> str:
    """Where the local stack's schema registry listens: the loopback, or with ``netns``
    the machine's address on the hosts' bridge (a process on a host of its own reaches
    it there)."""
    return f"{NETNS_SUBNET}.1" if netns else "127.0.0.1"


def cassandra_node_host(node: int, netns: bool = False) -> str:
    """The address of the local stack's Cassandra node ``node`` (1-based): on the
    loopback (all of 127.0.0.0/8 is local on Linux, so each node keeps the same ports),
    or its host's with ``netns``."""
    return f"{NETNS_SUBNET}.{20 + node}" if netns else f"127.0.0.{node}"


def env_int(
    name: str, default: int, *, minimum: int = 1, env: Mapping[str, str] | None = None
) -> int:
    """A whole-number ``CRONSTREAM_*`` variable (``default`` when unset or empty)."""
    raw = (os.environ if env is None else env).get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        bound = "positive" if minimum == 1 else f"at least {minimum}"
        raise SettingsError(f"{name}={raw!r} must be {bound}")
    return value


def env_flag(name: str, env: Mapping[str, str]) -> bool:
    """A yes/no ``CRONSTREAM_*`` variable: 1, true or yes (any case) is yes."""
    return (env.get(name) or "").lower() in ("1", "true", "yes")


def env_list(name: str, env: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated ``CRONSTREAM_*`` variable, empty items dropped."""
    raw = (os.environ if env is None else env).get(name) or ""
    return [item for item in raw.split(",") if item]


def env_choice(name: str, choices: tuple[str, ...], env: Mapping[str, str]) -> str:
    """One of ``choices`` (any case; the first when unset or empty)."""
    value = (env.get(name) or choices[0]).lower()
    if value not in choices:
        raise SettingsError(f"{name}={value!r}: use {' or '.join(choices)}")
    return value


def _shape(env: Mapping[str, str], *, kafka_port: int, admin_port: int) -> dict[str, Any]:
    """The settings that follow the local stack's size (``CRONSTREAM_NODES``): where its
    nodes are, their heaps (smaller on a cluster: six JVMs share the machine), and how
    many copies of everything the bootstrap makes."""
    nodes = env_int("CRONSTREAM_NODES", 1, env=env)
    cluster, numbers = nodes >= CLUSTER_NODES, range(1, nodes + 1)
    netns = env_flag("CRONSTREAM_NETNS", env)
    hosts = env.get("CRONSTREAM_CASSANDRA_HOSTS") or ",".join(
        cassandra_node_host(n, netns) for n in numbers
    )
    servers = env.get("CRONSTREAM_BOOTSTRAP_SERVERS") or ",".join(
        f"{kafka_node_host(n, netns)}:{node_port(kafka_port, n)}" for n in numbers
    )
    admins = env.get("CRONSTREAM_KAFKA_ADMIN_SERVERS") or ",".join(
        f"{kafka_node_host(n, netns)}:{node_port(admin_port, n)}" for n in numbers
    )
    return {
        "nodes": nodes,
        "netns": netns,
        "bootstrap_servers": servers,
        "admin_servers": admins,
        "cassandra_hosts": tuple(h.strip() for h in hosts.split(",") if h.strip()),
        "kafka_heap_mb": env_int("CRONSTREAM_KAFKA_HEAP_MB", 512 if cluster else 768, env=env),
        "cassandra_heap_mb": env_int(
            "CRONSTREAM_CASSANDRA_HEAP_MB", 768 if cluster else 1024, env=env
        ),
        "cassandra_replication": env_int(
            "CRONSTREAM_CASSANDRA_REPLICATION", min(nodes, CLUSTER_NODES), env=env
        ),
        "cassandra_datacenter": env.get("CRONSTREAM_CASSANDRA_DC") or "datacenter1",
        "topic_replication": env_int("CRONSTREAM_REPLICATION", 0, env=env) or None,
        "min_insync": env_int("CRONSTREAM_MIN_INSYNC", 0, env=env) or None,
        "allow_rf1": env_flag("CRONSTREAM_ALLOW_RF1", env),
        # How long a broker that stopped heartbeating keeps its leaderships and its place
        # in the ISRs before the controller fences it: every write stalls that long
        # after a broker's loss (Kafka's default 9 s; 4 s on a cluster, README "A cluster")
        "broker_session_ms": env_int(
            "CRONSTREAM_BROKER_SESSION_MS", 4000 if cluster else 9000, env=env
        ),
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Where the services are and how cronstream names and sizes its things."""

    home: Path
    kafka_port: int
    kafka_controller_port: int
    registry_port: int
    cassandra_port: int
    cassandra_storage_port: int
    cassandra_jmx_port: int
    kafka_heap_mb: int
    registry_heap_mb: int
    cassandra_heap_mb: int
    topic_prefix: str
    partitions: int
    keyspace: str
    max_payload_bytes: int
    history_ttl_days: int
    # What runs printed or returned (docs/run-output.md) is kept this long: a shorter
    # TTL than history's, it is bulkier and read soon after the run or never.
    output_ttl_days: int
    cassandra_replication: int
    cassandra_datacenter: str
    # The local stack's shape (CRONSTREAM_NODES: brokers and Cassandra nodes), and the
    # replication of every topic the bootstrap makes: None picks by the brokers found
    # (``replication``); allow_rf1 lets a cluster of 3+ brokers keep factor 1.
    nodes: int
    # Each node in a network namespace of its own (CRONSTREAM_NETNS, ``infra.hosts``):
    # the chaos suite's cluster, whose faults cut or slow a node's link.
    netns: bool
    topic_replication: int | None
    min_insync: int | None
    allow_rf1: bool
    broker_session_ms: int
    bootstrap_servers: str
    # Kafka security (runtime.kafka.security): "sasl_ssl" (SCRAM over TLS) or "plaintext";
    # the user cronstream's processes connect as; the CA to trust (None: the stack's);
    # the super user's mTLS listener, and the benchmark's anonymous one.
    kafka_security: str
    kafka_user: str
    # Whether kafka_user (or its password) came from the environment: then every
    # process connects as it; else each long-running role as its own user (as_role).
    kafka_user_explicit: bool
    kafka_ca: Path | None
    kafka_admin_port: int
    kafka_plaintext_port: int
    admin_servers: str
    registry_url: str
    # Schema registry logins (runtime.registry): the reading user of cronstream's
    # processes (None: anonymous; the local stack lets anyone read), the user that may
    # register schemas (the bootstrap's), and the CA to trust for an https URL.
    registry_user: str | None
    registry_writer: str
    registry_ca: Path | None
    cassandra_hosts: tuple[str, ...]
    # Cassandra security (runtime.cassandra): "password_tls" or "none"; the login of
    # cronstream's processes; the CA to trust (None: the stack's).
    cassandra_security: str
    cassandra_user: str
    cassandra_user_explicit: bool  # as kafka_user_explicit
    cassandra_ca: Path | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        prefix = env.get("CRONSTREAM_TOPIC_PREFIX", "cronstream") or "cronstream"
        keyspace = env.get("CRONSTREAM_KEYSPACE", "cronstream") or "cronstream"
        if not keyspace.replace("_", "").isalnum() or not keyspace[0].isalpha():
            raise SettingsError(
                f"CRONSTREAM_KEYSPACE={keyspace!r}: use letters, digits and '_', "
                "starting with a letter"
            )
        if not all(c.isalnum() or c in "._-" for c in prefix):
            raise SettingsError(
                f"CRONSTREAM_TOPIC_PREFIX={prefix!r}: use letters, digits, '.', '_' and '-'"
            )
        kafka_port = env_int("CRONSTREAM_KAFKA_PORT", 9092, env=env)
        admin_port = env_int("CRONSTREAM_KAFKA_ADMIN_PORT", 9095, env=env)
        ca = env.get("CRONSTREAM_KAFKA_CA")
        cassandra_ca = env.get("CRONSTREAM_CASSANDRA_CA")
        registry_port = env_int("CRONSTREAM_REGISTRY_PORT", 8081, env=env)
        registry_ca = env.get("CRONSTREAM_REGISTRY_CA")
        shape = _shape(env, kafka_port=kafka_port, admin_port=admin_port)
        return cls(
            **shape,
            home=Path(env.get("CRONSTREAM_HOME") or REPO_ROOT / ".stack").resolve(),
            kafka_port=kafka_port,
            kafka_controller_port=env_int("CRONSTREAM_KAFKA_CONTROLLER_PORT", 9093, env=env),
            registry_port=registry_port,
            cassandra_port=env_int("CRONSTREAM_CASSANDRA_PORT", 9042, env=env),
            cassandra_storage_port=env_int("CRONSTREAM_CASSANDRA_STORAGE_PORT", 7000, env=env),
            cassandra_jmx_port=env_int("CRONSTREAM_CASSANDRA_JMX_PORT", 7199, env=env),
            registry_heap_mb=env_int("CRONSTREAM_REGISTRY_HEAP_MB", 384, env=env),
            topic_prefix=prefix,
            partitions=env_int("CRONSTREAM_PARTITIONS", 12, env=env),
            keyspace=keyspace,
            max_payload_bytes=env_int("CRONSTREAM_MAX_PAYLOAD_BYTES", 65536, env=env),
            history_ttl_days=env_int("CRONSTREAM_HISTORY_TTL_DAYS", 30, env=env),
            output_ttl_days=env_int("CRONSTREAM_OUTPUT_TTL_DAYS", 14, env=env),
            kafka_security=env_choice("CRONSTREAM_KAFKA_SECURITY", ("sasl_ssl", "plaintext"), env),
            kafka_user=env.get("CRONSTREAM_KAFKA_USER") or DEFAULT_KAFKA_USER,
            kafka_user_explicit=any(env.get(k) for k in EXPLICIT_KAFKA_USER),
            kafka_ca=Path(ca).resolve() if ca else None,
            kafka_admin_port=admin_port,
            kafka_plaintext_port=env_int("CRONSTREAM_KAFKA_PLAINTEXT_PORT", 9094, env=env),
            registry_url=(
                env.get("CRONSTREAM_REGISTRY_URL")
                or f"http://{registry_host(shape['netns'])}:{registry_port}/apis/ccompat/v7"
            ).rstrip("/"),
            registry_user=env.get("CRONSTREAM_REGISTRY_USER") or None,
            registry_writer=env.get("CRONSTREAM_REGISTRY_WRITER") or "cronstream-bootstrap",
            registry_ca=Path(registry_ca).resolve() if registry_ca else None,
            cassandra_security=env_choice(
                "CRONSTREAM_CASSANDRA_SECURITY", ("password_tls", "none"), env
            ),
            cassandra_user=env.get("CRONSTREAM_CASSANDRA_USER") or DEFAULT_CASSANDRA_USER,
            cassandra_user_explicit=any(env.get(k) for k in EXPLICIT_CASSANDRA_USER),
            cassandra_ca=Path(cassandra_ca).resolve() if cassandra_ca else None,
        )

    def replication(self, brokers: int) -> tuple[int, int]:
        """(replication factor, ``min.insync.replicas``) of the topics made on a cluster
        of ``brokers``: CRONSTREAM_REPLICATION / CRONSTREAM_MIN_INSYNC when set, else 3
        and 2 from three brokers up (a write survives one broker lost, and acks=all
        waits for two copies), 1 and 1 on a single broker."""
        factor = self.topic_replication or min(max(brokers, 1), CLUSTER_NODES)
        insync = self.min_insync or (2 if factor >= CLUSTER_NODES else 1)
        return factor, insync

    def as_role(self, role: str) -> Settings:
        """These settings for cronstream's process ``role`` (a key of
        ``schemas.catalog.ROLES``): its own Kafka user ``cronstream-<role>``, whose ACLs
        allow only what the role does, and its own Cassandra login ``cronstream_<role>``
        if it uses history, unless a user was set explicitly."""
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}")
        settings = self.acting_as(role_user(role))
        if ROLES[role].history and not (
            self.cassandra_user_explicit or self.cassandra_user != DEFAULT_CASSANDRA_USER
        ):
            settings = replace(settings, cassandra_user=cassandra_role_user(role))
        return settings

    def acting_as(self, kafka_user: str) -> Settings:
        """These settings connecting to Kafka as ``kafka_user`` (a role's or a tenant's,
        whose password the stack keeps), unless a user was set explicitly."""
        if self.kafka_user_explicit or self.kafka_user != DEFAULT_KAFKA_USER:
            return self
        return replace(self, kafka_user=kafka_user)

    def with_namespace(self, *, topic_prefix: str, keyspace: str | None = None) -> Settings:
        """The same services under another topic prefix (and keyspace): test isolation."""
        return replace(self, topic_prefix=topic_prefix, keyspace=keyspace or self.keyspace)
