"""Flags that set a per-tenant value: ``TENANT=N`` lists, and the tenants' fire rate,
declared once for every role that emits runs on a tenant's behalf without a caller
waiting (the scheduler, the dependency processor, the flows coordinator, ``runs
backfill``)."""

from __future__ import annotations

import argparse
from typing import Any

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import roles as r


def register_fire_rates(p: Any) -> None:
    """A tenant's fire rate (``streams.core.rates``), read by the scheduler, the
    dependency processor, the flows coordinator and ``runs backfill``: give them the
    same."""
    r.TENANT_FIRES_PER_SECOND.add_to(p)
    r.TENANT_FIRE_RATES.add_to(
        p,
        action="append",
        metavar="TENANT=N",
        help="a tenant's own fires per second; repeatable "
        f"(${r.TENANT_FIRE_RATES.env}, comma-separated)",
    )


def fire_rates(args: argparse.Namespace) -> tuple[float, tuple[tuple[str, float], ...]]:
    """``register_fire_rates``'s flags: (the rate, the tenants' own). A bad one raises
    SettingsError naming it, which the CLI answers as every invalid setting ("error: ...",
    exit 2), so a role calls this without a handler of its own."""
    try:
        rates = tenant_values(args.tenant_fire_rate, "--tenant-fire-rate", 1_000_000)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None
    if args.tenant_fires_per_second < 0:
        raise SettingsError("--tenant-fires-per-second must be 0 or more")
    return args.tenant_fires_per_second, tuple((t, float(n)) for t, n in rates)


def tenant_values(items: list[str], flag: str, most: int) -> tuple[tuple[str, int], ...]:
    """``["acme=3", ...]`` (or comma-separated) -> ((tenant, N), ...), N in 1..``most``."""
    out = []
    for item in (i.strip() for text in items for i in text.split(",") if i.strip()):
        name, sep, number = item.partition("=")
        if not sep or not number.isdigit() or not 1 <= int(number) <= most or not name:
            raise ValueError(f"{flag} {item!r} is not TENANT=N (N 1 to {most})")
        out.append((name, int(number)))
    return tuple(out)


def add_grant_flags(p: Any) -> None:
    """The tenants' target policy (``schemas.policy``): the admission and every worker
    must be given the same grants."""
    r.TENANT_GRANTS.add_to(
        p,
        action="append",
        metavar="TENANT:KIND=VALUE",
        help="let TENANT's jobs use a target beyond public http and its own <tenant>.* "
        "topics: http=HOST[:PORT] (a private address, network or name), kafka=PATTERN, "
        "python=MODULE[:FUNCTION], shell=PATTERN, flow=PATTERN; repeatable "
        f"(${r.TENANT_GRANTS.env}, comma-separated)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        default=None,
        help="a file of grants, one TENANT:KIND=VALUE a line, re-read when it changes "
        f"(default ${r.TENANT_POLICY.env}, else the stack's security/tenant-grants)",
    )
