"""Kafka client security settings (runtime.kafka.security): where the password comes
from, and what librdkafka is told."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from cronstream.runtime.errors import KafkaAuthError, SettingsError
from cronstream.runtime.kafka.security import (
    admin_security,
    client_properties,
    client_security,
    kafka_password,
    refuse_bad_credentials,
)
from cronstream.runtime.settings import Settings


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env({"CRONSTREAM_HOME": str(tmp_path), **env})


def test_defaults_are_the_local_stacks_secured_listeners(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert (s.kafka_security, s.kafka_user) == ("sasl_ssl", "cronstream-app")
    assert (s.bootstrap_servers, s.admin_servers) == ("127.0.0.1:9092", "127.0.0.1:9095")
    assert s.kafka_plaintext_port == 9094
    with pytest.raises(SettingsError, match="use sasl_ssl or plaintext"):
        settings(tmp_path, CRONSTREAM_KAFKA_SECURITY="ssl-please")


def test_the_password_comes_from_the_environment_a_named_file_or_the_stack(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    stack_secret = tmp_path / "data" / "security" / "credentials" / "cronstream-app.secret"
    stack_secret.parent.mkdir(parents=True)
    stack_secret.write_text("from-the-stack\n")
    named = tmp_path / "pw"
    named.write_text("from-a-file\n")
    assert kafka_password(s, {}) == "from-the-stack"
    assert kafka_password(s, {"CRONSTREAM_KAFKA_PASSWORD_FILE": str(named)}) == "from-a-file"
    both = {"CRONSTREAM_KAFKA_PASSWORD_FILE": str(named), "CRONSTREAM_KAFKA_PASSWORD": "env"}
    assert kafka_password(s, both) == "env"
    with pytest.raises(SettingsError, match="no password for Kafka user 'nobody'"):
        kafka_password(settings(tmp_path, CRONSTREAM_KAFKA_USER="nobody"), {})


def test_librdkafka_gets_scram_over_tls_and_the_properties_file_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRONSTREAM_KAFKA_PASSWORD", "s3cret")
    s = settings(tmp_path, CRONSTREAM_KAFKA_CA=str(tmp_path / "my-ca.pem"))
    config = client_security(s)
    assert config["security.protocol"] == "SASL_SSL"
    assert config["sasl.mechanisms"] == "SCRAM-SHA-512"
    assert (config["sasl.username"], config["sasl.password"]) == ("cronstream-app", "s3cret")
    assert config["ssl.ca.location"] == str(tmp_path / "my-ca.pem")
    lines = client_properties(s).splitlines()  # kcat: the client certificate, mTLS
    assert "bootstrap.servers=127.0.0.1:9095" in lines
    assert "security.protocol=SSL" in lines
    assert f"ssl.certificate.location={tmp_path}/data/security/tls/cronstream-app.pem" in lines
    assert not [line for line in lines if "password" in line]
    assert admin_security(s)["ssl.certificate.location"].endswith("tls/admin.pem")
    plain = settings(tmp_path, CRONSTREAM_KAFKA_SECURITY="plaintext")
    assert client_security(plain) == {}


def test_an_authentication_error_is_raised_other_errors_are_left_to_librdkafka() -> None:
    on_error = refuse_bad_credentials("cronstream-app")
    on_error(KafkaError(KafkaError._TRANSPORT, "broker went away"))  # retried by librdkafka
    # A connection lost mid-handshake is reported as an authentication error: transient
    # (make bench: a client's close raised this and ended the benchmark).
    on_error(
        KafkaError(
            KafkaError._AUTHENTICATION,
            "SASL SCRAM-SHA-512 mechanism handshake "
            "failed: Local: Broker transport failure: broker's supported "
            "mechanisms: (n/a) (after 0ms in state DOWN)",
        )
    )
    with pytest.raises(KafkaAuthError, match="Kafka refused user 'cronstream-app'"):
        on_error(KafkaError(KafkaError._AUTHENTICATION, "invalid credentials"))
    with pytest.raises(KafkaAuthError):
        on_error(KafkaError(KafkaError._SSL, "certificate verify failed"))


def test_each_role_connects_as_its_own_user_unless_one_is_set(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert [s.as_role(r).kafka_user for r in ("scheduler", "worker", "sink")] == [
        "cronstream-scheduler",
        "cronstream-worker",
        "cronstream-sink",
    ]
    assert s.kafka_user == "cronstream-app"  # the CLI, an operator's
    assert s.as_role("api").acting_as("tenant-a").kafka_user == "cronstream-api"
    for env in (
        {"CRONSTREAM_KAFKA_USER": "ops"},
        {"CRONSTREAM_KAFKA_PASSWORD": "x"},
        {"CRONSTREAM_KAFKA_PASSWORD_FILE": "/p"},
    ):
        explicit = settings(tmp_path, **env)
        assert explicit.as_role("worker").kafka_user == explicit.kafka_user
        assert explicit.acting_as("tenant-a").kafka_user == explicit.kafka_user
    with pytest.raises(ValueError, match="unknown role 'janitor'"):
        s.as_role("janitor")


def test_the_sink_and_the_api_use_their_own_cassandra_logins(tmp_path: Path) -> None:
    s = settings(tmp_path)
    assert s.cassandra_user == "cronstream_app"
    assert {r: s.as_role(r).cassandra_user for r in ("sink", "api", "worker", "scheduler")} == {
        "sink": "cronstream_sink",
        "api": "cronstream_api",
        "worker": "cronstream_app",
        "scheduler": "cronstream_app",
    }
    ops = settings(tmp_path, CRONSTREAM_CASSANDRA_USER="ops")
    assert ops.as_role("sink").cassandra_user == "ops"
    assert settings(tmp_path, CRONSTREAM_CASSANDRA_PASSWORD="x").as_role("api").cassandra_user == (
        "cronstream_app"
    )
