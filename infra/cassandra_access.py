"""Cassandra's users for cronstream (runtime.cassandra), made by the bootstrap.

A fresh node has only the default role ``cassandra``/``cassandra``. The bootstrap logs in
with it once, creates the super user ``cronstream_admin`` with the stack's password for
it, and disables the default role (no login, no super user). Then, as
``cronstream_admin``: cronstream's user (``o.CASSANDRA_USER``) exists, and may
SELECT and MODIFY in each keyspace the bootstrap migrates (``grant_keyspace``); so does
the sink's ``cronstream_sink``; the API's ``cronstream_api`` may SELECT only. None can
create, alter or drop anything. Idempotent.
"""

from __future__ import annotations

import time
from typing import Any

from cronstream.infra.errors import CassandraAccessError
from cronstream.infra.security import ensure_secret_file
from cronstream.runtime.cassandra import (
    CASSANDRA_ADMIN,
    CASSANDRA_DEFAULT_ROLE,
    cassandra_password,
    cassandra_secret_path,
    cassandra_session,
    login_refused,
)
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import ROLES, cassandra_role_user

TAKEOVER_S = 60.0  # how long a fresh node may take to create its default role


def admin_session(settings: Settings) -> tuple[Any, Any]:
    """(Cluster, Session) as cronstream_admin, taking over from the default role on a
    fresh node. The caller shuts the cluster down."""
    from cassandra.cluster import NoHostAvailable

    password = ensure_secret_file(settings, cassandra_secret_path(settings, CASSANDRA_ADMIN))
    deadline = time.monotonic() + TAKEOVER_S
    while True:
        try:
            return cassandra_session(settings, login=(CASSANDRA_ADMIN, password))
        except NoHostAvailable as exc:
            if not login_refused(exc):  # not answering yet (a node just started)
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                continue
        try:
            cluster, session = cassandra_session(settings, login=CASSANDRA_DEFAULT_ROLE)
        except NoHostAvailable as exc:
            if not login_refused(exc) or time.monotonic() > deadline:
                raise CassandraAccessError(
                    "Cassandra refuses cronstream_admin (is .stack/data/security from "
                    "another stack?) and the default role"
                ) from exc
            time.sleep(1.0)  # a fresh node: its default role is not made yet
            continue
        try:
            session.execute(
                f"CREATE ROLE IF NOT EXISTS {CASSANDRA_ADMIN} "
                "WITH SUPERUSER = true AND LOGIN = true AND PASSWORD = %s",
                [password],
            )
        finally:
            cluster.shutdown()


def _history_users(settings: Settings) -> dict[str, tuple[str, ...]]:
    """Each login of cronstream's and what it may do on a keyspace: the configured user
    (the CLI's, operators') SELECT and MODIFY; each role with history access
    (``schemas.catalog.ROLES``) its own: the sink SELECT and MODIFY, the API SELECT."""
    users: dict[str, tuple[str, ...]] = {settings.cassandra_user: ("SELECT", "MODIFY")}
    for role, access in ROLES.items():
        if access.history:
            users[cassandra_role_user(role)] = (
                ("SELECT", "MODIFY") if access.history == "write" else ("SELECT",)
            )
    return users


def ensure_cassandra_access(settings: Settings, session: Any) -> None:
    """With ``session`` as cronstream_admin: the default role disabled, cronstream's
    users made (``_history_users``)."""
    session.execute("ALTER ROLE cassandra WITH SUPERUSER = false AND LOGIN = false")
    for user in _history_users(settings):
        if session.execute("SELECT role FROM system_auth.roles WHERE role = %s", [user]).one():
            continue
        try:
            password = cassandra_password(settings, user)
        except SettingsError:
            password = ensure_secret_file(settings, cassandra_secret_path(settings, user))
        session.execute(
            f'CREATE ROLE IF NOT EXISTS "{user}" WITH LOGIN = true AND PASSWORD = %s', [password]
        )


def grant_keyspace(settings: Settings, session: Any, keyspace: str) -> None:
    """Cronstream's users may use ``keyspace`` as ``_history_users`` says (and nothing
    more)."""
    for user, permissions in _history_users(settings).items():
        for permission in permissions:
            session.execute(f'GRANT {permission} ON KEYSPACE {keyspace} TO "{user}"')
