"""Kafka Connect on the local stack, and a warehouse for its sink: history as typed rows.

``Connect`` is Apache Kafka's own Connect worker (connect-runtime, already among the
broker's jars) in distributed mode: its group and its three topics are the namespace's
(``<prefix>.connect``, ``<prefix>.connect-configs|offsets|status``, made by the
bootstrap), it logs in as the ``connect`` role (``schemas.catalog.ROLES``: it may read
history and use its own topics, nothing else), and two plugins come from Maven Central
into folders of their own (``infra/kafka-connect/*/pom.xml``): Debezium's JDBC sink
connector and Apicurio Registry's AvroConverter, which reads cronstream's
Confluent-wire-format Avro through the registry's own API. Kafka's basic-auth REST
extension is on the worker's classpath (``infra/connect-rest-auth/pom.xml``).

Its REST API creates connectors, and a connector runs code with the worker's rights, so
it answers only the operator's login (``runtime.consoles``; Kafka's
BasicAuthSecurityRestExtension, a JAAS PropertyFileLoginModule over a file of the
stack's credentials). What a connector's config may reach is bounded too: the file
config provider reads only ``connector_secrets_dir`` (the warehouse's password, never
the stack's credentials), and a connector may override one client setting of the
worker's, its consumer group (``group.id``: the namespace's prefix, which the
``connect`` role's ACLs allow), never a login, a JAAS module or a config provider of
its clients.

``Postgres`` is the Debian package's server, run as its ``postgres`` user when we are
root (it refuses root), on TCP only, with one login (``cronstream``, a password in the
stack's credentials). ``ensure_history_sink`` makes the ``warehouse`` database and
puts the connector that writes ``<prefix>.history`` into ``cronstream_history`` there
(README, "Sinking history into your warehouse").

Configuration (environment): ``o.CONNECT_PORT`` (8083, the REST API),
``o.POSTGRES_PORT`` (5442), ``o.CONNECT_HEAP_MB`` (384); docs/configuration.md.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pg8000.native

from cronstream.infra.errors import StackError
from cronstream.infra.security import ensure_secret, ensure_secret_file, private_dir, write_private
from cronstream.infra.service import CONF_DIR, INFRA_DIR, JVM_COMMON, Service
from cronstream.runtime.consoles import (
    CONSOLE_USER,
    console_port,
    console_secret_path,
    stack_console,
)
from cronstream.runtime.credentials import security_dir
from cronstream.runtime.kafka.security import SCRAM, ca_location
from cronstream.runtime.lakehouse import CATALOG_USER, postgres_port, postgres_secret_path
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import CONNECT, Topics, role_user

PLUGINS = INFRA_DIR / "kafka-connect"
REST_AUTH_POM = INFRA_DIR / "connect-rest-auth" / "pom.xml"
WAREHOUSE_USER = CATALOG_USER  # the stack's one PostgreSQL login (runtime.lakehouse)
WAREHOUSE_DB = "warehouse"
JDBC_SINK = "io.debezium.connector.jdbc.JdbcSinkConnector"
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
REST_AUTH = "org.apache.kafka.connect.rest.basic.auth.extension"


def warehouse_secret(settings: Settings) -> Path:
    return postgres_secret_path(settings)


def connector_secrets_dir(settings: Settings) -> Path:
    """The one folder Connect's file config provider may read: the secrets connectors
    name with ``${file:<path>:<key>}``, copies of what they need and nothing else."""
    return security_dir(settings) / "connectors"


def _secret_properties(settings: Settings) -> Path:
    """The warehouse's password as a properties file, for Connect's FileConfigProvider."""
    return connector_secrets_dir(settings) / "warehouse.properties"


def _postgres_bin(tool: str) -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"))
    if not found:
        raise StackError(
            f"PostgreSQL's {tool} is not installed: apt-get install -y postgresql (make deps does)"
        )
    return found[-1]


def _as_postgres() -> list[str]:
    """Run as the Debian package's ``postgres`` user when root (PostgreSQL refuses
    root); setpriv execs, so the pid the stack keeps is the server's."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]


def _give_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        os.chown(path, pwd.getpwnam("postgres").pw_uid, grp.getgrnam("postgres").gr_gid)


def _traversable(path: Path) -> None:
    """Let the ``postgres`` user reach ``path`` (root only): the folders above it get
    the others' search bit (x, not read: their listing stays private) where missing."""
    if os.geteuid() != 0:
        return
    for folder in path.resolve().parents:
        mode = folder.stat().st_mode
        if not mode & 0o001:
            folder.chmod(mode | 0o001)


class Postgres(Service):
    name = "postgres"
    start_timeout = 60.0
    stop_signal = signal.SIGINT  # "fast" shutdown: SIGTERM waits for every client to go

    @property
    def port(self) -> int:
        return postgres_port()

    @property
    def pgdata(self) -> Path:
        return self.data / "pgdata"

    @property
    def marker(self) -> str:  # no -D flag of ours for a C server: its data directory
        return f"-D{self.pgdata}"

    def fetch(self) -> None:
        _postgres_bin("postgres")

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        password = ensure_secret_file(self.settings, warehouse_secret(self.settings))
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        pwfile = self.data / "initdb.pw"
        write_private(pwfile, password.encode())
        _traversable(self.data)
        for path in (self.data, self.pgdata, pwfile):
            _give_to_postgres(path)
        try:
            proc = subprocess.run(
                [
                    *_as_postgres(),
                    str(_postgres_bin("initdb")),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    WAREHOUSE_USER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-locale",
                ],
                capture_output=True,
                text=True,
                check=False,
                cwd=self.data,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise StackError("initdb failed:\n" + (proc.stdout + proc.stderr)[-3000:])

    def command(self) -> list[str]:
        return [
            *_as_postgres(),
            str(_postgres_bin("postgres")),
            self.marker,
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=50",
            "-c",
            "shared_buffers=64MB",
        ]

    def ready(self) -> bool:
        try:
            warehouse(self.settings, database="postgres").close()
        except (OSError, pg8000.native.InterfaceError, pg8000.native.DatabaseError):
            return False
        return True


def warehouse(settings: Settings, database: str = WAREHOUSE_DB) -> pg8000.native.Connection:
    """A connection to the local stack's PostgreSQL as its one login."""
    return pg8000.native.Connection(
        WAREHOUSE_USER,
        host="127.0.0.1",
        port=Postgres(settings).port,
        database=database,
        password=warehouse_secret(settings).read_text().strip(),
        timeout=10,
    )


class Connect(Service):
    name = "connect"
    start_timeout = 120.0
    after_bootstrap = True  # it logs in as its role and needs its topics

    @property
    def port(self) -> int:
        return console_port("connect")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def plugins(self) -> Path:
        return self.lib / "plugins"

    @property
    def classpath(self) -> Path:
        """Jars on the worker's classpath beside Kafka's: the REST extension."""
        return self.lib / "classpath"

    def fetch(self) -> None:
        for spec in sorted(PLUGINS.glob("*/pom.xml")):
            self._resolve(spec, self.plugins / spec.parent.name)
        self._resolve(REST_AUTH_POM, self.classpath)

    @property
    def properties(self) -> Path:
        return self.conf / "connect.properties"

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        # the file provider refuses to start when its one allowed folder is missing (a
        # fresh clone: ensure_warehouse fills it only after Connect is up)
        private_dir(connector_secrets_dir(self.settings))
        s, prefix = self.settings, self.settings.topic_prefix
        lines = [
            "# Generated by infra/connect.py on every start; edit that file instead.",
            f"bootstrap.servers={s.bootstrap_servers}",
            f"group.id={prefix}.{CONNECT}",
            f"config.storage.topic={prefix}.{CONNECT}-configs",
            f"offset.storage.topic={prefix}.{CONNECT}-offsets",
            f"status.storage.topic={prefix}.{CONNECT}-status",
            # the bootstrap makes these topics; were they missing, as it would
            *(
                f"{kind}.storage.replication.factor={s.replication(s.nodes)[0]}"
                for kind in ("config", "offset", "status")
            ),
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.json.JsonConverter",
            f"listeners=http://127.0.0.1:{self.port}",
            "rest.advertised.host.name=127.0.0.1",
            f"rest.extension.classes={REST_AUTH}.BasicAuthSecurityRestExtension",
            f"plugin.path={self.plugins}",
            # A sink's consumer group is named by its config, under the namespace's
            # prefix; nothing else: with "All" a connector could give its clients any
            # JAAS login module or config provider (files of the host, JNDI).
            "connector.client.config.override.policy=Allowlist",
            "connector.client.config.override.allowlist=group.id",
            # secrets stay in files: ${file:<path>:<key>} in a connector's config, of
            # one folder only (not the stack's credentials, nor any file of the host)
            "config.providers=file",
            "config.providers.file.class="
            "org.apache.kafka.common.config.provider.FileConfigProvider",
            f"config.providers.file.param.allowed.paths={connector_secrets_dir(s)}",
            "offset.flush.interval.ms=2000",
            *self._security(),
        ]
        write_private(self.properties, ("\n".join(lines) + "\n").encode())
        self._rest_login()

    @property
    def jaas(self) -> Path:
        return self.conf / "connect-rest-jaas.conf"

    def _rest_login(self) -> None:
        """The REST API's one login: the JAAS file the extension reads (its section is
        ``KafkaConnect``) and the users file it names (``user=password``, which must
        not be empty: an empty one lets every request through)."""
        password = ensure_secret_file(self.settings, console_secret_path(self.settings, "connect"))
        users = self.data / "rest-users.properties"
        write_private(users, f"{CONSOLE_USER}={password}\n".encode())
        module = f"{REST_AUTH}.PropertyFileLoginModule"
        jaas = f'KafkaConnect {{\n  {module} required\n  file="{users}";\n}};\n'
        write_private(self.jaas, jaas.encode())

    def _security(self) -> list[str]:
        """The worker's Kafka login (SCRAM over TLS as the ``connect`` role), for the
        worker itself and the clients it makes for connectors."""
        s = self.settings
        if s.kafka_security == "plaintext":
            return []
        user = role_user("connect")
        password = ensure_secret(s, user)
        jaas = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";'
        )
        own = [
            "security.protocol=SASL_SSL",
            f"sasl.mechanism={SCRAM}",
            f"sasl.jaas.config={jaas}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={ca_location(s)}",
        ]
        return [
            f"{prefix}{line}" for prefix in ("", "producer.", "consumer.", "admin.") for line in own
        ]

    def command(self) -> list[str]:
        heap = f"{o.CONNECT_HEAP_MB.get()}m"
        kafka_jars = self.settings.home / "lib" / "kafka" / "jars"
        return [
            "java",
            self.marker,
            f"-Xms{heap}",
            f"-Xmx{heap}",
            *JVM_COMMON,
            f"-Dlog4j2.configurationFile={CONF_DIR / 'kafka-log4j2.properties'}",
            f"-Djava.security.auth.login.config={self.jaas}",
            *("-cp", f"{kafka_jars}/*:{self.classpath}/*"),
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.properties),
        ]

    def ready(self) -> bool:
        """The REST API answers the operator's login and the worker has joined its
        group (a connector put before that is refused with 409)."""
        try:
            with connect_client(self.settings, timeout=2) as client:
                return client.get("/connectors").status_code == 200
        except httpx.HTTPError:
            return False


def connect_client(settings: Settings, timeout: float = 30.0) -> httpx.Client:
    """A client of the stack's Connect REST API, with the operator's login."""
    return stack_console(settings, "connect").client(timeout=timeout)


def history_sink_config(settings: Settings, *, table: str, name: str) -> dict[str, str]:
    """The connector that writes ``<prefix>.history`` into ``table`` of the warehouse
    as typed rows: one row per outcome (upsert on run, attempt and status, so a record
    delivered again changes nothing), a column per field (timestamps as timestamps),
    and a column added when a compatible schema adds a field."""
    registry = re.sub(r"/apis/ccompat/v\d+/?$", "/apis/registry/v2", settings.registry_url)
    return {
        "connector.class": JDBC_SINK,
        "tasks.max": "1",
        "topics": Topics(settings).history,
        "consumer.override.group.id": f"{settings.topic_prefix}.{CONNECT}.{name}",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": AVRO_CONVERTER,
        "value.converter.apicurio.registry.url": registry,
        # the Confluent wire format: a 4-byte id, which is the content id in Apicurio
        "value.converter.apicurio.registry.as-confluent": "true",
        "value.converter.apicurio.registry.use-id": "contentId",
        "value.converter.apicurio.registry.headers.enabled": "false",
        "connection.url": f"jdbc:postgresql://127.0.0.1:{Postgres(settings).port}/{WAREHOUSE_DB}",
        "connection.username": WAREHOUSE_USER,
        "connection.password": f"${{file:{_secret_properties(settings)}:password}}",
        "insert.mode": "upsert",
        "primary.key.mode": "record_value",
        "primary.key.fields": "run_id,attempt,status",
        "schema.evolution": "basic",
        "table.name.format": table,
    }


def put_connector(
    settings: Settings, name: str, config: dict[str, str], timeout: float = 60.0
) -> dict[str, Any]:
    """Create or update connector ``name`` (idempotent); retried while the worker is
    still joining its group (409) or starting (5xx, unreachable)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with connect_client(settings) as client:
                resp = client.put(f"/connectors/{name}/config", json=config)
            if resp.status_code in (200, 201):
                return dict(resp.json())
            why = f"{resp.status_code} {resp.text[:500]}"
            if resp.status_code not in (409,) and resp.status_code < 500:
                raise StackError(f"Kafka Connect refused connector {name}: {why}")
        except httpx.HTTPError as exc:
            why = str(exc)
        if time.monotonic() > deadline:
            raise StackError(f"Kafka Connect did not take connector {name}: {why}")
        time.sleep(1)


def delete_connector(settings: Settings, name: str) -> None:
    with connect_client(settings) as client:
        resp = client.delete(f"/connectors/{name}")
    if resp.status_code not in (204, 404):
        raise StackError(f"Kafka Connect did not delete {name}: {resp.status_code} {resp.text}")


def ensure_warehouse(settings: Settings) -> None:
    """The ``warehouse`` database and the file the connector reads its password from
    (``${file:...}``: it never appears in the connector's config)."""
    password = warehouse_secret(settings).read_text().strip()
    private_dir(connector_secrets_dir(settings))
    write_private(_secret_properties(settings), f"password={password}\n".encode())
    # where it was before the provider was confined to connector_secrets_dir
    Path(f"{warehouse_secret(settings)}.properties").unlink(missing_ok=True)
    ensure_database(settings, WAREHOUSE_DB)


def ensure_database(settings: Settings, name: str) -> None:
    """The database ``name`` in the stack's PostgreSQL, made when missing."""
    conn = warehouse(settings, database="postgres")
    try:
        if not conn.run("SELECT 1 FROM pg_database WHERE datname = :d", d=name):
            conn.run(f"CREATE DATABASE {name}")
    finally:
        conn.close()


HISTORY_SINK = "history-warehouse"


def history_table(settings: Settings) -> str:
    """The warehouse table of the namespace's history: ``<prefix>_history``."""
    return f"{re.sub(r'[^a-z0-9_]', '_', settings.topic_prefix.lower())}_history"


def ensure_history_sink(settings: Settings) -> None:
    """The namespace's history in the warehouse's ``history_table``."""
    ensure_warehouse(settings)
    config = history_sink_config(settings, table=history_table(settings), name=HISTORY_SINK)
    put_connector(settings, HISTORY_SINK, config)


def connect_services(settings: Settings) -> list[Service]:
    return [Postgres(settings), Connect(settings)]
