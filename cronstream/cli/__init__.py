"""`cronstream`: the single command-line entry point. `cronstream --help` lists commands."""

from __future__ import annotations

import argparse
import json
import os
import sys

from cronstream.cli import archive, dependencies, flows, history, jobs, roles, tenants, triggers
from cronstream.cli.common import (
    EXIT_INVALID,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    add_verbosity,
    command_logging,
)
from cronstream.producers.client import JobClient
from cronstream.producers.errors import UnknownJob
from cronstream.runtime.errors import KafkaAuthError, PublishError, ServiceRefused, SettingsError
from cronstream.runtime.health import cassandra_health, kafka_health, registry_health
from cronstream.runtime.settings import Settings
from cronstream.schemas.definition.zones import TZDATA_VERSION
from cronstream.schemas.errors import RegistryError, RegistryUnavailable, SpecError, TargetTypeError
from cronstream.schemas.targets import registered


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    kafka = kafka_health(settings)
    registry = registry_health(settings.registry_url)
    cassandra = cassandra_health(settings)
    report = {
        "ok": kafka.ok and registry.ok and cassandra.ok,
        "kafka": {
            "ok": kafka.ok,
            "bootstrap_servers": settings.bootstrap_servers,
            "detail": kafka.detail,
            "latency_ms": round(kafka.latency_ms, 1),
        },
        "schema_registry": {
            "ok": registry.ok,
            "url": settings.registry_url,
            "detail": registry.detail,
            "latency_ms": round(registry.latency_ms, 1),
        },
        "cassandra": {
            "ok": cassandra.ok,
            "hosts": list(settings.cassandra_hosts),
            "port": settings.cassandra_port,
            "keyspace": settings.keyspace,
            "detail": cassandra.detail,
            "latency_ms": round(cassandra.latency_ms, 1),
        },
        "topic_prefix": settings.topic_prefix,
        "zone_database": f"tzdata {TZDATA_VERSION}",
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, endpoint in (
            ("kafka", settings.bootstrap_servers),
            ("schema_registry", settings.registry_url),
            ("cassandra", ",".join(settings.cassandra_hosts) + f":{settings.cassandra_port}"),
        ):
            entry = report[name]
            assert isinstance(entry, dict)
            state = "ok  " if entry["ok"] else "DOWN"
            print(f"{state} {name:<16} {endpoint:<45} {entry['detail']}")
        print(
            f"     {'zone database':<16} tzdata {TZDATA_VERSION} (every slot is computed with it)"
        )
    return 0 if report["ok"] else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cronstream", description="A Kafka-native distributed job scheduler."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    jobs.register(sub)
    roles.register(sub)
    history.register(sub)
    archive.register(sub)
    tenants.register(sub)
    flows.register(sub)
    dependencies.register(sub)
    triggers.register(sub)
    status = sub.add_parser("status", help="health and endpoints of every service")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status, needs="settings")
    add_verbosity(parser)
    return parser


# What each expected failure exits with (README, "Exit codes"), and a hint.
EXITS: tuple[tuple[type[Exception] | tuple[type[Exception], ...], int, str], ...] = (
    (UnknownJob, EXIT_NOT_FOUND, ""),
    ((SettingsError, TargetTypeError), EXIT_INVALID, ""),
    ((KafkaAuthError, ServiceRefused), EXIT_REFUSED, ""),
    (
        (RegistryUnavailable, RegistryError, PublishError),
        EXIT_UNAVAILABLE,
        " (is the stack up? 'cronstream status')",
    ),
)
FAILURES = (
    UnknownJob,
    SettingsError,
    TargetTypeError,
    KafkaAuthError,
    ServiceRefused,
    RegistryUnavailable,
    RegistryError,
    PublishError,
)


def main(argv: list[str] | None = None) -> int:
    try:
        registered()  # the target types first: a plugin that cannot load stops any command
        args = build_parser().parse_args(argv)
        settings = Settings.from_env()
        if args.needs != "role":  # a role logs as a service (cronstream.foreground)
            command_logging(args.verbose)
        if args.needs == "client":
            with JobClient(settings) as client:
                return int(args.handler(client, args))
        return int(args.handler(settings, args))
    except SpecError as exc:
        print(f"error: {exc.subject} is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        print("nothing was written", file=sys.stderr)
        return EXIT_INVALID
    except FAILURES as exc:
        code, hint = next((c, h) for kinds, c, h in EXITS if isinstance(exc, kinds))
        print(f"error: {exc}{hint}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`cronstream history ... | head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
