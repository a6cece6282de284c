"""How a cronstream client proves who it is to Kafka.

The local stack's broker (``infra.services.Kafka``) has three client listeners:

- ``o.KAFKA_PORT`` (9092): SASL_SSL, SCRAM-SHA-512 over TLS. Every cronstream process
  and operator connects here as a Kafka user (``o.KAFKA_USER``, by default
  ``cronstream-app``) with its password.
- ``o.KAFKA_ADMIN_PORT`` (9095): TLS with client certificates, the certificate's
  CN the user. The bootstrap and the readiness probe act here as the super user
  ``cronstream-admin`` (the stack's ``tls/admin.pem``), which creates users, ACLs and
  topics; kcat as cronstream's user (``tls/<user>.pem``, the same ACLs).
- ``o.KAFKA_PLAINTEXT_PORT`` (9094): no authentication, and no rights but on
  the ``bench-plain.`` topics: the secured-vs-plaintext benchmark.

The password comes from ``o.KAFKA_PASSWORD``, else the file named by
``o.KAFKA_PASSWORD_FILE``, else the stack's ``credentials/<user>.secret``. It
is read when a client is built and never logged. Kafka refusing it ends the process with
``KafkaAuthError`` (librdkafka alone would retry forever, saying nothing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError

from cronstream.runtime.credentials import credentials_dir, read_password, stack_ca, tls_dir
from cronstream.runtime.errors import KafkaAuthError
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

BROKER_PRINCIPAL = "cronstream-broker"
ADMIN_PRINCIPAL = "cronstream-admin"
BENCH_PLAIN_PREFIX = "bench-plain."  # what anonymous plaintext clients may use
SCRAM = "SCRAM-SHA-512"


def ca_location(settings: Settings) -> str:
    return str(settings.kafka_ca or stack_ca(settings))


def kafka_secret_path(settings: Settings, user: str) -> Path:
    return credentials_dir(settings) / f"{user}.secret"


def kafka_password(settings: Settings, env: Mapping[str, str] | None = None) -> str:
    """The password of ``settings.kafka_user`` (see the module's text for where)."""
    user, env = settings.kafka_user, os.environ if env is None else env
    stored = kafka_secret_path(settings, user)
    return read_password("Kafka", user, stored, env, o.KAFKA_PASSWORD, o.KAFKA_PASSWORD_FILE)


# librdkafka reports a connection lost during the SASL handshake as an authentication
# error too ("SaslAuthenticateRequest failed: Local: Broker transport failure"; seen when
# a group coordinator connection is torn down at close, and under load; "... Local:
# Broker handle destroyed" when the client is destroyed meanwhile): transient. So is a
# handshake that timed out ("SASL SCRAM-SHA-512 mechanism handshake failed: Local: Timed
# out", "... Local: Timed out in queue": a worker of the cluster test exited on it, the
# 3 brokers loaded on 2 cores); a wrong password says "invalid credentials".
HANDSHAKE_CUT = (
    "Local: Broker transport failure",
    "Local: Broker handle destroyed",
    "Local: Timed out",
)


def handshake_cut(text: str) -> bool:
    """Whether an authentication failure's text says the connection went away during the
    handshake (its client closed it, or lost it: librdkafka connects again if it goes
    on), not that Kafka refused the login. The error callback and the CLI's log
    (``runtime.kafka.logs``) both ask this."""
    return any(cut in text for cut in HANDSHAKE_CUT)


def refuse_bad_credentials(user: str) -> Any:
    """An ``error_cb`` that turns an authentication or TLS failure into KafkaAuthError,
    raised from the client call that served it (poll, consume, flush); a connection
    lost during the handshake is left to librdkafka, which connects again."""

    def on_error(err: KafkaError) -> None:
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) and not handshake_cut(
            err.str()
        ):
            raise KafkaAuthError(f"Kafka refused user {user!r}: {err.str()}")

    return on_error


def client_security(settings: Settings) -> dict[str, Any]:
    """The librdkafka settings of an ordinary client of ``settings``."""
    if settings.kafka_security == "plaintext":
        return {}
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": SCRAM,
        "sasl.username": settings.kafka_user,
        "sasl.password": kafka_password(settings),
        "ssl.ca.location": ca_location(settings),
        "ssl.endpoint.identification.algorithm": "https",
        "error_cb": refuse_bad_credentials(settings.kafka_user),
    }


def _mtls(settings: Settings, certificate: Path) -> dict[str, Any]:
    """The librdkafka settings of a client known by ``certificate`` (key and certificate,
    PEM) on the mTLS listener."""
    return {
        "bootstrap.servers": settings.admin_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": ca_location(settings),
        "ssl.certificate.location": str(certificate),
        "ssl.key.location": str(certificate),
        "ssl.endpoint.identification.algorithm": "https",
    }


def admin_certificate(settings: Settings) -> Path:
    """The stack's certificate of the super user ``cronstream-admin``."""
    return tls_dir(settings) / "admin.pem"


def admin_security(settings: Settings) -> dict[str, Any]:
    """The librdkafka settings of the super user: the stack's admin certificate on the
    admin listener (bootstrap, readiness, tests' namespaces)."""
    if settings.kafka_security == "plaintext":
        return {"bootstrap.servers": settings.bootstrap_servers}
    return {
        **_mtls(settings, admin_certificate(settings)),
        "error_cb": refuse_bad_credentials(ADMIN_PRINCIPAL),
    }


def client_certificate(settings: Settings, user: str | None = None) -> Path:
    """The stack's client certificate (key and certificate, PEM) of a Kafka user."""
    return tls_dir(settings) / f"{user or settings.kafka_user}.pem"


def client_properties(settings: Settings) -> str:
    """A librdkafka properties file for kcat (-F) and other tools: cronstream's user by
    its client certificate on the mTLS listener, where the same ACLs apply (the
    Debian kcat's librdkafka 2.0 cannot do SCRAM with a Kafka 4 broker: its client
    proof repeats the nonce, fixed in librdkafka 2.6.1)."""
    if settings.kafka_security == "plaintext":
        return f"bootstrap.servers={settings.bootstrap_servers}\n"
    config = _mtls(settings, client_certificate(settings))
    return "".join(f"{key}={value}\n" for key, value in config.items())


def aiokafka_security(settings: Settings) -> dict[str, Any]:
    """``client_security`` for aiokafka (and faust, which passes these through)."""
    if settings.kafka_security == "plaintext":
        return {}
    from aiokafka.helpers import create_ssl_context

    return {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": SCRAM,
        "sasl_plain_username": settings.kafka_user,
        "sasl_plain_password": kafka_password(settings),
        "ssl_context": create_ssl_context(cafile=ca_location(settings)),
    }
