"""``python -m cronstream.infra up|down|status|logs|clean|fetch|bootstrap|tenants``: what
the Makefile calls."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace

from cronstream.infra import stack
from cronstream.infra.bootstrap import bootstrap
from cronstream.infra.connect import ensure_history_sink, history_table
from cronstream.infra.errors import BootstrapError, StackError, TenantError
from cronstream.infra.tenants import tenants_command, trigger_sources_command
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings
from cronstream.schemas.errors import RegistryUnavailable

ALLOW_RF1 = f"keep replication factor 1 on a cluster of 3+ brokers ({o.ALLOW_RF1.env}=1)"


def main(argv: list[str] | None = None) -> int:  # long: every stack command's parser
    parser = argparse.ArgumentParser(prog="python -m cronstream.infra", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="fetch, start and bootstrap the local stack")
    up.add_argument("--no-bootstrap", action="store_true")
    up.add_argument("--allow-rf1", action="store_true", help=ALLOW_RF1)
    sub.add_parser("down", help="stop every service (data is kept)")
    rs = sub.add_parser(
        "restart",
        help="stop the services named and start them again, their config written anew "
        "(e.g. prometheus alertmanager connect)",
    )
    rs.add_argument("names", nargs="+", metavar="SERVICE")
    sub.add_parser("status", help="one line per service")
    lg = sub.add_parser("logs", help="the tail of every service log")
    lg.add_argument("-n", type=int, default=40)
    cl = sub.add_parser("clean", help="stop and delete data, logs and generated config")
    cl.add_argument("--all", action="store_true", help="also delete the downloaded jars")
    sub.add_parser("fetch", help="download the services' jars only")
    boot = sub.add_parser("bootstrap", help="create topics, subjects, keyspace (idempotent)")
    boot.add_argument("--allow-rf1", action="store_true", help=ALLOW_RF1)
    tn = sub.add_parser("tenants", help="add, list or remove tenants (as the super user)")
    tn.add_argument("action", choices=("add", "list", "remove"))
    tn.add_argument("names", nargs="*", metavar="NAME")
    tn.add_argument(
        "--if-secured", action="store_true", help="do nothing on a plaintext stack (make run)"
    )
    ts = sub.add_parser(
        "trigger-sources",
        help="let the trigger processor read operators' "
        "source topics (names or prefixes), as the super user",
    )
    ts.add_argument("action", choices=("add", "remove"))
    ts.add_argument("prefixes", nargs="+", metavar="TOPIC_OR_PREFIX")
    args = parser.parse_args(argv)
    commands: dict[str, Callable[[Settings], int | None]] = {
        "up": lambda settings: _up(settings, bootstrap_too=not args.no_bootstrap),
        "down": stack.down,
        "restart": lambda settings: _restart(settings, args.names),
        "status": _status,
        "logs": lambda settings: print(stack.logs(settings, args.n)),
        "clean": lambda settings: stack.clean(settings, keep_lib=not args.all),
        "fetch": stack.fetch,
        "bootstrap": bootstrap,
        "tenants": lambda settings: (
            0
            if args.if_secured and settings.kafka_security == "plaintext"
            else tenants_command(settings, args.action, args.names)
        ),
        "trigger-sources": lambda settings: trigger_sources_command(
            settings, args.action, args.prefixes
        ),
    }
    try:
        settings = Settings.from_env()
        if getattr(args, "allow_rf1", False):
            settings = replace(settings, allow_rf1=True)
        return commands[args.cmd](settings) or 0
    except (StackError, SettingsError, BootstrapError, RegistryUnavailable, TenantError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _up(settings: Settings, *, bootstrap_too: bool) -> None:
    took = stack.up(settings)
    print(f"[stack] services up in {took:.1f}s", file=sys.stderr)
    if bootstrap_too:
        bootstrap(settings)
        took = stack.up(settings, bootstrapped=True)  # Kafka Connect: its login exists now
        ensure_history_sink(settings)
        print(
            f"[stack] Kafka Connect up in {took:.1f}s; history sinks to the warehouse's "
            f"{history_table(settings)} table",
            file=sys.stderr,
        )


def _restart(settings: Settings, names: list[str]) -> None:
    took = stack.restart(settings, names)
    if "connect" in names:  # its connector's config may name what the worker has changed
        ensure_history_sink(settings)
    print(f"[stack] {', '.join(names)} restarted in {took:.1f}s", file=sys.stderr)


def _status(settings: Settings) -> int:
    bad = 0
    for st in stack.status(settings):
        rss = f"{st.rss_bytes / 2**20:.0f} MiB" if st.rss_bytes else "-"
        state = "ok" if st.ok else ("starting" if st.running else "down")
        bad += not st.ok
        print(f"{st.name:<12} {state:<9} pid={st.pid or '-':<8} rss={rss:<9} {st.endpoint}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
