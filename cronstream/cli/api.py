"""`cronstream tenant --api URL ...`: the same commands through the HTTP API, with a
token instead of a Kafka login (the tenant is the token's)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from cronstream.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    invalid,
)
from cronstream.producers.spec import load_jobs_file, yaml_entries
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings

# HTTP status -> exit code (README, "Exit codes").
EXIT_FOR = {401: EXIT_REFUSED, 404: EXIT_NOT_FOUND, 503: EXIT_UNAVAILABLE}


def _token(args: argparse.Namespace) -> str:
    token = r.API_TOKEN.get()
    if token:
        return str(token)
    if not args.token_file:
        raise ValueError(f"--api needs a token: --token-file F or ${r.API_TOKEN.env}")
    try:
        return Path(args.token_file).read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read --token-file {args.token_file}: {exc.strerror}") from None


def _requests(settings: Settings, args: argparse.Namespace) -> list[tuple[str, str, Any]]:
    """(method, path, JSON body) per command."""
    command = args.tenant_command
    if command == "put":
        # Validated here first, so an invalid file sends nothing; the API validates again.
        load_jobs_file(Path(args.file), max_payload_bytes=settings.max_payload_bytes)
        # Read as the jobs file was (a bare ``on:`` key is the trigger, not YAML's true).
        entries = yaml_entries(Path(args.file), "jobs")
        return [
            ("PUT", f"/v1/jobs/{e['id']}", {k: v for k, v in e.items() if k != "id"})
            for e in entries
        ]
    if command == "delete":
        return [("DELETE", f"/v1/jobs/{args.job_id}", None)]
    if command == "trigger":
        return [("POST", f"/v1/jobs/{args.job_id}/trigger", {"idempotency_key": args.key})]
    if command == "cancel":
        return [("POST", f"/v1/runs/{args.run_id}/cancel", {"reason": args.reason})]
    return [("POST", f"/v1/jobs/{args.job_id}/{command}", None)]


def over_http(settings: Settings, args: argparse.Namespace) -> int:
    try:
        token = _token(args)
    except ValueError as exc:
        return invalid(str(exc))
    worst = 0
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=args.api, headers=headers, timeout=args.timeout / 1000 + 5) as http:
        for method, path, body in _requests(settings, args):
            try:
                response = http.request(method, path, json=body)
            except httpx.HTTPError as exc:
                print(f"error: {args.api} unreachable: {exc}", file=sys.stderr)
                return EXIT_UNAVAILABLE
            print(json.dumps(response.json()))
            if response.status_code >= 400:
                worst = worst or EXIT_FOR.get(response.status_code, EXIT_INVALID)
    return worst
