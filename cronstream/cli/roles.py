"""The long-running roles: `cronstream scheduler`, `worker` (``cronstream.cli.worker``),
`sink`, `admission`, `api` and `ui`.

Start as many of each as you like (on one machine or many): each kind shares its topics
through its consumer group. SIGTERM or Ctrl-C hands over cleanly: a scheduler takes a
final checkpoint and leaves the group; a worker stops fetching, lets running attempts
finish (``--grace``), commits and leaves; a sink commits what it has written and leaves.
kill -9 makes the group move a member's partitions after its session timeout: a new
scheduler owner re-emits from the last checkpoint (flagged), a new worker owner dedups
against history.

Each command imports its role's modules itself: parsing them is all the other commands
need, and a one-shot command (``jobs list``) has no use for the worker, the scheduler or
FastAPI, which were about half a second of its start.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from cronstream.cli.common import EXIT_INVALID, add_role, invalid, member_group
from cronstream.cli.tenant_flags import add_grant_flags, fire_rates, register_fire_rates
from cronstream.cli.worker import register_worker
from cronstream.runtime.consoles import console_port
from cronstream.runtime.options import roles as r
from cronstream.runtime.options.services import CONSOLE
from cronstream.runtime.settings import Settings


def register(sub: Any) -> None:
    _register_scheduler(sub)
    register_worker(sub)
    _register_sink(sub)
    _register_admission(sub)
    p = sub.add_parser("api", help="serve the tenant-facing HTTP API (tokens: runtime.tokens)")
    r.API_HOST.add_to(p, "--host")
    r.API_PORT.add_to(p, "--port")
    p.add_argument("--name", default=f"api-{socket.gethostname()}-{os.getpid()}")
    _register_hosts(p)
    p.set_defaults(handler=cmd_api, needs="role")
    p = sub.add_parser(
        "ui",
        help="serve the web dashboard at /ui, with the HTTP API beside it",
        description="The operator's dashboard: live overview (from Prometheus), jobs, a "
        "job's page with actions, run search, dead letters with replay. Sign in at /ui/login "
        "with an API token (a tenant's sees only that tenant).",
    )
    r.UI_HOST.add_to(p, "--host")
    r.UI_PORT.add_to(p, "--port")
    p.add_argument("--name", default=f"ui-{socket.gethostname()}-{os.getpid()}")
    stack = f"https://127.0.0.1:{console_port('prometheus')}"
    p.add_argument(
        "--prometheus",
        metavar="URL",
        default=os.environ.get(CONSOLE.name("PROMETHEUS_URL")) or stack,
        help="the Prometheus scraping cronstream (the overview's figures; its login and CA: "
        "the console settings, docs/configuration.md)",
    )
    p.add_argument(
        "--anonymous",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="every page readable without signing in, read-only (default: the "
        "sign-in page without a session)",
    )
    p.add_argument(
        "--secure-cookies",
        action="store_true",
        help="mark the session cookie Secure even on plain http (behind a TLS "
        "proxy that does not say so with X-Forwarded-Proto)",
    )
    _register_hosts(p)
    p.set_defaults(handler=cmd_ui, needs="role")


def _register_hosts(p: Any) -> None:
    r.ALLOWED_HOSTS.add_to(
        p,
        action="append",
        metavar="NAME",
        help="a Host name requests may be addressed to besides 127.0.0.1, localhost, ::1, "
        "--host and any IP address (.example.com: the domain and its subdomains; *: any); "
        f"repeatable; others are refused with 400 (DNS rebinding) (${r.ALLOWED_HOSTS.env})",
    )


def _register_scheduler(sub: Any) -> None:
    p = add_role(
        sub,
        "scheduler",
        cmd_scheduler,
        help="run a scheduler processor (fires due runs)",
        group="scheduler",
        flags=(r.MISFIRE_THRESHOLD, r.COMMIT_INTERVAL, r.SCHEDULER_SESSION_TIMEOUT, r.LOOKAHEAD),
    )
    _register_store(p)
    register_fire_rates(p)


def _register_store(p: Any) -> None:
    """The scheduler's two tiers (``streams.scheduler.state``) and its static membership."""
    r.SCHEDULER_STATE_DIR.add_to(
        p,
        metavar="DIR",
        help="two tiers: keep every job in a RocksDB store per partition under DIR and in "
        "memory only what is due within the next minute; a restart on the same disk "
        "takes its partitions back without replaying the jobs topic "
        f"(${r.SCHEDULER_STATE_DIR.env})",
    )
    r.SCHEDULER_INSTANCE_ID.add_to(
        p,
        help="static group membership: a scheduler started again with the same id (after a "
        "crash, on the same --state-dir) takes its partitions back at once instead of after "
        "--session-timeout; a stopped one keeps them that long unless it comes back "
        f"(${r.SCHEDULER_INSTANCE_ID.env})",
    )
    p.add_argument(
        "--rebuild-index",
        action="store_true",
        help="with --state-dir: rebuild each partition's store from the jobs topic when "
        "it is first assigned",
    )
    p.add_argument(
        "--no-standby",
        dest="standby",
        action="store_false",
        default=r.SCHEDULER_STANDBY.get(),
        help="with --state-dir: keep no standby stores of the partitions other schedulers "
        "own (by default every scheduler keeps all of them warm on its disk, joins the "
        "group once they are, and takes a partition over from its standby store in "
        f"seconds when the owner's host is lost; ${r.SCHEDULER_STANDBY.env}=0 says the same)",
    )
    p.add_argument(
        "--check-index",
        action="store_true",
        help="with --state-dir: check every partition store against the jobs topic, print "
        "what differs and exit (1 if anything does); run it with no scheduler on DIR",
    )


def _register_sink(sub: Any) -> None:
    p = add_role(
        sub, "sink", cmd_sink, help="run a history sink (history topic -> Cassandra)", group="sink"
    )
    p.add_argument(
        "--batch-rows", type=int, default=64, help="rows per unlogged batch (1: no batches)"
    )
    p.add_argument("--in-flight", type=int, default=16, help="batches written at once")


def _register_admission(sub: Any) -> None:
    p = add_role(
        sub,
        "admission",
        cmd_admission,
        help="run an admission (tenants' commands -> jobs)",
        group="admission",
        flags=(r.TENANT_MAX_JOBS, r.TENANT_MAX_EVENT_JOBS, r.TENANT_TRIGGERS_PER_SECOND),
    )
    add_grant_flags(p)


def cmd_scheduler(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_role
    from cronstream.streams.scheduler.config import SchedulerConfig
    from cronstream.streams.scheduler.processor import MAX_LOOKAHEAD_MS, Scheduler

    settings = settings.as_role("scheduler")  # its own Kafka user and ACLs
    rate, rates = fire_rates(args)
    if not 0 <= args.lookahead <= MAX_LOOKAHEAD_MS:
        return invalid(f"--lookahead must be 0 to {MAX_LOOKAHEAD_MS // 1000}s")
    if (args.rebuild_index or args.check_index) and not args.state_dir:
        return invalid("--rebuild-index and --check-index need --state-dir")
    if args.check_index:
        return check_index(settings, args.state_dir)
    config = SchedulerConfig(
        tenant_fire_rate=rate,
        tenant_fire_rates=rates,
        group=member_group(args, settings),
        threshold_ms=args.misfire_threshold,
        checkpoint_ms=args.commit_interval,
        session_timeout_ms=args.session_timeout,
        lookahead_ms=args.lookahead,
        state_dir=args.state_dir,
        rebuild_index=args.rebuild_index,
        standby=args.standby,
        instance_id=args.instance_id,
        name=args.name,
    )
    return run_role("scheduler", config, Scheduler, settings, args.metrics_port)


def check_index(settings: Settings, state_dir: str) -> int:
    from cronstream.runtime.registry import registry_client
    from cronstream.schemas.serde import Codec
    from cronstream.streams.scheduler.definitions import Definitions
    from cronstream.streams.scheduler.index_check import check_stores

    with registry_client(settings) as registry:
        checked, problems = check_stores(settings, state_dir, Definitions(Codec(registry)))
    for problem in problems:
        print(problem)
    print(f"{checked} partition stores checked against the jobs topic: {len(problems)} differences")
    return 1 if problems or not checked else 0


def cmd_sink(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.consumers.sink import Sink, SinkConfig
    from cronstream.foreground import run_role
    from cronstream.runtime.waiting import CASSANDRA, KAFKA, REGISTRY

    settings = settings.as_role("sink")  # its own Kafka user and ACLs
    config = SinkConfig(
        group=member_group(args, settings),
        name=args.name,
        batch_rows=max(1, args.batch_rows),
        in_flight=max(1, args.in_flight),
    )
    return run_role(
        "sink", config, Sink, settings, args.metrics_port, needs=(KAFKA, REGISTRY, CASSANDRA)
    )


def cmd_admission(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.foreground import run_role
    from cronstream.producers.admission.core import Quotas
    from cronstream.producers.admission.processor import AdmissionConfig, AdmissionProcessor
    from cronstream.runtime.grants import PolicyBook, policy_path

    settings = settings.as_role("admission")  # its own Kafka user and ACLs
    config = AdmissionConfig(
        group=member_group(args, settings),
        name=args.name,
        quotas=Quotas(
            max_jobs=args.max_jobs,
            max_event_jobs=args.max_event_jobs,
            # the admission counts a tenant's triggers in any 60 s
            triggers_per_minute=round(args.triggers_per_second * 60),
        ),
        grants=tuple(args.grant),
        policy_file=policy_path(settings, args.policy),
    )
    try:  # a grant that cannot be read is refused before anything starts
        PolicyBook(config.grants, config.policy_file)
    except ValueError as exc:
        return invalid(str(exc))
    return run_role("admission", config, AdmissionProcessor, settings, args.metrics_port)


def cmd_api(settings: Settings, args: argparse.Namespace) -> int:
    from cronstream.api.serve import serve

    settings = settings.as_role("api")  # its own Kafka user and ACLs
    if not hosts_valid(args):
        return EXIT_INVALID
    return serve(settings, host=args.host, port=args.port, allowed_hosts=args.allowed_host)


def hosts_valid(args: argparse.Namespace) -> bool:
    from cronstream.api.guard import AllowedHosts

    try:
        AllowedHosts.of(args.host, args.allowed_host)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return False
    return True


def cmd_ui(settings: Settings, args: argparse.Namespace) -> int:
    settings = settings.as_role("ui")  # its own Kafka user and ACLs
    from cronstream.api.serve import serve
    from cronstream.ui.app import UiOptions, ui_factory

    if not hosts_valid(args):
        return EXIT_INVALID
    options = UiOptions(
        prometheus_url=args.prometheus, anonymous=args.anonymous, secure_cookies=args.secure_cookies
    )
    return serve(
        settings,
        host=args.host,
        port=args.port,
        factory=ui_factory(options),
        allowed_hosts=args.allowed_host,
    )
