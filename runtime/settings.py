"""Settings shared by every cronstream process, read once from the environment.

Every knob is a setting declared in ``runtime.options`` (its environment variable,
type, default and help; docs/configuration.md is written from them), with a default
that matches the local stack started by ``make up``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import services as o
from cronstream.schemas.catalog import ROLES, cassandra_role_user, role_user

REPO_ROOT = Path(__file__).resolve().parents[1]


DEFAULT_KAFKA_USER = "cronstream-app"  # the operators' user (CLI, bootstrap's kcat file)
# Any of these set: every process connects as that user (Settings.as_role keeps it).
EXPLICIT_KAFKA_USER = (o.KAFKA_USER, o.KAFKA_PASSWORD, o.KAFKA_PASSWORD_FILE)
DEFAULT_CASSANDRA_USER = "cronstream_app"
EXPLICIT_CASSANDRA_USER = (o.CASSANDRA_USER, o.CASSANDRA_PASSWORD, o.CASSANDRA_PASSWORD_FILE)


CLUSTER_NODES = 3  # from this many brokers on, replication defaults to 3 / min ISR 2
NODE_PORT_STEP = 10  # node n of the local stack listens on each base port + (n-1)*10


def node_name(service: str, node: int) -> str:
    """The local stack's name of ``service``'s node ``node`` (1-based): ``kafka``,
    ``kafka-2``, ``kafka-3``; the service's files, pid and host carry it."""
    return service if node == 1 else f"{service}-{node}"


def node_port(base: int, node: int) -> int:
    """The port of the local stack's node ``node`` (1-based) whose node 1 uses ``base``."""
    return base + (node - 1) * NODE_PORT_STEP


# The hosts of the 3-node stack with o.NETNS (``infra.hosts``): each node in
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


def _shape(env: Mapping[str, str], *, kafka_port: int, admin_port: int) -> dict[str, Any]:
    """The settings that follow the local stack's size (``o.NODES``): where its nodes
    are, their heaps (smaller on a cluster: six JVMs share the machine), and how many
    copies of everything the bootstrap makes."""
    nodes = o.NODES.get(env)
    cluster, numbers = nodes >= CLUSTER_NODES, range(1, nodes + 1)
    netns = o.NETNS.get(env)
    hosts = o.CASSANDRA_HOSTS.get(env) or [cassandra_node_host(n, netns) for n in numbers]
    servers = o.BOOTSTRAP_SERVERS.get(env) or ",".join(
        f"{kafka_node_host(n, netns)}:{node_port(kafka_port, n)}" for n in numbers
    )
    admins = o.KAFKA_ADMIN_SERVERS.get(env) or ",".join(
        f"{kafka_node_host(n, netns)}:{node_port(admin_port, n)}" for n in numbers
    )
    return {
        "nodes": nodes,
        "netns": netns,
        "bootstrap_servers": servers,
        "admin_servers": admins,
        "cassandra_hosts": tuple(hosts),
        "kafka_heap_mb": o.KAFKA_HEAP_MB.get(env, 512 if cluster else 768),
        "cassandra_heap_mb": o.CASSANDRA_HEAP_MB.get(env, 768 if cluster else 1024),
        "cassandra_replication": o.CASSANDRA_REPLICATION.get(env, min(nodes, CLUSTER_NODES)),
        "cassandra_datacenter": o.CASSANDRA_DC.get(env),
        "topic_replication": o.REPLICATION.get(env),
        "min_insync": o.MIN_INSYNC.get(env),
        "allow_rf1": o.ALLOW_RF1.get(env),
        # How long a broker that stopped heartbeating keeps its leaderships and its place
        # in the ISRs before the controller fences it: every write stalls that long
        # after a broker's loss (Kafka's default 9 s; 4 s on a cluster, README "A cluster")
        "broker_session_ms": o.BROKER_SESSION_TIMEOUT.get(env, 4000 if cluster else 9000),
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
    # The local stack's shape (o.NODES: brokers and Cassandra nodes), and the
    # replication of every topic the bootstrap makes: None picks by the brokers found
    # (``replication``); allow_rf1 lets a cluster of 3+ brokers keep factor 1.
    nodes: int
    # Each node in a network namespace of its own (o.NETNS, ``infra.hosts``):
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
        prefix, keyspace = o.TOPIC_PREFIX.get(env), o.KEYSPACE.get(env)
        if not keyspace.replace("_", "").isalnum() or not keyspace[0].isalpha():
            raise SettingsError(
                f"{o.KEYSPACE.env}={keyspace!r}: use letters, digits and '_', "
                "starting with a letter"
            )
        if not all(c.isalnum() or c in "._-" for c in prefix):
            raise SettingsError(
                f"{o.TOPIC_PREFIX.env}={prefix!r}: use letters, digits, '.', '_' and '-'"
            )
        kafka_port, admin_port = o.KAFKA_PORT.get(env), o.KAFKA_ADMIN_PORT.get(env)
        registry_port = o.REGISTRY_PORT.get(env)
        shape = _shape(env, kafka_port=kafka_port, admin_port=admin_port)
        stack_registry = f"http://{registry_host(shape['netns'])}:{registry_port}/apis/ccompat/v7"
        return cls(
            **shape,
            home=(o.HOME.get(env) or REPO_ROOT / ".stack").resolve(),
            kafka_port=kafka_port,
            kafka_controller_port=o.KAFKA_CONTROLLER_PORT.get(env),
            registry_port=registry_port,
            cassandra_port=o.CASSANDRA_PORT.get(env),
            cassandra_storage_port=o.CASSANDRA_STORAGE_PORT.get(env),
            cassandra_jmx_port=o.CASSANDRA_JMX_PORT.get(env),
            registry_heap_mb=o.REGISTRY_HEAP_MB.get(env),
            topic_prefix=prefix,
            partitions=o.PARTITIONS.get(env),
            keyspace=keyspace,
            max_payload_bytes=o.MAX_PAYLOAD_BYTES.get(env),
            history_ttl_days=o.HISTORY_TTL.get(env),
            output_ttl_days=o.OUTPUT_TTL.get(env),
            kafka_security=o.KAFKA_SECURITY.get(env),
            kafka_user=o.KAFKA_USER.get(env) or DEFAULT_KAFKA_USER,
            kafka_user_explicit=any(v.is_set(env) for v in EXPLICIT_KAFKA_USER),
            kafka_ca=_resolved(o.KAFKA_CA.get(env)),
            kafka_admin_port=admin_port,
            kafka_plaintext_port=o.KAFKA_PLAINTEXT_PORT.get(env),
            registry_url=(o.REGISTRY_URL.get(env) or stack_registry).rstrip("/"),
            registry_user=o.REGISTRY_USER.get(env),
            registry_writer=o.REGISTRY_WRITER.get(env),
            registry_ca=_resolved(o.REGISTRY_CA.get(env)),
            cassandra_security=o.CASSANDRA_SECURITY.get(env),
            cassandra_user=o.CASSANDRA_USER.get(env) or DEFAULT_CASSANDRA_USER,
            cassandra_user_explicit=any(v.is_set(env) for v in EXPLICIT_CASSANDRA_USER),
            cassandra_ca=_resolved(o.CASSANDRA_CA.get(env)),
        )

    def replication(self, brokers: int) -> tuple[int, int]:
        """(replication factor, ``min.insync.replicas``) of the topics made on a cluster
        of ``brokers``: ``o.REPLICATION`` / ``o.MIN_INSYNC`` when set, else 3
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


def _resolved(path: Path | None) -> Path | None:
    return path.resolve() if path else None
