"""`cronstream worker`: run one worker process in the foreground.

Start as many as you like; they share the execution topics through the consumer group.
SIGTERM or Ctrl-C stops fetching, lets running attempts finish (``--grace``), commits
and leaves the group.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import Any

from consumers.worker import Worker, WorkerConfig
from cronstream.foreground import run_member
from cronstream.settings import Settings, env_int, env_list


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a worker (executes run requests)")
    p.add_argument("--group", help="consumer group (default <topic prefix>.workers)")
    p.add_argument("--name", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--concurrency", type=int,
                   default=env_int("CRONSTREAM_WORKER_CONCURRENCY", 32))  # fmt: skip
    p.add_argument("--grace", type=float, default=30.0, help="seconds to drain on SIGTERM")
    p.add_argument("--metrics-port", type=int,
                   default=env_int("CRONSTREAM_WORKER_METRICS_PORT", 0, minimum=0))  # fmt: skip
    p.add_argument(
        "--http-allow", action="append",
        default=env_list("CRONSTREAM_HTTP_ALLOW"),
        help="a network (CIDR) http targets may call although not public; repeatable",
    )  # fmt: skip
    p.add_argument(
        "--shell-allow", action="append",
        default=env_list("CRONSTREAM_SHELL_ALLOW"),
        help="an executable shell targets may run (shell is off without one); repeatable",
    )  # fmt: skip
    p.set_defaults(handler=cmd_worker, needs="settings")


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    config = WorkerConfig(
        group=args.group or f"{settings.topic_prefix}.workers",
        name=args.name,
        concurrency=args.concurrency,
        grace_s=args.grace,
        http_allow=tuple(args.http_allow),
        shell_allow=tuple(args.shell_allow),
    )
    return run_member(
        "worker", name=config.name, group=config.group,
        start=lambda: Worker(settings, config), metrics_port=args.metrics_port,
    )  # fmt: skip
