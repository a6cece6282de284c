"""Target types: what a run can execute, each declared once (docs/targets.md).

A target type is a ``TargetType``: its name (a ``Target``'s ``type``, also its metrics
label and the KIND of its tenant grants), the rules a ``Target`` of that type must keep
(``problems``: the client, the API and the admission ask them through
``target_problems``), its tenant-policy rule (``policy``, applied by
``schemas.policy.TenantPolicy``, with ``grant`` reading a ``KIND=VALUE`` grant's value),
and where the worker finds the factory of its executor (``executor``, a
``module:function`` reference resolved by the worker only, so that the layers below it
never import an executor and what it imports: httpx, the Kafka client).

**Registration.** Every target type comes from an entry point of the group
``cronstream.targets`` whose value is its ``TargetType``. A third party declares one in
its distribution's metadata::

    [project.entry-points."cronstream.targets"]
    log = "mypkg.log_target:TARGET"

The built-ins are entry points too, listed in ``BUILTIN`` rather than in cronstream's own
metadata: cronstream is installed editable (``pip install -e``), whose metadata is only
rewritten by a re-install, and a process must not lose ``http`` because its
environment's metadata is older than its code. Both kinds are loaded by the one
``_load``, on first use, once per process (``reload`` after installing one in a test).

A plugin that cannot be loaded, whose declared name differs from its entry point's, or
that reuses a name stops the process with ``TargetTypeError``: every ``cronstream``
command loads the target types before anything else, so a broken plugin is found at
start, not at its first record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from cronstream.schemas.errors import TargetTypeError
from cronstream.schemas.events import Target
from cronstream.schemas.limits import target_limit_problems

GROUP = "cronstream.targets"
BUILTIN = tuple(
    EntryPoint(name, f"cronstream.schemas.targets.{name}:TARGET", GROUP)
    for name in ("http", "kafka", "python", "shell", "flow")
)

# (tenant, the job's stored id, its target, the tenant's grants of this kind: parsed by
# ``grant``) -> why the tenant may not use the target, or None when it may.
PolicyRule = Callable[[str, str, Target, tuple[Any, ...]], str | None]


def text_grant(value: str) -> str:
    """A grant's value kept as written (a glob, a module prefix)."""
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetType:
    """One target type, as its module declares it."""

    name: str
    # What is wrong with a Target of this type (its own fields; the lengths every target
    # keeps are ``schemas.limits.target_limit_problems``): each problem a sentence, none
    # when it is fine. Pure: no I/O, it runs in the client, the API and the admission.
    problems: Callable[[Target], list[str]]
    # ``module:function`` of the factory the worker calls once at start with an
    # ``ExecutorSetup`` (consumers.executors.base) to get this type's ``Executor``.
    executor: str
    # The tenants' rule (``schemas.policy``): None means no tenant may use the type (an
    # operator's jobs, tenant ``default``, are never subject to it) and it takes no grant.
    policy: PolicyRule | None = None
    # Reads a grant's value (``TENANT:KIND=VALUE``) once, when the grant is read; raises
    # ValueError, naming the grant, when the value cannot be one.
    grant: Callable[[str], Any] = text_grant


_lock = threading.Lock()
_registered: Mapping[str, TargetType] | None = None


def registered() -> Mapping[str, TargetType]:
    """Every target type by name: the built-ins first, then the plugins by name."""
    global _registered
    found = _registered
    if found is None:
        with _lock:
            if _registered is None:
                _registered = _load([*BUILTIN, *_plugins()])
            found = _registered
    return found


def reload() -> None:
    """Forget the target types read (the next use reads them again): for a test that
    installs a plugin on ``sys.path``, and after it."""
    global _registered
    with _lock:
        _registered = None


def target_type(name: str) -> TargetType | None:
    return registered().get(name)


def names() -> tuple[str, ...]:
    return tuple(registered())


def target_problems(target: Target) -> list[str]:
    """Every problem of a ``Target``: a type nobody declared, else its type's own rules,
    then (once those hold) the limits on its fields' lengths."""
    declared = registered().get(target.type)
    if declared is None:
        return [f"target type {target.type!r} is not one of {', '.join(names())}"]
    return declared.problems(target) or target_limit_problems(target)


def _plugins() -> list[EntryPoint]:
    return sorted(entry_points(group=GROUP), key=lambda point: (point.name, point.value))


def _load(points: Iterable[EntryPoint]) -> Mapping[str, TargetType]:
    found: dict[str, TargetType] = {}
    for point in points:
        try:
            declared = point.load()
        except Exception as exc:
            raise TargetTypeError(
                f"target type {point.name!r} ({point.value}) cannot be loaded: {exc!r}"
            ) from exc
        if not isinstance(declared, TargetType) or declared.name != point.name:
            raise TargetTypeError(
                f"entry point {point.name!r} ({point.value}) of {GROUP} is not the "
                f"TargetType named {point.name!r}"
            )
        known = found.get(point.name)
        if known is not None and known is not declared:
            raise TargetTypeError(
                f"target type {point.name!r} is declared twice (again by {point.value})"
            )
        found[point.name] = declared
    return found
