"""How a worker gets its executors: one per registered target type (``schemas.targets``),
each built by the factory its declaration names, from what the worker lends them.

A factory is a function ``(ExecutorSetup) -> Executor`` (``consumers.executors.base``),
called once when the worker starts; its declaration names it ``module:function`` so that
only the worker imports it. An executor that holds resources (a connection pool) has a
``close()``: the worker calls it when it stops. What the setup lends (the producer, the
tenants' producers) is the worker's: flushed and closed by the worker, never by an
executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pkgutil import resolve_name
from typing import Any, Protocol

from cronstream.consumers.executors.base import Executor
from cronstream.consumers.executors.egress import TenantProducers
from cronstream.runtime.kafka.clients import Producer
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.policy import TenantPolicy
from cronstream.schemas.targets import registered


class WorkerOptions(Protocol):
    """What the built-in executors read of the worker's flags (``WorkerConfig``)."""

    @property
    def http_allow(self) -> tuple[str, ...]: ...
    @property
    def secrets_dir(self) -> str | None: ...
    @property
    def kafka_allow(self) -> tuple[str, ...]: ...
    @property
    def python_allow(self) -> tuple[str, ...]: ...
    @property
    def shell_allow(self) -> tuple[str, ...]: ...
    @property
    def shell_env(self) -> tuple[str, ...]: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def output_limit(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutorSetup:
    """What a worker lends the factories of its executors."""

    settings: Settings
    config: WorkerOptions
    topics: Topics
    producer: Producer  # the worker's own, for targets (the default tenant's jobs)
    tenant_producers: TenantProducers | None  # a tenant's kafka targets write as it
    encode: Callable[[str, Any], bytes]  # (topic, record) -> its value, by the worker's codec
    policy: Callable[[], TenantPolicy]  # the tenants' grants now


def build_executors(setup: ExecutorSetup) -> dict[str, Executor]:
    """Every registered target type's executor, by type name."""
    return {name: resolve_name(declared.executor)(setup) for name, declared in registered().items()}
