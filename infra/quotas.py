"""Kafka client quotas per tenant principal (issue 16), through Kafka's own
``ConfigCommand`` as the super user: confluent-kafka has no ``alter_client_quotas``.

A tenant's Kafka user gets ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, per broker) and ``request_percentage`` (of one request handler thread); the
broker throttles a client over them (its produce/fetch responses are delayed), which
librdkafka reports as throttle time. One JVM start per call (a few seconds), so
``tenants add`` sets them once per tenant.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from infra.bootstrap import BootstrapError
from infra.security import write_private
from infra.services import Kafka
from runtime.credentials import security_dir, stack_ca
from runtime.kafka.security import admin_certificate
from runtime.settings import Settings

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
# What `tenants add` gives a tenant unless told otherwise (0: none).
DEFAULTS = {"producer_byte_rate": 1_048_576, "consumer_byte_rate": 4_194_304,
            "request_percentage": 25}  # fmt: skip
ENV = {"producer_byte_rate": "CRONSTREAM_TENANT_PRODUCE_BYTES_PER_S",
       "consumer_byte_rate": "CRONSTREAM_TENANT_FETCH_BYTES_PER_S",
       "request_percentage": "CRONSTREAM_TENANT_REQUEST_PERCENTAGE"}  # fmt: skip


def default_quotas(env: Mapping[str, str] | None = None) -> dict[str, int]:
    env = os.environ if env is None else env
    out = {}
    for key, default in DEFAULTS.items():
        text = env.get(ENV[key])
        value = int(text) if text else default
        if value < 0:
            raise BootstrapError(f"{ENV[key]} must be 0 or more, not {value}")
        out[key] = value
    return out


def _admin_properties(settings: Settings) -> str:
    """A Java client config for the super user on the mTLS listener (0600)."""
    path = security_dir(settings) / "kafka-admin-java.properties"
    ca = settings.kafka_ca or stack_ca(settings)
    lines = ["security.protocol=SSL", "ssl.keystore.type=PEM",
             f"ssl.keystore.location={admin_certificate(settings)}",
             "ssl.truststore.type=PEM", f"ssl.truststore.location={ca}"]  # fmt: skip
    write_private(path, ("\n".join(lines) + "\n").encode())
    return str(path)


def _config_command(settings: Settings, *args: str) -> str:
    done = Kafka(settings).tool(
        CONFIG_COMMAND, "--bootstrap-server", settings.admin_servers,
        "--command-config", _admin_properties(settings), "--entity-type", "users", *args,
    )  # fmt: skip
    if done.returncode != 0:
        raise BootstrapError(f"Kafka's ConfigCommand failed: {(done.stdout + done.stderr)[-1500:]}")
    return done.stdout


def set_quotas(settings: Settings, user: str, quotas: Mapping[str, int]) -> None:
    """``user``'s client quotas: a 0 removes that one."""
    add = [f"{k}={v}" for k, v in quotas.items() if v > 0]
    drop = [k for k, v in quotas.items() if v <= 0]
    args = ["--alter", "--entity-name", user]
    if add:
        args += ["--add-config", ",".join(add)]
    if drop:
        args += ["--delete-config", ",".join(drop)]
    _config_command(settings, *args)


def quotas_of(settings: Settings, user: str) -> dict[str, float]:
    """``user``'s client quotas as the broker has them."""
    out = _config_command(settings, "--describe", "--entity-name", user)
    # "Quota configs for user-principal 'tenant-a' are producer_byte_rate=1048576.0, ..."
    # (other lines: SCRAM credentials, log output)
    line = next((ln for ln in out.splitlines() if ln.startswith("Quota configs for")), "")
    _, _, tail = line.strip().partition(" are ")
    pairs = (item.strip().partition("=") for item in tail.split(",") if "=" in item)
    return {key: float(value) for key, _, value in pairs}
