"""`cronstream dependencies`: the dependency processor (``streams.dependencies.processor``), which
runs the jobs that come after others (``after:``) once those succeeded for a date."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from cronstream.cli.tenant_flags import fire_rates, register_fire_rates
from cronstream.runtime.settings import Settings, env_int


def register(sub: Any) -> None:
    p = sub.add_parser(
        "dependencies",
        help="run the dependency processor (jobs with after: run once the "
        "jobs they name succeeded for a date)",
        description="Reads the jobs topic and the history topic whole and emits JOB@dep:<date> "
        "runs (docs/event-triggers.md). One is enough; a second emits the same run ids (the "
        "workers run each once).",
    )
    p.add_argument(
        "--group", help="consumer group of its commits (default <topic prefix>.dependencies)"
    )
    p.add_argument("--name", default=f"dependencies-{socket.gethostname()}-{os.getpid()}")
    p.add_argument(
        "--commit-ms",
        type=int,
        default=env_int("CRONSTREAM_DEPENDENCIES_COMMIT_MS", 1000, minimum=1),
        help="how often its offsets are committed (what a start reads again: the runs of "
        "those records are emitted again, flagged)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env_int("CRONSTREAM_DEPENDENCIES_METRICS_PORT", 0, minimum=0),
        help="serve /metrics, /healthz, /readyz on this port (0: off)",
    )
    register_fire_rates(p)
    p.set_defaults(handler=cmd_dependencies, needs="role")


def cmd_dependencies(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_member
    from cronstream.streams.dependencies.processor import DependencyConfig, DependencyProcessor

    settings = settings.as_role("dependencies")  # its own Kafka user and ACLs
    rate, rates = fire_rates(args)
    config = DependencyConfig(
        group=args.group or f"{settings.topic_prefix}.dependencies",
        name=args.name,
        commit_ms=max(1, args.commit_ms),
        tenant_fire_rate=rate,
        tenant_fire_rates=rates,
    )
    return run_member(
        "dependencies",
        name=config.name,
        group=config.group,
        start=lambda: DependencyProcessor(settings, config),
        metrics_port=args.metrics_port,
        settings=settings,
    )
