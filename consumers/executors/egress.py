"""Kafka producers that log in as a job's tenant, for its ``kafka`` targets.

A tenant's job writes with the tenant's own Kafka user (``tenant-<name>``), so the
broker's ACLs decide where it may write: ``tenants add`` grants WRITE on the topics
named ``<tenant>.*``; an operator may grant more. Jobs of the ``default`` tenant (an
operator's) write with the worker's user. The passwords are files
``tenant-<name>.secret`` in one directory (the local stack's credentials by default,
``--tenant-credentials DIR`` otherwise); a tenant without one gets a clear refusal,
never the worker's rights. Producers are made on first use and at most ``limit`` are
kept (the least recently used is flushed and dropped).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from cronstream.consumers.errors import TargetInvalid
from cronstream.runtime.kafka.clients import KafkaError, Producer, kafka_producer
from cronstream.runtime.settings import Settings
from cronstream.schemas.tenancy import tenant_user


class TenantProducers:
    def __init__(self, settings: Settings, credentials: Path, *, limit: int = 64) -> None:
        self.settings = settings
        self.credentials = credentials
        self.limit = limit
        self._producers: OrderedDict[str, Producer] = OrderedDict()
        self._refused: dict[str, str] = {}  # user -> the broker's last refusal
        self._lock = threading.Lock()

    def producer(self, tenant: str) -> Producer:
        """``tenant``'s producer; TargetInvalid when there is no password for it."""
        with self._lock:
            found = self._producers.get(tenant)
            if found is not None:
                self._producers.move_to_end(tenant)
                return found
        user = tenant_user(tenant)
        path = self.credentials / f"{user}.secret"
        try:
            password = path.read_text().strip()
        except OSError:
            raise TargetInvalid(
                f"no Kafka credentials for tenant {tenant!r} (user {user}): its kafka "
                f"targets write as the tenant, never as the worker"
            ) from None
        made = kafka_producer(
            self.settings,
            **{
                "sasl.username": user,
                "sasl.password": password,
                "error_cb": self._on_error(user),
            },
        )
        evicted = []
        with self._lock:
            self._producers[tenant] = made
            while len(self._producers) > self.limit:
                evicted.append(self._producers.popitem(last=False)[1])
        for old in evicted:  # outside the lock: ``made`` is asked from the worker's loop
            old.flush(5)
        return made

    def made(self, tenant: str) -> Producer | None:
        """``tenant``'s producer if it is made already (nothing read, nothing blocks)."""
        with self._lock:
            return self._producers.get(tenant)

    def refusal(self, tenant: str) -> str | None:
        """Why the broker refused ``tenant``'s login, if it did since the last success."""
        return self._refused.get(tenant_user(tenant))

    def _on_error(self, user: str) -> Callable[[KafkaError], None]:
        def on_error(err: KafkaError) -> None:
            if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
                self._refused[user] = f"Kafka refused user {user!r}: {err.str()}"

        return on_error

    def forget_refusal(self, tenant: str) -> None:
        self._refused.pop(tenant_user(tenant), None)

    def close(self, timeout: float = 10.0) -> None:
        """Send what the tenants' producers hold, within ``timeout`` s for all of them
        (a record to a partition without a leader would wait for ever: its run was not
        settled, the next owner reads it again)."""
        with self._lock:
            producers, self._producers = list(self._producers.values()), OrderedDict()
        deadline = time.monotonic() + timeout
        for producer in producers:
            producer.flush(max(0.0, deadline - time.monotonic()))
