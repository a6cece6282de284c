"""Schema registry logins (runtime.registry) and the registry's access file
(infra.services.registry_access)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronstream.infra.services import registry_access
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.registry import registry_client, registry_login
from cronstream.runtime.settings import Settings


def test_reading_is_anonymous_unless_a_user_is_set_and_writing_takes_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert (s.registry_user, s.registry_writer, s.registry_ca) == (
        None,
        "cronstream-bootstrap",
        None,
    )
    assert registry_login(s) is None
    with pytest.raises(SettingsError, match="no password for schema registry user"):
        registry_login(s, writer=True)
    credentials = tmp_path / "data" / "security" / "credentials"
    credentials.mkdir(parents=True)
    (credentials / "registry-cronstream-bootstrap.secret").write_text("stack\n")
    assert registry_login(s, writer=True) == ("cronstream-bootstrap", "stack")
    monkeypatch.setenv("CRONSTREAM_REGISTRY_WRITER_PASSWORD", "env")
    assert registry_login(s, writer=True) == ("cronstream-bootstrap", "env")
    monkeypatch.setenv("CRONSTREAM_REGISTRY_PASSWORD", "reader")
    reading = Settings.from_env(
        {"CRONSTREAM_HOME": str(tmp_path), "CRONSTREAM_REGISTRY_USER": "me"}
    )
    assert registry_login(reading) == ("me", "reader")
    with registry_client(reading) as client:
        assert client.user == "me"


def test_the_access_file_lets_anyone_read_and_only_the_writer_change() -> None:
    text = registry_access("cronstream-bootstrap", "s3cret")
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    assert lines["quarkus.security.users.embedded.users.cronstream-bootstrap"] == "s3cret"
    assert lines["quarkus.security.users.embedded.roles.cronstream-bootstrap"] == "registry-writer"
    assert lines["apicurio.auth.anonymous-read-access.enabled"] == "true"
    rules: dict[str, dict[str, str]] = {}  # path -> method -> policy
    for key, value in lines.items():
        if key.startswith("quarkus.http.auth.permission.") and key.endswith(".paths"):
            name = key.split(".")[4]
            base = f"quarkus.http.auth.permission.{name}"
            for path in value.split(","):
                for method in lines[f"{base}.methods"].split(","):
                    assert method not in rules.setdefault(path, {}), (path, method)
                    rules[path][method] = lines[f"{base}.policy"]
    # Quarkus takes the longest matching path and denies a method none of its rules
    # list: every path a rule names must let reads through, or it shadows them.
    for path, methods in rules.items():
        assert {methods.get(m) for m in ("GET", "HEAD", "OPTIONS")} == {"permit"}, path
    assert rules["/apis/*"] == {
        "GET": "permit",
        "HEAD": "permit",
        "OPTIONS": "permit",
        "POST": "writer",
        "PUT": "writer",
        "DELETE": "writer",
        "PATCH": "writer",
    }
    versions = "/apis/ccompat/v7/subjects/*/versions"
    assert rules[versions]["POST"] == "writer"  # registering
    assert rules["/apis/ccompat/v7/subjects/*"]["POST"] == "permit"  # looking up
    assert rules["/apis/ccompat/v7/subjects/*"]["DELETE"] == "writer"
