"""Cassandra client security settings (runtime.cassandra): the login and its password."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronstream.runtime.cassandra import CASSANDRA_ADMIN, cassandra_password
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.settings import Settings


def test_defaults_and_a_refused_mode(tmp_path: Path) -> None:
    s = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert (s.cassandra_security, s.cassandra_user, s.cassandra_ca) == (
        "password_tls",
        "cronstream_app",
        None,
    )
    with pytest.raises(SettingsError, match="use password_tls or none"):
        Settings.from_env({"CRONSTREAM_CASSANDRA_SECURITY": "kerberos"})


def test_the_password_comes_from_the_environment_a_file_or_the_stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    credentials = tmp_path / "data" / "security" / "credentials"
    credentials.mkdir(parents=True)
    (credentials / "cassandra-cronstream_app.secret").write_text("stack\n")
    (credentials / f"cassandra-{CASSANDRA_ADMIN}.secret").write_text("admin\n")
    assert cassandra_password(s, "cronstream_app") == "stack"
    named = tmp_path / "pw"
    named.write_text("file\n")
    monkeypatch.setenv("CRONSTREAM_CASSANDRA_PASSWORD_FILE", str(named))
    assert cassandra_password(s, "cronstream_app") == "file"
    monkeypatch.setenv("CRONSTREAM_CASSANDRA_PASSWORD", "env")
    assert cassandra_password(s, "cronstream_app") == "env"
    assert cassandra_password(s, CASSANDRA_ADMIN) == "admin"  # the variables: the user only
    with pytest.raises(SettingsError, match="no password for Cassandra user 'nobody'"):
        cassandra_password(s, "nobody")
