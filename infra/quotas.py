"""Kafka client quotas per tenant principal, through Kafka's own
``ConfigCommand`` as the super user: confluent-kafka has no ``alter_client_quotas``.

A tenant's Kafka user gets ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, per broker) and ``request_percentage`` (of one request handler thread); the
broker throttles a client over them (its produce/fetch responses are delayed), which
librdkafka reports as throttle time. One JVM start per call (a few seconds), so
``tenants add`` sets them once per tenant.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from cronstream.infra.errors import BootstrapError
from cronstream.infra.security import write_private
from cronstream.infra.services import Kafka
from cronstream.runtime.credentials import security_dir
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
# What `tenants add` gives a tenant: each quota's setting (its default unless told
# otherwise; 0: none).
SETTINGS = {
    "producer_byte_rate": r.TENANT_PRODUCE_BYTES_PER_S,
    "consumer_byte_rate": r.TENANT_FETCH_BYTES_PER_S,
    "request_percentage": r.TENANT_REQUEST_PERCENTAGE,
}


def default_quotas(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """A new tenant's quotas; SettingsError naming the variable for a value that is not
    a whole number of 0 or more."""
    return {key: int(option.get(env)) for key, option in SETTINGS.items()}


def _config_command(settings: Settings, *args: str) -> str:
    return Kafka(settings).admin_tool(
        CONFIG_COMMAND, "--entity-type", "users", *args, error=BootstrapError
    )


def set_quotas(settings: Settings, user: str, quotas: Mapping[str, int]) -> None:
    """``user``'s client quotas: a value over 0 sets that one, 0 removes it (one the
    broker does not have is no error). What is set is kept in the stack's record
    (``quota_record``), so that ``drop_quotas`` can remove it without asking."""
    add = {k: v for k, v in quotas.items() if v > 0}
    drop = [k for k, v in quotas.items() if v <= 0]
    if drop:  # ConfigCommand refuses to delete a quota the user does not have
        present = quotas_of(settings, user)
        drop = [k for k in drop if k in present]
    if add or drop:
        _alter(settings, user, add, drop)
    record = {**_recorded(settings, user), **add}
    _keep(settings, user, {k: v for k, v in record.items() if k not in drop})


def drop_quotas(settings: Settings, user: str) -> None:
    """Remove the client quotas the stack set for ``user`` (a retired tenant's)."""
    recorded = _recorded(settings, user)
    if recorded:
        try:
            _alter(settings, user, {}, list(recorded))
        except BootstrapError:  # the broker lost some already (a wiped metadata log)
            present = quotas_of(settings, user)
            if present:
                _alter(settings, user, {}, list(present))
    quota_record(settings, user).unlink(missing_ok=True)


def quota_record(settings: Settings, user: str) -> Path:
    """Where the stack keeps the client quotas it set for ``user`` (JSON)."""
    return security_dir(settings) / "quotas" / f"{user}.json"


def _recorded(settings: Settings, user: str) -> dict[str, int]:
    path = quota_record(settings, user)
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text())
    return {str(k): int(v) for k, v in loaded.items()}


def _keep(settings: Settings, user: str, quotas: Mapping[str, int]) -> None:
    path = quota_record(settings, user)
    if quotas:
        write_private(path, json.dumps(dict(quotas), sort_keys=True).encode())
    else:
        path.unlink(missing_ok=True)


def _alter(settings: Settings, user: str, add: Mapping[str, int], drop: list[str]) -> None:
    args = ["--alter", "--entity-name", user]
    if add:
        args += ["--add-config", ",".join(f"{k}={v}" for k, v in add.items())]
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
