"""`cronstream tenant`: a tenant acting on its own jobs through the admission (an
operator onboards tenants with ``python -m cronstream.infra tenants add NAME``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cronstream.cli.api import over_http
from cronstream.cli.common import EXIT_INVALID, EXIT_UNAVAILABLE, duration_flag, invalid
from cronstream.producers.errors import NoAnswer
from cronstream.producers.spec import load_jobs_file
from cronstream.producers.tenant import TenantClient
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import to_jsonable
from cronstream.schemas.redact import redact_jsonable
from cronstream.schemas.tenancy import TenantResult


def register(sub: Any) -> None:
    tenant = sub.add_parser("tenant", help="act on your own jobs as a tenant (via admission)")
    r.TENANT.add_to(tenant)
    tenant.add_argument(
        "--timeout",
        type=duration_flag,
        default=30_000,
        help="how long to wait for each answer (30s)",
    )
    r.API_URL.add_to(
        tenant,
        metavar="URL",
        help="through `cronstream api` at URL instead of Kafka (the tenant is the token's) "
        f"(${r.API_URL.env})",
    )
    r.API_TOKEN_FILE.add_to(
        tenant,
        help=f"a file holding the API token (${r.API_TOKEN_FILE.env}; or the token itself "
        f"in ${r.API_TOKEN.env})",
    )
    acts = tenant.add_subparsers(dest="tenant_command", required=True)
    put = acts.add_parser("put", help="create or change the jobs of a jobs YAML file")
    put.add_argument("file")
    for name in ("delete", "pause", "resume"):
        act = acts.add_parser(name, help=f"{name} one of your jobs")
        act.add_argument("job_id", metavar="JOB_ID")
    trigger = acts.add_parser("trigger", help="run one of your jobs now")
    trigger.add_argument("job_id", metavar="JOB_ID")
    trigger.add_argument("--key", help="idempotency key (same key: the same run)")
    cancel = acts.add_parser("cancel", help="cancel one of your runs (JOB@WHEN)")
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument("--reason")
    tenant.set_defaults(handler=cmd_tenant, needs="settings")


def cmd_tenant(settings: Settings, args: argparse.Namespace) -> int:
    if args.api:
        return over_http(settings, args)
    if not args.tenant:
        return invalid(f"--tenant (or ${r.TENANT.env}) is required")
    with TenantClient(settings, args.tenant) as client:
        try:
            results = _act(client, args)
        except NoAnswer as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNAVAILABLE
    for result in results:
        print(json.dumps(redact_jsonable(to_jsonable(result))))
    return 0 if all(r.accepted for r in results) else EXIT_INVALID


def _act(client: TenantClient, args: argparse.Namespace) -> list[TenantResult]:
    command = args.tenant_command
    client.timeout = args.timeout / 1000
    if command == "put":
        max_bytes = client.settings.max_payload_bytes
        jobs = load_jobs_file(Path(args.file), max_payload_bytes=max_bytes)
        return [client.put(job) for job in jobs]
    if command == "trigger":
        return [client.trigger(args.job_id, args.key)]
    if command == "cancel":
        return [client.cancel(args.run_id, args.reason)]
    act = {"delete": client.delete, "pause": client.pause, "resume": client.resume}[command]
    return [act(args.job_id)]
