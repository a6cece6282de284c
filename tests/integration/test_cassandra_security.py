"""The secured Cassandra: TLS only, passwords checked, the default role
disabled, and cronstream's user limited to reading and writing its keyspaces."""

from __future__ import annotations

import uuid

import pytest
from cassandra import AuthenticationFailed, Unauthorized
from cassandra.cluster import NoHostAvailable

from cronstream.runtime.cassandra import CASSANDRA_DEFAULT_ROLE, cassandra_session
from cronstream.runtime.settings import Settings

pytestmark = pytest.mark.integration


def _refusal(settings: Settings, **kwargs: object) -> Exception:
    with pytest.raises(NoHostAvailable) as caught:
        cassandra_session(settings, timeout=5, **kwargs)  # type: ignore[arg-type]
    (error,) = caught.value.errors.values()
    return error  # type: ignore[no-any-return]


def test_a_wrong_password_and_the_default_role_are_refused(stack: Settings) -> None:
    wrong = _refusal(stack, login=("cronstream_app", "not-" + uuid.uuid4().hex))
    assert isinstance(wrong, AuthenticationFailed)
    default = _refusal(stack, login=CASSANDRA_DEFAULT_ROLE)
    assert isinstance(default, AuthenticationFailed)


def test_a_client_without_tls_gets_nothing(stack: Settings) -> None:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster

    cluster = Cluster(
        list(stack.cassandra_hosts),
        port=stack.cassandra_port,
        protocol_version=5,
        auth_provider=PlainTextAuthProvider("cronstream_app", "x"),
        connect_timeout=5,
    )
    try:
        with pytest.raises(NoHostAvailable):
            cluster.connect()
    finally:
        cluster.shutdown()


def test_cronstreams_user_reads_and_writes_its_keyspace_and_changes_nothing_else(
    history_ns: Settings,
) -> None:
    cluster, session = cassandra_session(history_ns, keyspace=history_ns.keyspace)
    try:
        session.execute("SELECT run_id FROM runs_by_id LIMIT 1")
        with pytest.raises(Unauthorized):
            session.execute(f"DROP TABLE {history_ns.keyspace}.runs_by_id")
        with pytest.raises(Unauthorized):
            session.execute(
                "CREATE KEYSPACE cstest_nope WITH replication = "
                "{'class': 'SimpleStrategy', 'replication_factor': 1}"
            )
        with pytest.raises(Unauthorized):
            session.execute("CREATE ROLE someone WITH LOGIN = true AND PASSWORD = 'x'")
    finally:
        cluster.shutdown()


def test_the_sink_writes_history_and_the_api_only_reads_it(history_ns: Settings) -> None:
    insert = (
        "INSERT INTO runs_by_id (run_id, attempt, recorded_at, status) "
        "VALUES (%s, 1, toTimestamp(now()), 'SUCCEEDED')"
    )
    for role, writes in (("sink", True), ("api", False)):
        as_role = history_ns.as_role(role)
        assert as_role.cassandra_user == f"cronstream_{role}"
        cluster, session = cassandra_session(as_role, keyspace=history_ns.keyspace)
        try:
            session.execute("SELECT run_id FROM runs_by_id LIMIT 1")
            if writes:
                session.execute(insert, [f"r-{role}"])
            else:
                with pytest.raises(Unauthorized):
                    session.execute(insert, [f"r-{role}"])
            with pytest.raises(Unauthorized):
                session.execute(f"DROP TABLE {history_ns.keyspace}.runs_by_id")
        finally:
            cluster.shutdown()
