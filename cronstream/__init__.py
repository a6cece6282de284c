"""cronstream's Python API, for the systems that produce jobs::

    from cronstream import Client, Settings, job_from_spec

    with Client(Settings.from_env()) as client:  # the environment says where the stack is
        client.put_spec({"id": "nightly-report", "cron": "0 2 * * *",
                         "target": "http", "url": "https://reports.example.com/run"})
        client.trigger("nightly-report", idempotency_key="deploy-4711")

``Client`` writes as an operator (every tenant's jobs); ``TenantClient(settings, tenant)``
writes as one tenant, through the admission, and waits for each answer. The names below
are the API: what they are built from (``producers``, ``schemas``, ``runtime``) may move.
Each is imported when first used, so ``import cronstream`` costs nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cronstream.producers.client import JobClient as Client
    from cronstream.producers.flows import flow_from_spec
    from cronstream.producers.tenant import TenantClient
    from cronstream.runtime.settings import Settings
    from cronstream.schemas.definition import SpecError, job_from_spec, parse_duration
    from cronstream.schemas.events import JobDefinition as Job
    from cronstream.schemas.events import Priority, RetryPolicy, RunOutcome, RunStatus, Target
    from cronstream.schemas.flows import FlowDefinition as Flow
    from cronstream.schemas.flows import FlowNode
    from cronstream.schemas.schedules import CronSchedule, IntervalSchedule, OnceSchedule

# name -> (module, its name there)
_API = {
    "Client": ("cronstream.producers.client", "JobClient"),
    "TenantClient": ("cronstream.producers.tenant", "TenantClient"),
    "Settings": ("cronstream.runtime.settings", "Settings"),
    "Job": ("cronstream.schemas.events", "JobDefinition"),
    "Target": ("cronstream.schemas.events", "Target"),
    "RetryPolicy": ("cronstream.schemas.events", "RetryPolicy"),
    "Priority": ("cronstream.schemas.events", "Priority"),
    "RunOutcome": ("cronstream.schemas.events", "RunOutcome"),
    "RunStatus": ("cronstream.schemas.events", "RunStatus"),
    "CronSchedule": ("cronstream.schemas.schedules", "CronSchedule"),
    "IntervalSchedule": ("cronstream.schemas.schedules", "IntervalSchedule"),
    "OnceSchedule": ("cronstream.schemas.schedules", "OnceSchedule"),
    "Flow": ("cronstream.schemas.flows", "FlowDefinition"),
    "FlowNode": ("cronstream.schemas.flows", "FlowNode"),
    "job_from_spec": ("cronstream.schemas.definition", "job_from_spec"),
    "flow_from_spec": ("cronstream.producers.flows", "flow_from_spec"),
    "parse_duration": ("cronstream.schemas.definition", "parse_duration"),
    "SpecError": ("cronstream.schemas.definition", "SpecError"),
}
__all__ = [
    "Client",
    "CronSchedule",
    "Flow",
    "FlowNode",
    "IntervalSchedule",
    "Job",
    "OnceSchedule",
    "Priority",
    "RetryPolicy",
    "RunOutcome",
    "RunStatus",
    "Settings",
    "SpecError",
    "Target",
    "TenantClient",
    "flow_from_spec",
    "job_from_spec",
    "parse_duration",
]


def __getattr__(name: str) -> Any:
    """One of ``__all__``, imported at its first use (PEP 562)."""
    try:
        module, attribute = _API[name]
    except KeyError:
        raise AttributeError(f"module 'cronstream' has no attribute {name!r}") from None
    value = getattr(import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
