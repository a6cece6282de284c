"""The ``flow`` target type: a flow's schedule came due, or the flow was triggered; the
run starts a flow run (the executor: ``consumers.executors.flow``). It takes no field.

Its tenants' rule: none by default; an operator's grant ``flow=PATTERN`` lets a tenant
use flow targets in its jobs whose own id (without the ``tenant/``) matches the glob.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from cronstream.schemas.events import Target
from cronstream.schemas.targets import TargetType


def problems(_target: Target) -> list[str]:
    return []


def why_not(_tenant: str, job_id: str, _target: Target, grants: tuple[str, ...]) -> str | None:
    own = job_id.partition("/")[2] or job_id
    if any(fnmatchcase(own, p) for p in grants):
        return None
    return "flow targets are not granted to the tenant"


TARGET = TargetType(
    name="flow",
    problems=problems,
    policy=why_not,
    executor="cronstream.consumers.executors.flow:executor",
)
