"""`cronstream flows ...` (define, inspect, trigger and rerun flows) and
`cronstream flows-coordinator` (the role that runs them: ``streams.flows.app``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from cronstream.cli.common import add_role, known
from cronstream.cli.tenant_flags import fire_rates, register_fire_rates
from cronstream.producers.client import JobClient
from cronstream.producers.flows import load_flows_file
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import to_jsonable

log = logging.getLogger("cronstream.flows")
CATCH_UP_S = 60.0


def cmd_flows_put(client: JobClient, args: argparse.Namespace) -> int:
    flows = load_flows_file(Path(args.file), max_payload_bytes=client.settings.max_payload_bytes)
    for flow, schedule in flows:
        client.put_flow(flow, schedule)
        print(f"put flow {flow.flow_id}: {len(flow.nodes)} nodes, {schedule.describe_schedule()}")
    return 0


def cmd_flows_get(client: JobClient, args: argparse.Namespace) -> int:
    flow = known(client.get_flow(args.flow_id), args.flow_id)
    schedule = client.get(args.flow_id)
    out = to_jsonable(flow)
    out["schedule"] = schedule.describe_schedule() if schedule else "none (deleted)"
    print(json.dumps(out, indent=2))
    return 0


def cmd_flows_list(client: JobClient, args: argparse.Namespace) -> int:
    flows = client.list_flows()
    if args.json:
        print(json.dumps([to_jsonable(f) for f in flows]))
        return 0
    for flow in flows:
        job = client.get(flow.flow_id)
        schedule = job.describe_schedule() if job else "no schedule"
        print(f"{flow.flow_id:<40} {len(flow.nodes):>5} nodes  {schedule}")
    return 0


def cmd_flows_delete(client: JobClient, args: argparse.Namespace) -> int:
    client.delete_flow(args.flow_id)
    print(f"deleted flow {args.flow_id}")
    return 0


def cmd_flows_trigger(client: JobClient, args: argparse.Namespace) -> int:
    known(client.get_flow(args.flow_id), args.flow_id)
    run = client.trigger(args.flow_id, idempotency_key=args.idempotency_key)
    print(f"triggered flow run {run.run_id}")
    return 0


def cmd_flows_rerun(client: JobClient, args: argparse.Namespace) -> int:
    if not args.from_failed:
        raise SpecError(args.flow_run_id, ["say --from-failed (the only rerun there is)"])
    event = client.rerun_flow(args.flow_run_id)
    print(f"rerun of the failed part of {event.flow_run_id} requested")
    return 0


def cmd_flows_coordinator(settings: Settings, args: argparse.Namespace) -> int:

    from cronstream.foreground import setup_process, stop_on_signals
    from cronstream.runtime.metrics_server import serve as serve_metrics
    from cronstream.runtime.stop import StopWaiting, requested
    from cronstream.runtime.waiting import KAFKA, REGISTRY, reach, wait_for
    from cronstream.streams.core.rates import TenantRates
    from cronstream.streams.flows.app import build_app

    rate, overrides = fire_rates(args)  # a bad flag: refused before anything starts
    rates = TenantRates(rate, overrides=overrides)
    setup_process()
    if args.nice:
        # Below the fire path's priority where they share cores. Beside 5,000 fires/s
        # with 20 flows/s (2 pairs on 2 cores): the jobs' fire skew p99 16/15 ms at nice
        # 0, 14/13 at nice 10; the flows' rate and node hop p99 (45 ms) unchanged.
        os.nice(args.nice)
    serve_metrics(args.metrics_port)
    settings = settings.as_role("flows-coordinator")  # its own Kafka user and ACLs
    stop_on_signals()  # until faust's own handlers: a stop while waiting

    def built() -> tuple[Any, Any]:  # resolves its writer schemas
        reach(settings, (KAFKA, REGISTRY))
        return build_app(settings, rates)

    try:
        app, definitions = wait_for(
            f"flows coordinator {args.name}", built, log=log, stop=requested
        )
    except StopWaiting:
        return 0
    definitions.start()
    if not definitions.caught_up.wait(CATCH_UP_S):
        log.warning("flow definitions not read to their end within %.0f s; going on", CATCH_UP_S)
    log.info(
        "flows coordinator %s: %d flow definitions read; joining group %s",
        args.name,
        len(definitions.flows),
        app.conf.id,
    )
    try:
        _worker_class()(app, loglevel=args.log_level, quiet=True).execute_from_commandline()
    finally:
        definitions.stop()
    return 0


def _worker_class() -> Any:
    import faust

    from cronstream.runtime.stop import arm

    class Worker(faust.Worker):
        """faust's worker whose stop signal also arms the process's stop deadline
        (``runtime.stop.arm``): a coordinator whose broker is frozen leaves within 10 s."""

        def _schedule_shutdown(self, signal: Any) -> None:
            arm()
            super()._schedule_shutdown(signal)

    return Worker


def register(sub: Any) -> None:
    flows = sub.add_parser(
        "flows", help="define, inspect, trigger and rerun flows (DAGs)"
    ).add_subparsers(dest="action", required=True)
    put = flows.add_parser("put", help="create or replace the flows of a YAML file (all or none)")
    put.add_argument("-f", "--file", required=True)
    put.set_defaults(handler=cmd_flows_put, needs="client")
    for name, handler, text in (
        ("get", cmd_flows_get, "print one flow as JSON"),
        ("delete", cmd_flows_delete, "delete a flow and its schedule"),
    ):
        p = flows.add_parser(name, help=text)
        p.add_argument("flow_id")
        p.set_defaults(handler=handler, needs="client")
    lst = flows.add_parser("list", help="every flow, one line each")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=cmd_flows_list, needs="client")
    trig = flows.add_parser("trigger", help="start a flow run now")
    trig.add_argument("flow_id")
    trig.add_argument("--idempotency-key", help="the same key never yields two flow runs")
    trig.set_defaults(handler=cmd_flows_trigger, needs="client")
    rerun = flows.add_parser("rerun", help="run the failed part of a flow run again")
    rerun.add_argument("flow_run_id", help="FLOW@<slot>")
    rerun.add_argument(
        "--from-failed",
        action="store_true",
        required=True,
        help="run the failed and upstream-failed nodes again",
    )
    rerun.set_defaults(handler=cmd_flows_rerun, needs="client")

    coord = add_role(
        sub,
        "flows-coordinator",
        cmd_flows_coordinator,
        help="run a flows coordinator (faust-streaming)",
        name="flows",
    )
    coord.add_argument("--log-level", default="WARNING", help="faust's log level (WARNING)")
    r.FLOWS_COORDINATOR_NICE.add_to(coord, type=int, choices=range(20))
    register_fire_rates(coord)  # a tenant's node runs at most at its fire rate
