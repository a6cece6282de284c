"""The ``python`` target type: ``callable`` (``module:function``) called with the run's
context (the executor: ``consumers.executors.python``; a worker calls only what its
``--python-allow`` allows).

Its tenants' rule: none by default; an operator's grant ``python=ENTRY`` lets a tenant
call ``module:function``, or any callable of a module prefix (``examples.jobs``). A
grant never widens the worker's own ``--python-allow``: a run needs both.
"""

from __future__ import annotations

from cronstream.schemas.events import Target
from cronstream.schemas.targets import TargetType


def problems(target: Target) -> list[str]:
    module, sep, func = (target.callable or "").partition(":")
    if not sep or not module or not func.isidentifier():
        return [f"target python needs a callable as 'module:function', got {target.callable!r}"]
    return []


def why_not(_tenant: str, _job_id: str, target: Target, grants: tuple[str, ...]) -> str | None:
    name = target.callable or ""
    module = name.partition(":")[0]
    if any(g in (name, module) or module.startswith(g + ".") for g in grants):
        return None
    return f"python callable {name[:200]!r} is not granted to the tenant"


TARGET = TargetType(
    name="python",
    problems=problems,
    policy=why_not,
    executor="cronstream.consumers.executors.python:executor",
)
