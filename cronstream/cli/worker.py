"""`cronstream worker`: executes runs from the ``runs.<priority>`` topics in the
``<prefix>.workers`` group (``consumers.worker``): its flags and its start.

SIGTERM or Ctrl-C stops fetching, lets running attempts finish (``--grace``), commits and
leaves; kill -9 makes the group move its partitions after the session timeout, and the
new owner dedups against history."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from cronstream.cli.common import EXIT_INVALID, at_least
from cronstream.cli.tenant_flags import add_grant_flags, tenant_values
from cronstream.runtime.settings import Settings, env_int, env_list
from cronstream.schemas.limits import MAX_OUTPUT_BYTES


def register_worker(sub: Any) -> None:  # long: the worker's flags, one call each
    p = sub.add_parser("worker", help="run a worker (executes run requests)")
    p.add_argument("--group", help="consumer group (default <topic prefix>.workers)")
    p.add_argument("--name", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    _add_worker_slots(p)
    _add_worker_membership(p)
    p.add_argument(
        "--metrics-port", type=int, default=env_int("CRONSTREAM_WORKER_METRICS_PORT", 0, minimum=0)
    )
    p.add_argument(
        "--http-allow",
        action="append",
        default=env_list("CRONSTREAM_HTTP_ALLOW"),
        help="a network (CIDR) http targets may call although not public; repeatable",
    )
    p.add_argument(
        "--shell-allow",
        action="append",
        default=env_list("CRONSTREAM_SHELL_ALLOW"),
        help="a pattern of whole commands shell targets may run, one fnmatch pattern per "
        "argument, a last '**' for any further ones (shell is off without one); repeatable",
    )
    p.add_argument(
        "--shell-env",
        action="append",
        default=env_list("CRONSTREAM_SHELL_ENV"),
        help="a variable of the worker's environment shell targets also get; repeatable",
    )
    p.add_argument(
        "--secrets-dir",
        default=os.environ.get("CRONSTREAM_SECRETS_DIR") or None,
        help="a directory of secret files: a header value secret:NAME is the file NAME, "
        "TENANT/NAME for a tenant's job (else $CRONSTREAM_SECRET_<NAME>, "
        "$CRONSTREAM_TENANT_SECRET_<TENANT>__<NAME>)",
    )
    p.add_argument(
        "--python-allow",
        action="append",
        default=None,
        help="a module prefix (pkg.mod) or callable (pkg.mod:function) python targets may "
        "call; repeatable (default: examples)",
    )
    p.add_argument(
        "--kafka-allow",
        action="append",
        default=env_list("CRONSTREAM_KAFKA_ALLOW"),
        help="a topic pattern (fnmatch) kafka targets may write to; repeatable; none: any "
        "topic but cronstream's own and Kafka's internal ones",
    )
    p.add_argument(
        "--tenant-credentials",
        metavar="DIR",
        default=os.environ.get("CRONSTREAM_TENANT_CREDENTIALS") or None,
        help="where tenant-<name>.secret files are: a tenant's kafka targets write as the "
        "tenant (default: the local stack's credentials)",
    )
    p.add_argument(
        "--tenant-weight",
        action="append",
        metavar="TENANT=N",
        default=env_list("CRONSTREAM_TENANT_WEIGHTS"),
        help="starts per turn of TENANT in each priority's round among tenants (default 1); "
        "repeatable",
    )
    add_grant_flags(p)
    p.set_defaults(handler=cmd_worker, needs="role")


def _add_worker_slots(p: Any) -> None:
    """How many attempts a worker runs at once, and how many of them to one destination."""
    p.add_argument(
        "--concurrency", type=at_least(1), default=env_int("CRONSTREAM_WORKER_CONCURRENCY", 32)
    )
    p.add_argument(
        "--destination-slots",
        type=at_least(1),
        default=env_int("CRONSTREAM_WORKER_DESTINATION_SLOTS", 0, minimum=0) or None,
        help="of the --concurrency slots, at most this many for one destination (a kafka "
        "topic partition, an http origin); default half of --concurrency",
    )


def _add_worker_membership(p: Any) -> None:
    """How a worker leaves (``--grace``), how long its group waits for a silent one,
    what it remembers of runs its partitions' earlier owners executed, when a run is
    recorded STARTED, and how much of what it printed is kept."""
    p.add_argument("--grace", type=float, default=30.0, help="seconds to drain on SIGTERM")
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=env_int("CRONSTREAM_WORKER_SESSION_TIMEOUT_MS", 10_000),
        help="how long a silent worker keeps its partitions: its group's, set on the "
        "broker at start (one value per group; the broker's bounds apply)",
    )
    p.add_argument(
        "--dedup-capacity",
        type=at_least(1000),
        default=env_int("CRONSTREAM_WORKER_DEDUP_CAPACITY", 2_000_000, minimum=1000),
        help="run ids remembered for dedup at most (~130 bytes each; the oldest go first)",
    )
    p.add_argument(
        "--started-after-ms",
        type=at_least(0),
        metavar="MS",
        default=env_int("CRONSTREAM_WORKER_STARTED_AFTER_MS", 1000, minimum=0),
        help="publish a run's STARTED record once it has executed this long; a run that ends "
        "sooner records its final outcome alone, with its start (0: every run; default 1000)",
    )
    p.add_argument(
        "--output-limit",
        type=at_least(0),
        metavar="BYTES",
        default=env_int("CRONSTREAM_WORKER_OUTPUT_LIMIT", 64 * 1024, minimum=0),
        help="bytes kept of what each attempt printed or returned, its last (docs/run-output.md; "
        f"default 65536, at most {MAX_OUTPUT_BYTES}; 0: keep none)",
    )


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.executors.http import HttpExecutor
    from cronstream.consumers.executors.python import DEFAULT_ALLOW as PYTHON_DEFAULT_ALLOW
    from cronstream.consumers.executors.python import PythonPolicy
    from cronstream.consumers.executors.shell import ShellPolicy
    from cronstream.consumers.worker import Worker, WorkerConfig
    from cronstream.foreground import run_member
    from cronstream.runtime.grants import PolicyBook, policy_path
    from cronstream.runtime.stop import STOP_BUDGET_S

    settings = settings.as_role("worker")  # its own Kafka user and ACLs
    python_allow = tuple(env_list("CRONSTREAM_PYTHON_ALLOW") + (args.python_allow or []))
    try:  # the policies refuse what they cannot use before anything starts
        ShellPolicy(args.shell_allow)
        PythonPolicy(python_allow or PYTHON_DEFAULT_ALLOW)
        HttpExecutor(allow=args.http_allow).close()
        if args.secrets_dir and not os.path.isdir(args.secrets_dir):
            raise ValueError(f"--secrets-dir {args.secrets_dir!r} is not a directory")
        weights = tenant_values(args.tenant_weight, "--tenant-weight", 1000)
        if args.output_limit > MAX_OUTPUT_BYTES:
            raise ValueError(f"--output-limit {args.output_limit} is over {MAX_OUTPUT_BYTES}")
        PolicyBook(args.grant, policy_path(settings, args.policy))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    config = WorkerConfig(
        group=args.group or f"{settings.topic_prefix}.workers",
        name=args.name,
        concurrency=args.concurrency,
        destination_slots=args.destination_slots or 0,
        grace_s=args.grace,
        session_timeout_ms=args.session_timeout_ms,
        started_after_ms=args.started_after_ms,
        dedup_capacity=args.dedup_capacity,
        output_limit=args.output_limit,
        http_allow=tuple(args.http_allow),
        shell_allow=tuple(args.shell_allow),
        shell_env=tuple(args.shell_env),
        secrets_dir=args.secrets_dir,
        python_allow=python_allow or PYTHON_DEFAULT_ALLOW,
        kafka_allow=tuple(args.kafka_allow),
        tenant_credentials=args.tenant_credentials,
        tenant_weights=weights,
        grants=tuple(args.grant),
        policy_file=str(policy_path(settings, args.policy)),
    )
    return run_member(
        "worker",
        name=config.name,
        group=config.group,
        start=lambda: Worker(settings, config),
        metrics_port=args.metrics_port,
        settings=settings,
        stop_budget_s=config.grace_s + STOP_BUDGET_S,
    )
