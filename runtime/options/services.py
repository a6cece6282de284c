"""The settings that say where the services are, how to reach them, how cronstream
names and sizes its things, and how the local stack is shaped (the roles' own
settings: ``runtime.options.roles``).

Each is declared once (``runtime.options.option``); ``Settings.from_env`` and the
commands read them through these declarations, and docs/configuration.md is made from
them (``make docs``).
"""

from __future__ import annotations

from pathlib import Path

from cronstream.runtime.options.option import (
    PORT,
    Family,
    Old,
    Option,
    choice,
    days,
    duration,
    names,
    old_days,
    old_ms,
    old_seconds,
    path,
    switch,
    text,
    whole,
)

CLIENTS = "every process and command"
STACK = "the local stack (`make up`)"


def _heap_mb(
    env: str, whose: str, default: int | None, *, least: int = 1, default_doc: str | None = None
) -> Option[int]:
    """The JVM heap of one of the local stack's services, in MiB (at least ``least``)."""
    return Option(
        env, whole(least), default, f"{whose} JVM heap, MiB", STACK, default_doc=default_doc
    )


def _kept_days(env: str, default: int, help: str, who: str) -> Option[int]:
    """How long something is kept, in whole days (its older variable ``..._DAYS`` a
    number of days)."""
    return Option(env, days, default, help, who, old=(Old(f"{env}_DAYS", old_days),))


def _password_file(password: Option[str]) -> Option[Path]:
    """``password``'s ``..._FILE`` beside it: a file holding it, for the same readers."""
    return Option(f"{password.env}_FILE", path, None, "a file holding its password", password.who)


# Where the services are, and the local stack's shape

HOME = Option(
    "CRONSTREAM_HOME",
    path,
    None,
    "jars, config, data and logs of the local stack",
    CLIENTS,
    default_doc="`./.stack`",
)
NODES = Option(
    "CRONSTREAM_NODES",
    whole(1),
    1,
    "the local stack's shape: 1, or 3 brokers (KRaft, 3 voters) and 3 Cassandra nodes "
    '(docs/operations.md, "A cluster")',
    CLIENTS,
)
NETNS = Option(
    "CRONSTREAM_NETNS",
    switch,
    False,
    "with 3 nodes: each broker and Cassandra node on a test host of its own (a network "
    "namespace on the bridge `csbr0`), so the chaos suite can cut or slow a node's link; "
    "needs root",
    CLIENTS,
)
BOOTSTRAP_SERVERS = Option(
    "CRONSTREAM_BOOTSTRAP_SERVERS",
    text,
    None,
    "the Kafka cluster to use (any)",
    CLIENTS,
    default_doc="`127.0.0.1:9092` (each node's with 3 nodes)",
)
KAFKA_ADMIN_SERVERS = Option(
    "CRONSTREAM_KAFKA_ADMIN_SERVERS",
    text,
    None,
    "the super user's mTLS listener (bootstrap, readiness probe)",
    CLIENTS,
    default_doc="`127.0.0.1:9095` (each node's with 3 nodes)",
)
REGISTRY_URL = Option(
    "CRONSTREAM_REGISTRY_URL",
    text,
    None,
    "any Confluent-compatible schema registry",
    CLIENTS,
    default_doc="`http://127.0.0.1:8081/apis/ccompat/v7`",
)
CASSANDRA_HOSTS = Option(
    "CRONSTREAM_CASSANDRA_HOSTS",
    names,
    None,
    "Cassandra's contact points",
    CLIENTS,
    default_doc="`127.0.0.1` (`127.0.0.1,127.0.0.2,127.0.0.3` with 3 nodes)",
)
KAFKA_PORT = Option("CRONSTREAM_KAFKA_PORT", PORT, 9092, "local broker: SASL_SSL for clients")
KAFKA_CONTROLLER_PORT = Option(
    "CRONSTREAM_KAFKA_CONTROLLER_PORT", PORT, 9093, "local broker: the controller (mTLS)", STACK
)
KAFKA_PLAINTEXT_PORT = Option(
    "CRONSTREAM_KAFKA_PLAINTEXT_PORT",
    PORT,
    9094,
    "local broker: anonymous plaintext (benchmark topics only)",
    STACK,
)
KAFKA_ADMIN_PORT = Option(
    "CRONSTREAM_KAFKA_ADMIN_PORT", PORT, 9095, "local broker: the super user's mTLS", STACK
)
REGISTRY_PORT = Option("CRONSTREAM_REGISTRY_PORT", PORT, 8081, "local schema registry", STACK)
CASSANDRA_PORT = Option("CRONSTREAM_CASSANDRA_PORT", PORT, 9042, "local Cassandra: CQL", STACK)
CASSANDRA_STORAGE_PORT = Option(
    "CRONSTREAM_CASSANDRA_STORAGE_PORT", PORT, 7000, "local Cassandra: between nodes", STACK
)
CASSANDRA_JMX_PORT = Option(
    "CRONSTREAM_CASSANDRA_JMX_PORT", PORT, 7199, "local Cassandra: JMX", STACK
)
KAFKA_HEAP_MB = _heap_mb(
    "CRONSTREAM_KAFKA_HEAP_MB",
    "a local broker's",
    None,
    default_doc="768 (512 a node with 3 nodes)",
)
REGISTRY_HEAP_MB = _heap_mb("CRONSTREAM_REGISTRY_HEAP_MB", "the local registry's", 384)
CASSANDRA_HEAP_MB = _heap_mb(
    "CRONSTREAM_CASSANDRA_HEAP_MB",
    "a local Cassandra node's",
    None,
    default_doc="1024 (768 a node with 3 nodes)",
)
BROKER_SESSION_TIMEOUT = Option(
    "CRONSTREAM_BROKER_SESSION_TIMEOUT",
    duration,
    None,
    "the local brokers' `broker.session.timeout.ms`: how long a lost broker keeps its "
    "leaderships and ISR places, so how long writes stall after a broker's loss",
    STACK,
    default_doc="9s (4s with 3 nodes)",
    old=(Old("CRONSTREAM_BROKER_SESSION_MS", old_ms),),
)

# How cronstream names and sizes its things

TOPIC_PREFIX = Option(
    "CRONSTREAM_TOPIC_PREFIX",
    text,
    "cronstream",
    "topics are `<prefix>.jobs`, ...; letters, digits, '.', '_' and '-'",
    CLIENTS,
)
KEYSPACE = Option(
    "CRONSTREAM_KEYSPACE",
    text,
    "cronstream",
    "the Cassandra keyspace; letters, digits and '_', starting with a letter",
    CLIENTS,
)
PARTITIONS = Option(
    "CRONSTREAM_PARTITIONS", whole(1), 12, "partitions of every topic but `control`", CLIENTS
)
REPLICATION = Option(
    "CRONSTREAM_REPLICATION",
    whole(1),
    None,
    "replication factor of every topic the bootstrap makes",
    "bootstrap",
    default_doc="3 on 3+ brokers, 1 on one",
)
MIN_INSYNC = Option(
    "CRONSTREAM_MIN_INSYNC",
    whole(1),
    None,
    "`min.insync.replicas` of those topics",
    "bootstrap",
    default_doc="2 on 3+ brokers, 1 on one",
)
ALLOW_RF1 = Option(
    "CRONSTREAM_ALLOW_RF1",
    switch,
    False,
    "let the bootstrap keep factor 1 on a cluster of 3+ brokers (else it refuses)",
    "bootstrap",
    flag="--allow-rf1",
)
CASSANDRA_REPLICATION = Option(
    "CRONSTREAM_CASSANDRA_REPLICATION",
    whole(1),
    None,
    "the keyspace's replication factor (NetworkTopologyStrategy; every statement at LOCAL_QUORUM)",
    "bootstrap",
    default_doc="1; 3 with 3 nodes",
)
CASSANDRA_DC = Option(
    "CRONSTREAM_CASSANDRA_DC",
    text,
    "datacenter1",
    "the data centre the keyspace's replicas are counted in",
    CLIENTS,
)
MAX_PAYLOAD_BYTES = Option(
    "CRONSTREAM_MAX_PAYLOAD_BYTES",
    whole(1),
    65536,
    "largest job payload accepted (at most 1048576)",
    CLIENTS,
)
HISTORY_TTL = _kept_days(
    "CRONSTREAM_HISTORY_TTL",
    30,
    "how long Cassandra keeps history (whole days); older days are read from the archive "
    "table (docs/lakehouse.md)",
    "sink, history queries",
)
OUTPUT_TTL = _kept_days(
    "CRONSTREAM_OUTPUT_TTL",
    14,
    "how long the sink keeps a run's output (whole days)",
    "sink, history queries",
)

# Kafka, the registry and Cassandra: security and logins

KAFKA_SECURITY = Option(
    "CRONSTREAM_KAFKA_SECURITY",
    choice("sasl_ssl", "plaintext"),
    "sasl_ssl",
    "how clients connect: `sasl_ssl` (SCRAM-SHA-512 over TLS) or `plaintext`",
    CLIENTS,
)
KAFKA_USER = Option(
    "CRONSTREAM_KAFKA_USER",
    text,
    None,
    "the Kafka user to connect as; set, every process uses it",
    CLIENTS,
    default_doc="`cronstream-app` for commands, `cronstream-<role>` for a role",
)
KAFKA_PASSWORD = Option(
    "CRONSTREAM_KAFKA_PASSWORD",
    text,
    None,
    "its password (never printed)",
    CLIENTS,
    default_doc="the stack's `credentials/<user>.secret`",
)
KAFKA_PASSWORD_FILE = _password_file(KAFKA_PASSWORD)
KAFKA_CA = Option(
    "CRONSTREAM_KAFKA_CA",
    path,
    None,
    "the CA that signed the brokers' certificates",
    CLIENTS,
    default_doc="the stack's `tls/ca.pem`",
)
REGISTRY_USER = Option(
    "CRONSTREAM_REGISTRY_USER",
    text,
    None,
    "the processes' login to a registry that wants one for reads",
    CLIENTS,
    default_doc="none (anonymous reads)",
)
REGISTRY_PASSWORD = Option("CRONSTREAM_REGISTRY_PASSWORD", text, None, "its password", CLIENTS)
REGISTRY_PASSWORD_FILE = _password_file(REGISTRY_PASSWORD)
REGISTRY_WRITER = Option(
    "CRONSTREAM_REGISTRY_WRITER",
    text,
    "cronstream-bootstrap",
    "the login that registers schemas",
    "bootstrap, `tenants add`",
)
REGISTRY_WRITER_PASSWORD = Option(
    "CRONSTREAM_REGISTRY_WRITER_PASSWORD",
    text,
    None,
    "its password",
    "bootstrap, `tenants add`",
    default_doc="the stack's `credentials/registry-<user>.secret`",
)
REGISTRY_WRITER_PASSWORD_FILE = _password_file(REGISTRY_WRITER_PASSWORD)
REGISTRY_CA = Option(
    "CRONSTREAM_REGISTRY_CA",
    path,
    None,
    "the CA of an https registry",
    CLIENTS,
    default_doc="the system's",
)
CASSANDRA_SECURITY = Option(
    "CRONSTREAM_CASSANDRA_SECURITY",
    choice("password_tls", "none"),
    "password_tls",
    "`password_tls` (TLS and a login) or `none` (a cluster that asks for neither)",
    CLIENTS,
)
CASSANDRA_USER = Option(
    "CRONSTREAM_CASSANDRA_USER",
    text,
    None,
    "the Cassandra login; set (or a password variable set), every process uses it",
    CLIENTS,
    default_doc="`cronstream_app` for commands, `cronstream_<role>` for a role",
)
CASSANDRA_PASSWORD = Option(
    "CRONSTREAM_CASSANDRA_PASSWORD",
    text,
    None,
    "its password (never printed)",
    CLIENTS,
    default_doc="the stack's `credentials/cassandra-<user>.secret`",
)
CASSANDRA_PASSWORD_FILE = _password_file(CASSANDRA_PASSWORD)
CASSANDRA_CA = Option(
    "CRONSTREAM_CASSANDRA_CA",
    path,
    None,
    "the CA that signed the nodes' certificates",
    CLIENTS,
    default_doc="the stack's `tls/ca.pem`",
)

# Metrics endpoints, every long-running process

METRICS_HOST = Option(
    "CRONSTREAM_METRICS_HOST",
    text,
    "127.0.0.1",
    "the address `/metrics`, `/healthz` and `/readyz` listen on (not a loopback address: "
    "a token file is required)",
    "every role",
)
METRICS_TOKEN_FILE = Option(
    "CRONSTREAM_METRICS_TOKEN_FILE",
    path,
    None,
    "a file holding the bearer token `/metrics` then wants",
    "every role",
)
GC_YOUNG = Option(
    "CRONSTREAM_GC_YOUNG",
    whole(1),
    50_000,
    "Python's youngest garbage generation is collected every this many allocations "
    "(Python's default 700; what startup built is frozen)",
    "every role",
)

# The archive (docs/lakehouse.md) and its object store

ARCHIVE_WAREHOUSE = Option(
    "CRONSTREAM_ARCHIVE_WAREHOUSE",
    text,
    None,
    "where the archive table's files go: `s3://bucket/path` or `file:///dir`",
    "archiver, history queries",
    default_doc="`s3://cronstream-archive/warehouse`",
)
ARCHIVE_CATALOG = Option(
    "CRONSTREAM_ARCHIVE_CATALOG",
    text,
    None,
    "the table's catalog: a SQLAlchemy URI (`postgresql+pg8000://user@host/db`, "
    "`sqlite:////dir/catalog.db`)",
    "archiver, history queries",
    default_doc="the stack's PostgreSQL, database `lakehouse`",
)
ARCHIVE_CATALOG_PASSWORD_FILE = Option(
    "CRONSTREAM_ARCHIVE_CATALOG_PASSWORD_FILE",
    path,
    None,
    "a file holding the catalog user's password",
    "archiver, history queries",
)
ARCHIVE_KEEP = _kept_days(
    "CRONSTREAM_ARCHIVE_KEEP",
    366,
    "how long the archive keeps history (whole days; older ones are deleted hourly; 0 keeps all)",
    "archiver, `archive expire`",
)
S3_ENDPOINT = Option(
    "CRONSTREAM_S3_ENDPOINT",
    text,
    None,
    "the object store of an `s3://` warehouse (set empty: AWS S3)",
    "archiver, history queries",
    default_doc="the stack's S3Proxy",
)
S3_ACCESS_KEY = Option(
    "CRONSTREAM_S3_ACCESS_KEY", text, "archive", "its access key", "archiver, history queries"
)
S3_SECRET_FILE = Option(
    "CRONSTREAM_S3_SECRET_FILE",
    path,
    None,
    "a file holding its secret key",
    "archiver, history queries",
    default_doc="the stack's",
)
S3_REGION = Option(
    "CRONSTREAM_S3_REGION", text, "us-east-1", "its region", "archiver, history queries"
)
S3_PORT = Option("CRONSTREAM_S3_PORT", PORT, 9311, "the local S3Proxy", STACK)
S3_HEAP_MB = _heap_mb("CRONSTREAM_S3_HEAP_MB", "its", 256, least=64)
POSTGRES_PORT = Option(
    "CRONSTREAM_POSTGRES_PORT",
    PORT,
    5442,
    "the local PostgreSQL (the archive's catalog)",
    STACK,
)

# The stack's consoles: Prometheus, Alertmanager, Kafka Connect

PROMETHEUS_PORT = Option(
    "CRONSTREAM_PROMETHEUS_PORT", PORT, 9190, "the local Prometheus (HTTPS)", STACK
)
ALERTMANAGER_PORT = Option(
    "CRONSTREAM_ALERTMANAGER_PORT",
    PORT,
    9193,
    "the local Alertmanager (HTTPS; its usual 9093 is Kafka's controller here)",
    STACK,
)
CONNECT_PORT = Option(
    "CRONSTREAM_CONNECT_PORT", PORT, 8083, "the local Kafka Connect REST API", STACK
)
CONNECT_HEAP_MB = _heap_mb(
    "CRONSTREAM_CONNECT_HEAP_MB", "the Kafka Connect worker's", 384, least=128
)
SCRAPE_INTERVAL = Option(
    "CRONSTREAM_SCRAPE_INTERVAL",
    duration,
    5000,
    "the local Prometheus's scrape and rule evaluation interval",
    STACK,
    old=(Old("CRONSTREAM_SCRAPE_INTERVAL_S", old_seconds),),
)
ALERT_WEBHOOK = Option(
    "CRONSTREAM_ALERT_WEBHOOK",
    text,
    None,
    "where the local Alertmanager delivers every alert",
    STACK,
    default_doc="`http://127.0.0.1:8790/alerts`",
)
CONSOLE = Family(
    "CRONSTREAM_",
    "a console's access from elsewhere (`PROMETHEUS`, `ALERTMANAGER`, `CONNECT`): its "
    "`_URL`, `_USER`, `_PASSWORD` (or `_PASSWORD_FILE`) and `_CA`",
    "`cronstream ui` (Prometheus), tests and operators' tools",
    "CRONSTREAM_<CONSOLE>_URL, _USER, _PASSWORD(_FILE), _CA",
)
