"""`cronstream triggers`: run a trigger processor (jobs run on the records of any Kafka
topic, ``on:``; docs/event-triggers.md). Start as many as the source partitions are to
be shared by: they form the group ``<topic prefix>.triggers``."""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from cronstream.runtime.settings import Settings, env_int, env_list


def register(sub: Any) -> None:
    p = sub.add_parser("triggers", help="run a trigger processor (source records -> event runs)")
    p.add_argument("--group", help="consumer group (default <topic prefix>.triggers)")
    p.add_argument("--name", default=f"triggers-{socket.gethostname()}-{os.getpid()}")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env_int("CRONSTREAM_TRIGGERS_METRICS_PORT", 0, minimum=0),
    )
    p.add_argument(
        "--checkpoint-ms",
        type=int,
        default=env_int("CRONSTREAM_TRIGGERS_CHECKPOINT_MS", 1000, minimum=10),
        help="how often progress is committed (bounds the runs written again after a crash)",
    )
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=env_int("CRONSTREAM_TRIGGERS_SESSION_TIMEOUT_MS", 10_000, minimum=1000),
        help="how long a silent trigger processor keeps its source partitions",
    )
    p.add_argument(
        "--tenant-runs-per-minute",
        type=int,
        default=env_int("CRONSTREAM_TENANT_TRIGGERS_PER_MINUTE", 600, minimum=0),
        help="event runs one tenant's jobs may start per minute, like its manual runs (the "
        "admission's --triggers-per-minute); a tenant at its rate has its source partitions "
        "held, never its records dropped; 0: no limit; operators' jobs are not limited",
    )
    p.add_argument(
        "--allow-topic",
        action="append",
        metavar="TOPIC",
        default=env_list("CRONSTREAM_TRIGGERS_ALLOW_TOPICS"),
        help="one of cronstream's own topics operators' jobs may trigger on (refused "
        "otherwise: a job run by the history records of its own runs loops); repeatable",
    )
    p.set_defaults(handler=cmd_triggers, needs="role")


def cmd_triggers(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_member
    from cronstream.schemas.catalog import triggers_group
    from cronstream.streams.triggers.processor import TriggerConfig, TriggerProcessor

    settings = settings.as_role("triggers")  # its own Kafka user and ACLs
    config = TriggerConfig(
        group=args.group or triggers_group(settings.topic_prefix),
        name=args.name,
        checkpoint_ms=args.checkpoint_ms,
        session_timeout_ms=args.session_timeout_ms,
        tenant_runs_per_minute=args.tenant_runs_per_minute,
        allow_topics=tuple(args.allow_topic),
    )
    return run_member(
        "triggers",
        name=config.name,
        group=config.group,
        start=lambda: TriggerProcessor(settings, config),
        metrics_port=args.metrics_port,
        settings=settings,
    )
