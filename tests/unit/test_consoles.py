"""The stack's consoles: how a client finds one and its login (runtime.consoles), and
the Connect worker's own locks: its REST API's login, the one client setting a
connector may override and the one folder its file config provider may read."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronstream.infra.connect import Connect, connector_secrets_dir, history_sink_config
from cronstream.infra.ops import ops_services
from cronstream.runtime.consoles import CONSOLE_USER, console_access, console_secret_path
from cronstream.runtime.credentials import stack_ca
from cronstream.runtime.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})


def test_a_console_is_the_local_stacks_unless_the_environment_names_another(
    settings: Settings, tmp_path: Path
) -> None:
    nothing = console_access(settings, "prometheus", {})
    assert nothing.url == "https://127.0.0.1:9190"
    assert nothing.auth is None  # no password anywhere: asked anonymously (401)
    assert nothing.ca == stack_ca(settings)
    stored = console_secret_path(settings, "prometheus")
    stored.parent.mkdir(parents=True)
    stored.write_text("stored-password\n")
    assert console_access(settings, "prometheus", {}).auth == (CONSOLE_USER, "stored-password")
    assert console_access(settings, "connect", {}).url == "http://127.0.0.1:8083"
    secret = tmp_path / "prometheus.secret"
    secret.write_text("their-password\n")
    env = {
        "CRONSTREAM_PROMETHEUS_URL": "https://prometheus.example:9090/",
        "CRONSTREAM_PROMETHEUS_USER": "dashboard",
        "CRONSTREAM_PROMETHEUS_PASSWORD_FILE": str(secret),
        "CRONSTREAM_PROMETHEUS_CA": str(tmp_path / "ca.pem"),
    }
    theirs = console_access(settings, "prometheus", env)
    assert theirs.url == "https://prometheus.example:9090"
    assert theirs.auth == ("dashboard", "their-password")
    assert theirs.ca == tmp_path / "ca.pem"
    port = console_access(settings, "alertmanager", {"CRONSTREAM_ALERTMANAGER_PORT": "9999"})
    assert port.url == "https://127.0.0.1:9999"


def test_connect_wants_a_login_and_lets_connectors_override_their_group_alone(
    settings: Settings,
) -> None:
    connect = Connect(settings)
    connect.prepare()
    lines = connect.properties.read_text().splitlines()
    worker = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    assert worker["rest.extension.classes"].endswith(".BasicAuthSecurityRestExtension")
    assert worker["connector.client.config.override.policy"] == "Allowlist"
    assert worker["connector.client.config.override.allowlist"] == "group.id"
    assert worker["config.providers.file.param.allowed.paths"] == str(
        connector_secrets_dir(settings)
    )
    # the provider refuses to start unless that folder exists (a fresh clone: CI's stop 51)
    assert connector_secrets_dir(settings).is_dir()
    assert connector_secrets_dir(settings).stat().st_mode & 0o077 == 0
    # what the history sink overrides and reads is within those bounds
    sink = history_sink_config(settings, table="t", name="n")
    overrides = {k.split(".override.", 1)[1] for k in sink if ".override." in k}
    assert overrides == {"group.id"}
    password_file = Path(sink["connection.password"].split(":")[1])
    assert password_file.parent == connector_secrets_dir(settings)
    # the REST login: the JAAS file names a users file that is not empty (an empty one
    # lets every request through) and holds the operator's stored password
    assert f"-Djava.security.auth.login.config={connect.jaas}" in connect.command()
    jaas = connect.jaas.read_text()
    assert jaas.startswith("KafkaConnect {")
    users = Path(jaas.split('file="', 1)[1].split('"', 1)[0])
    password = console_secret_path(settings, "connect").read_text().strip()
    assert users.read_text() == f"{CONSOLE_USER}={password}\n"
    for private in (users, connect.jaas, connect.properties):
        assert private.stat().st_mode & 0o077 == 0, private


def test_prometheus_and_alertmanager_run_with_their_web_config_and_no_lifecycle_api(
    settings: Settings,
) -> None:
    for service in ops_services(settings):
        command = service.command()
        web = f"--web.config.file={service.conf / f'{service.name}-web.yml'}"
        assert web in command, service.name
        assert "--web.enable-lifecycle" not in command, service.name  # /-/quit, /-/reload
        assert service.endpoint.startswith("https://127.0.0.1:")
