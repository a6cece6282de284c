"""`cronstream triggers`: run a trigger processor (jobs run on the records of any Kafka
topic, ``on:``; docs/event-triggers.md). Start as many as the source partitions are to
be shared by: they form the group ``<topic prefix>.triggers``."""

from __future__ import annotations

import argparse
from typing import Any

from cronstream.cli.common import add_role, invalid, member_group
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings


def register(sub: Any) -> None:
    p = add_role(
        sub,
        "triggers",
        cmd_triggers,
        help="run a trigger processor (source records -> event runs)",
        group="triggers",
        flags=(r.TRIGGERS_COMMIT_INTERVAL, r.TRIGGERS_SESSION_TIMEOUT),
    )
    r.TENANT_TRIGGERS_PER_SECOND.add_to(
        p,
        help="event runs one tenant's jobs may start per second, like its manual runs (the "
        "admission's --triggers-per-second); a tenant at its rate has its source partitions "
        "held, never its records dropped; 0: no limit; operators' jobs are not limited "
        f"(${r.TENANT_TRIGGERS_PER_SECOND.env})",
    )
    r.TRIGGERS_ALLOW_TOPICS.add_to(
        p,
        action="append",
        metavar="TOPIC",
        help="one of cronstream's own topics operators' jobs may trigger on (refused "
        "otherwise: a job run by the history records of its own runs loops); repeatable "
        f"(${r.TRIGGERS_ALLOW_TOPICS.env}, comma-separated)",
    )


def cmd_triggers(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_role
    from cronstream.streams.triggers.processor import TriggerConfig, TriggerProcessor

    settings = settings.as_role("triggers")  # its own Kafka user and ACLs
    if args.commit_interval < 10 or args.session_timeout < 1000:
        return invalid("--commit-interval must be 10ms or more, --session-timeout 1s or more")
    config = TriggerConfig(
        group=member_group(args, settings),
        name=args.name,
        checkpoint_ms=args.commit_interval,
        session_timeout_ms=args.session_timeout,
        tenant_runs_per_second=args.triggers_per_second,
        allow_topics=tuple(args.allow_topic),
    )
    return run_role("triggers", config, TriggerProcessor, settings, args.metrics_port)
