"""`cronstream dependencies`: the dependency processor (``streams.dependencies.processor``), which
runs the jobs that come after others (``after:``) once those succeeded for a date."""

from __future__ import annotations

import argparse
from typing import Any

from cronstream.cli.common import add_role, member_group
from cronstream.cli.tenant_flags import fire_rates, register_fire_rates
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings


def register(sub: Any) -> None:
    p = add_role(
        sub,
        "dependencies",
        cmd_dependencies,
        help="run the dependency processor (jobs with after: run once the "
        "jobs they name succeeded for a date)",
        description="Reads the jobs topic and the history topic whole and emits JOB@dep:<date> "
        "runs (docs/event-triggers.md). One is enough; a second emits the same run ids (the "
        "workers run each once; the group only keeps its commits).",
        group="dependencies",
        flags=(r.DEPENDENCIES_COMMIT_INTERVAL,),
    )
    register_fire_rates(p)


def cmd_dependencies(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_role
    from cronstream.streams.dependencies.processor import DependencyConfig, DependencyProcessor

    settings = settings.as_role("dependencies")  # its own Kafka user and ACLs
    rate, rates = fire_rates(args)
    config = DependencyConfig(
        group=member_group(args, settings),
        name=args.name,
        commit_ms=max(1, args.commit_interval),
        tenant_fire_rate=rate,
        tenant_fire_rates=rates,
    )
    return run_role("dependencies", config, DependencyProcessor, settings, args.metrics_port)
