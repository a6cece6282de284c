"""`cronstream worker`: executes runs from the ``runs.<priority>`` topics in the
``<prefix>.workers`` group (``consumers.worker``): its flags and its start.

SIGTERM or Ctrl-C stops fetching, lets running attempts finish (``--grace``), commits and
leaves; kill -9 makes the group move its partitions after the session timeout, and the
new owner dedups against history."""

from __future__ import annotations

import argparse
import os
from typing import Any

from cronstream.cli.common import add_role, at_least, invalid, member_group
from cronstream.cli.tenant_flags import add_grant_flags, tenant_values
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings
from cronstream.schemas.limits import MAX_OUTPUT_BYTES


def register_worker(sub: Any) -> None:  # long: the worker's flags, one call each
    p = add_role(
        sub, "worker", cmd_worker, help="run a worker (executes run requests)", group="workers"
    )
    _add_worker_slots(p)
    _add_worker_membership(p)
    r.HTTP_ALLOW.add_to(
        p,
        action="append",
        help="a network (CIDR) http targets may call although not public; repeatable "
        f"(${r.HTTP_ALLOW.env}, comma-separated)",
    )
    r.SHELL_ALLOW.add_to(
        p,
        action="append",
        help="a pattern of whole commands shell targets may run, one fnmatch pattern per "
        "argument, a last '**' for any further ones (shell is off without one); repeatable "
        f"(${r.SHELL_ALLOW.env}, comma-separated)",
    )
    r.SHELL_ENV.add_to(
        p,
        action="append",
        help="a variable of the worker's environment shell targets also get; repeatable "
        f"(${r.SHELL_ENV.env}, comma-separated)",
    )
    r.SECRETS_DIR.add_to(
        p,
        help="a directory of secret files: a header value secret:NAME is the file NAME, "
        f"TENANT/NAME for a tenant's job (else ${r.SECRET.pattern}, "
        f"${r.TENANT_SECRET.pattern}; ${r.SECRETS_DIR.env})",
    )
    p.add_argument(
        "--python-allow",
        action="append",
        default=None,
        help="a module prefix (pkg.mod) or callable (pkg.mod:function) python targets may "
        "call; repeatable (default: examples)",
    )
    r.KAFKA_ALLOW.add_to(
        p,
        action="append",
        help="a topic pattern (fnmatch) kafka targets may write to; repeatable; none: any "
        f"topic but cronstream's own and Kafka's internal ones (${r.KAFKA_ALLOW.env})",
    )
    r.TENANT_CREDENTIALS.add_to(p, metavar="DIR")
    r.TENANT_WEIGHTS.add_to(
        p,
        action="append",
        metavar="TENANT=N",
        help="starts per turn of TENANT in each priority's round among tenants (default 1); "
        f"repeatable (${r.TENANT_WEIGHTS.env}, comma-separated)",
    )
    add_grant_flags(p)


def _add_worker_slots(p: Any) -> None:
    """How many attempts a worker runs at once, and how many of them to one destination."""
    r.WORKER_CONCURRENCY.add_to(p)
    r.WORKER_DESTINATION_SLOTS.add_to(
        p,
        type=at_least(1),
        default=r.WORKER_DESTINATION_SLOTS.get() or None,
        help="of the --concurrency slots, at most this many for one destination (a kafka "
        "topic partition, an http origin); default half of --concurrency "
        f"(${r.WORKER_DESTINATION_SLOTS.env})",
    )


def _add_worker_membership(p: Any) -> None:
    """How a worker leaves (``--grace``), how long its group waits for a silent one,
    what it remembers of runs its partitions' earlier owners executed, when a run is
    recorded STARTED, and how much of what it printed is kept."""
    r.WORKER_GRACE.add_to(p)
    r.WORKER_SESSION_TIMEOUT.add_to(p)
    r.WORKER_DEDUP_CAPACITY.add_to(p)
    r.WORKER_STARTED_AFTER.add_to(p)
    r.WORKER_OUTPUT_LIMIT.add_to(p, metavar="BYTES")


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.executors.http import HttpExecutor
    from cronstream.consumers.executors.python import DEFAULT_ALLOW as PYTHON_DEFAULT_ALLOW
    from cronstream.consumers.executors.python import PythonPolicy
    from cronstream.consumers.executors.shell import ShellPolicy
    from cronstream.consumers.worker import Worker, WorkerConfig
    from cronstream.foreground import run_role
    from cronstream.runtime.grants import PolicyBook, policy_path
    from cronstream.runtime.stop import STOP_BUDGET_S

    settings = settings.as_role("worker")  # its own Kafka user and ACLs
    python_allow = tuple((*r.PYTHON_ALLOW.get(), *(args.python_allow or [])))
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
        return invalid(str(exc))
    config = WorkerConfig(
        group=member_group(args, settings),
        name=args.name,
        concurrency=args.concurrency,
        destination_slots=args.destination_slots or 0,
        grace_s=args.grace / 1000,
        session_timeout_ms=args.session_timeout,
        started_after_ms=args.started_after,
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
    return run_role(
        "worker",
        config,
        Worker,
        settings,
        args.metrics_port,
        stop_budget_s=config.grace_s + STOP_BUDGET_S,
    )
