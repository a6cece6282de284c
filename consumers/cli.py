"""`cronstream worker`: run one worker process in the foreground.

Start as many as you like; they share the execution topics through the consumer group.
SIGTERM or Ctrl-C stops fetching, lets running attempts finish (``--grace``), commits
and leaves the group.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any

from consumers.worker import Worker, WorkerConfig
from cronstream.foreground import run_until_signalled, setup_logging
from cronstream.settings import Settings


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def register(sub: Any) -> None:
    p = sub.add_parser("worker", help="run a worker (executes run requests)")
    p.add_argument("--group", help="consumer group (default <topic prefix>.workers)")
    p.add_argument("--name", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--concurrency", type=int,
                   default=int(_env("CRONSTREAM_WORKER_CONCURRENCY", "32")))  # fmt: skip
    p.add_argument("--grace", type=float, default=30.0, help="seconds to drain on SIGTERM")
    p.add_argument("--metrics-port", type=int,
                   default=int(_env("CRONSTREAM_WORKER_METRICS_PORT", "0")))  # fmt: skip
    p.add_argument(
        "--http-allow", action="append",
        default=[n for n in _env("CRONSTREAM_HTTP_ALLOW", "").split(",") if n],
        help="a network (CIDR) http targets may call although not public; repeatable",
    )  # fmt: skip
    p.add_argument(
        "--shell-allow", action="append",
        default=[c for c in _env("CRONSTREAM_SHELL_ALLOW", "").split(",") if c],
        help="an executable shell targets may run (shell is off without one); repeatable",
    )  # fmt: skip
    p.set_defaults(handler=cmd_worker, needs="settings")


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    setup_logging()
    config = WorkerConfig(
        group=args.group or f"{settings.topic_prefix}.workers",
        name=args.name,
        concurrency=args.concurrency,
        grace_s=args.grace,
        http_allow=tuple(args.http_allow),
        shell_allow=tuple(args.shell_allow),
    )
    worker = Worker(settings, config)
    logging.getLogger("cronstream.worker").info(
        "worker %s joining group %s", config.name, config.group
    )
    return run_until_signalled(worker.run, metrics_port=args.metrics_port)
