"""cronstream's Python API, for the systems that produce jobs::

    from cronstream import Client, Settings, job_from_spec

    with Client(Settings.from_env()) as client:  # CRONSTREAM_* says where the stack is
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
    from producers.client import JobClient as Client
    from producers.flows import flow_from_spec
    from producers.tenant import TenantClient
    from runtime.settings import Settings
    from schemas.definition import SpecError, job_from_spec, parse_duration
    from schemas.events import JobDefinition as Job
    from schemas.events import Priority, RetryPolicy, RunOutcome, RunStatus, Target
    from schemas.flows import FlowDefinition as Flow
    from schemas.flows import FlowNode
    from schemas.schedules import CronSchedule, IntervalSchedule, OnceSchedule

# name -> (module, its name there)
_API = {
    "Client": ("producers.client", "JobClient"),
    "TenantClient": ("producers.tenant", "TenantClient"),
    "Settings": ("runtime.settings", "Settings"),
    "Job": ("schemas.events", "JobDefinition"),
    "Target": ("schemas.events", "Target"),
    "RetryPolicy": ("schemas.events", "RetryPolicy"),
    "Priority": ("schemas.events", "Priority"),
    "RunOutcome": ("schemas.events", "RunOutcome"),
    "RunStatus": ("schemas.events", "RunStatus"),
    "CronSchedule": ("schemas.schedules", "CronSchedule"),
    "IntervalSchedule": ("schemas.schedules", "IntervalSchedule"),
    "OnceSchedule": ("schemas.schedules", "OnceSchedule"),
    "Flow": ("schemas.flows", "FlowDefinition"),
    "FlowNode": ("schemas.flows", "FlowNode"),
    "job_from_spec": ("schemas.definition", "job_from_spec"),
    "flow_from_spec": ("producers.flows", "flow_from_spec"),
    "parse_duration": ("schemas.definition", "parse_duration"),
    "SpecError": ("schemas.definition", "SpecError"),
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
