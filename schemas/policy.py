"""What a tenant's jobs may call: the target policy.

The admission applies it to every tenant's definition (a refusal names the rule), and
the worker applies it again to every tenant's run (a definition written some other way,
or a grant withdrawn since, fails the run as an invalid target). Operators' own jobs
(tenant ``default``) are not subject to it: the workers' own flags bound them.

Each target type declares its rule and the grants it takes (``schemas.targets``; the
built-ins' rules are in ``schemas/targets/<type>.py``). By default a tenant may use
``http``/``https`` to public addresses and ``kafka`` to its own topics
(``<tenant>.<anything>``); everything else needs an operator's grant for that tenant,
one ``KIND=VALUE`` each: ``http=HOST[:PORT]``, ``kafka=PATTERN``, ``python=ENTRY``,
``shell=PATTERN``, ``flow=PATTERN``. A type that declares no rule is never a tenant's.

Grants are written ``TENANT:KIND=VALUE`` (``cronstream admission --grant``,
``cronstream worker --grant``) or one a line in the policy file (``load_grants``): both
processes must be given the same ones. Python and shell grants never widen the worker's
own ``--python-allow`` / ``--shell-allow``: a run needs both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cronstream.schemas.errors import GrantError
from cronstream.schemas.events import Target
from cronstream.schemas.targets import PolicyRule, names, target_type
from cronstream.schemas.tenancy import OPERATORS


@dataclass(frozen=True, slots=True)
class Grants:
    """One tenant's grants: each kind's values as its target type reads them."""

    kinds: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    text: tuple[str, ...] = field(default=(), compare=False)  # as written, for messages

    def granted(self, kind: str) -> tuple[Any, ...]:
        return self.kinds.get(kind, ())


def grantable() -> tuple[str, ...]:
    """The kinds a grant may name: the target types that declare a tenants' rule."""
    return tuple(n for n in names() if _rule_of(n) is not None)


def parse_grant(text: str) -> tuple[str, str, str]:
    """``TENANT:KIND=VALUE`` -> (tenant, kind, value); GrantError when malformed."""
    tenant, kind, value, _ = _parse(text)
    return tenant, kind, value


def _parse(text: str) -> tuple[str, str, str, Any]:
    """(tenant, kind, value, the value as its target type reads it)."""
    tenant, sep, rest = text.strip().partition(":")
    kind, eq, value = rest.partition("=")
    kind, value = kind.strip(), value.strip()
    if not sep or not eq or not tenant or not value:
        raise GrantError(f"grant {text!r} is not TENANT:KIND=VALUE (e.g. demo:http=127.0.0.1:8787)")
    declared = target_type(kind)
    if declared is None or declared.policy is None:
        raise GrantError(f"grant {text!r}: kind {kind!r} is not one of {', '.join(grantable())}")
    try:  # refused now, not at the first run
        return tenant, kind, value, declared.grant(value)
    except ValueError as exc:
        raise GrantError(str(exc)) from None


def _rule_of(kind: str) -> PolicyRule | None:
    declared = target_type(kind)
    return None if declared is None else declared.policy


class TenantPolicy:
    """Every tenant's grants; ``problems`` applies them."""

    def __init__(self, grants: Iterable[str] = ()) -> None:
        found: dict[str, dict[str, list[tuple[str, Any]]]] = {}
        for text in grants:
            tenant, kind, value, parsed = _parse(text)
            found.setdefault(tenant, {}).setdefault(kind, []).append((value, parsed))
        order = names()
        self.grants: Mapping[str, Grants] = {
            tenant: Grants(
                {kind: tuple(parsed for _, parsed in pairs) for kind, pairs in kinds.items()},
                tuple(f"{k}={v}" for k in order for v, _ in kinds.get(k, ())),
            )
            for tenant, kinds in found.items()
        }

    def of(self, tenant: str) -> Grants:
        return self.grants.get(tenant, Grants())

    def problems(self, tenant: str, job_id: str, target: Target) -> list[str]:
        """Why ``tenant`` may not use ``target`` for its job ``job_id`` (its stored id),
        empty when it may. Operators' jobs: always empty."""
        if tenant == OPERATORS:
            return []
        grants = self.of(tenant)
        rule = _rule_of(target.type)
        why = (
            f"target type {target.type[:40]!r} is not granted to the tenant"
            if rule is None
            else rule(tenant, job_id, target, grants.granted(target.type))
        )
        if why is None:
            return []
        granted = ", ".join(grants.text) or "none"
        return [
            f"target policy: {why} (grants of tenant {tenant!r}: {granted}; an operator "
            "grants more with --grant TENANT:KIND=VALUE)"
        ]
