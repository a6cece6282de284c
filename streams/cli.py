"""`cronstream scheduler`: run one scheduler processor in the foreground.

Start as many as you like (on one machine or many): they share the jobs partitions
through the consumer group. SIGTERM or Ctrl-C hands the partitions over cleanly (final
checkpoint, leave the group); kill -9 makes the group move them after the session
timeout, and the new owner re-emits from the last checkpoint.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from cronstream.foreground import run_member
from cronstream.settings import Settings, env_int
from streams.processor import Processor, ProcessorConfig


def register(sub: Any) -> None:
    p = sub.add_parser("scheduler", help="run a scheduler processor (fires due runs)")
    p.add_argument("--group", help="consumer group (default <topic prefix>.scheduler)")
    p.add_argument("--name", default=f"scheduler-{socket.gethostname()}-{os.getpid()}")
    p.add_argument(
        "--metrics-port", type=int,
        default=env_int("CRONSTREAM_SCHEDULER_METRICS_PORT", 0, minimum=0),
        help="serve Prometheus metrics on this port (0: off)",
    )  # fmt: skip
    p.add_argument(
        "--misfire-threshold-ms", type=int,
        default=env_int("CRONSTREAM_MISFIRE_THRESHOLD_MS", 60_000, minimum=0),
        help="a slot later than this is a misfire (its job's policy applies)",
    )  # fmt: skip
    p.add_argument(
        "--checkpoint-ms", type=int, default=env_int("CRONSTREAM_CHECKPOINT_MS", 1000),
        help="how often progress is committed (bounds re-emits after a crash)",
    )  # fmt: skip
    p.add_argument(
        "--session-timeout-ms", type=int,
        default=env_int("CRONSTREAM_SCHEDULER_SESSION_TIMEOUT_MS", 10_000),
        help="how long a silent scheduler keeps its partitions",
    )  # fmt: skip
    p.set_defaults(handler=cmd_scheduler, needs="settings")


def cmd_scheduler(settings: Settings, args: argparse.Namespace) -> int:
    config = ProcessorConfig(
        group=args.group or f"{settings.topic_prefix}.scheduler",
        threshold_ms=args.misfire_threshold_ms,
        checkpoint_ms=args.checkpoint_ms,
        session_timeout_ms=args.session_timeout_ms,
        name=args.name,
    )
    return run_member(
        "scheduler", name=config.name, group=config.group,
        start=lambda: Processor(settings, config), metrics_port=args.metrics_port,
    )  # fmt: skip
