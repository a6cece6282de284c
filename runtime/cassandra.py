"""Cassandra clients, configured one way for every process (the sink, history queries,
the bootstrap's migrations, health checks).

The local stack's Cassandra takes TLS clients only and checks passwords
(PasswordAuthenticator, CassandraAuthorizer). Cronstream's processes log in as
``o.CASSANDRA_USER`` (``cronstream_app``: SELECT and MODIFY on cronstream's keyspaces,
granted by the bootstrap); the bootstrap and tests' keyspace set-up as the super user
``cronstream_admin``. A password comes from ``o.CASSANDRA_PASSWORD``, the file named by
``o.CASSANDRA_PASSWORD_FILE`` (the configured user only), or the stack's
``credentials/cassandra-<user>.secret``; it is never logged. ``o.CASSANDRA_SECURITY``
``none`` connects without TLS or a login (a cluster that asks for neither); the settings
are in docs/configuration.md.

Every read and write is at LOCAL_QUORUM (``CONSISTENCY``): on the keyspace's replication
factor 3 a write is acknowledged by two replicas of the local data centre and a read asks
two, so a read sees every acknowledged write and either survives one node down. At factor
1 it is the one replica, as LOCAL_ONE (the driver's default) was.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path
from typing import Any

from cronstream.runtime.credentials import credentials_dir, read_password, stack_ca
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

CASSANDRA_ADMIN = "cronstream_admin"
CASSANDRA_DEFAULT_ROLE = ("cassandra", "cassandra")  # a fresh node's, disabled by bootstrap
CONSISTENCY = "LOCAL_QUORUM"  # of every statement (a ConsistencyLevel name)


def cassandra_secret_path(settings: Settings, user: str) -> Path:
    return credentials_dir(settings) / f"cassandra-{user}.secret"


def cassandra_password(settings: Settings, user: str) -> str:
    return read_password(
        "Cassandra",
        user,
        cassandra_secret_path(settings, user),
        os.environ,
        o.CASSANDRA_PASSWORD,
        o.CASSANDRA_PASSWORD_FILE,
        from_env=user == settings.cassandra_user,
    )


def cassandra_tls(settings: Settings) -> ssl.SSLContext:
    ca = settings.cassandra_ca or stack_ca(settings)
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca))
    context.check_hostname = True  # the node's certificate names 127.0.0.1 and localhost
    return context


def login_refused(exc: BaseException) -> bool:
    """Whether the driver's NoHostAvailable ``exc`` is Cassandra refusing the login."""
    from cassandra import AuthenticationFailed

    errors = getattr(exc, "errors", None) or {}
    return any(isinstance(e, AuthenticationFailed) for e in errors.values())


def cassandra_cluster(
    settings: Settings,
    *,
    timeout: float = 10.0,
    superuser: bool = False,
    login: tuple[str, str] | None = None,
) -> Any:
    """A cassandra-driver Cluster (not yet connected) as cronstream's user, the super
    user, or ``login`` (user, password); the caller shuts it down.

    A host that went down is tried again every 0.5 s doubling to 5 s (the driver's
    default climbs to 10 minutes, which would keep the sink waiting long after a
    restarted Cassandra is back)."""
    from cassandra import ConsistencyLevel
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, ExponentialReconnectionPolicy

    profile = ExecutionProfile(
        load_balancing_policy=DCAwareRoundRobinPolicy(),
        request_timeout=max(timeout, 10.0),
        consistency_level=getattr(ConsistencyLevel, CONSISTENCY),
    )
    secured: dict[str, Any] = {}
    if settings.cassandra_security != "none":
        if login is None:
            user = CASSANDRA_ADMIN if superuser else settings.cassandra_user
            login = (user, cassandra_password(settings, user))
        secured = {
            "auth_provider": PlainTextAuthProvider(username=login[0], password=login[1]),
            "ssl_context": cassandra_tls(settings),
            "ssl_options": {"server_hostname": settings.cassandra_hosts[0]},
        }
    return Cluster(
        list(settings.cassandra_hosts),
        port=settings.cassandra_port,
        connect_timeout=timeout,
        control_connection_timeout=timeout,
        execution_profiles={EXEC_PROFILE_DEFAULT: profile},
        protocol_version=5,
        reconnection_policy=ExponentialReconnectionPolicy(0.5, 5.0),
        **secured,
    )


def cassandra_session(
    settings: Settings,
    *,
    timeout: float = 10.0,
    keyspace: str | None = None,
    superuser: bool = False,
    login: tuple[str, str] | None = None,
) -> tuple[Any, Any]:
    """A (Cluster, Session) pair on the configured hosts (in ``keyspace`` when given);
    the caller shuts the cluster down."""
    cluster = cassandra_cluster(settings, timeout=timeout, superuser=superuser, login=login)
    try:
        session = cluster.connect(keyspace)
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, session
