"""``python -m infra up|down|status|logs|clean|fetch|bootstrap``: what the Makefile calls."""

from __future__ import annotations

import argparse
import sys

from infra import stack
from infra.bootstrap import BootstrapError, bootstrap
from infra.services import StackError
from runtime.settings import Settings, SettingsError
from schemas.registry import RegistryUnavailable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="fetch, start and bootstrap the local stack")
    up.add_argument("--no-bootstrap", action="store_true")
    sub.add_parser("down", help="stop every service (data is kept)")
    sub.add_parser("status", help="one line per service")
    lg = sub.add_parser("logs", help="the tail of every service log")
    lg.add_argument("-n", type=int, default=40)
    cl = sub.add_parser("clean", help="stop and delete data, logs and generated config")
    cl.add_argument("--all", action="store_true", help="also delete the downloaded jars")
    sub.add_parser("fetch", help="download the services' jars only")
    sub.add_parser("bootstrap", help="create topics, subjects, keyspace (idempotent)")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        if args.cmd == "up":
            took = stack.up(settings)
            print(f"[stack] services up in {took:.1f}s", file=sys.stderr)
            if not args.no_bootstrap:
                bootstrap(settings)
        elif args.cmd == "down":
            stack.down(settings)
        elif args.cmd == "status":
            bad = 0
            for st in stack.status(settings):
                rss = f"{st.rss_bytes / 2**20:.0f} MiB" if st.rss_bytes else "-"
                state = "ok" if st.ok else ("starting" if st.running else "down")
                bad += not st.ok
                print(f"{st.name:<10} {state:<9} pid={st.pid or '-':<8} rss={rss:<9} {st.endpoint}")
            return 1 if bad else 0
        elif args.cmd == "logs":
            print(stack.logs(settings, args.n))
        elif args.cmd == "clean":
            stack.clean(settings, keep_lib=not args.all)
        elif args.cmd == "fetch":
            stack.fetch(settings)
        elif args.cmd == "bootstrap":
            bootstrap(settings)
    except (StackError, SettingsError, BootstrapError, RegistryUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
