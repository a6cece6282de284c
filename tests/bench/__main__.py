"""`make bench`: scheduler, worker, history sink, query, archive and dashboard benchmarks against the local broker, as a table.

Every scenario runs in a fresh topic prefix. Skew is measured from the outside: the
record timestamp librdkafka stamps at produce() minus the run's due time (slot + the
job's jitter offset), read back from the runs topic. Worker figures come from the
history topic the same way: a run's STARTED record timestamp minus its run request's,
and SUCCEEDED records per second. CPU is read from /proc for every process involved.
Medians of several runs.

    python -m tests.bench [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

from cronstream.runtime.settings import Settings
from tests.bench.api import bench_api
from tests.bench.archive import bench_archive
from tests.bench.boundary import bench_boundary
from tests.bench.cluster import bench_cluster
from tests.bench.common import ROWS
from tests.bench.fairness import bench_fairness
from tests.bench.fire_path import bench_fire_path
from tests.bench.flows import bench_flows
from tests.bench.history import bench_queries, bench_sink
from tests.bench.hops import bench_hops
from tests.bench.isolation import bench_isolation
from tests.bench.malformed import bench_malformed, bench_scrape
from tests.bench.scale import bench_scale
from tests.bench.scheduler import (
    bench_burst,
    bench_million,
    bench_skew,
    bench_slots,
    bench_throughput,
)
from tests.bench.security import bench_security
from tests.bench.target_rows import bench_target_rows
from tests.bench.tiers import bench_tiers
from tests.bench.triggers import bench_triggers
from tests.bench.ui import bench_ui
from tests.bench.workers import bench_drain, bench_fire_to_start, bench_workers
from tests.integration.helpers import kill_children


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench")
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller loads")
    parser.add_argument(
        "--only", nargs="*", default=None, metavar="NAME", help="benchmarks to run (all by default)"
    )
    args = parser.parse_args()
    plan = _plan(Settings.from_env(), args.quick)
    if unknown := set(args.only or ()) - plan.keys():
        parser.error(f"--only: no benchmark {sorted(unknown)}; one of {sorted(plan)}")
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    try:
        for name, fn in plan.items():
            if args.only is None or name in args.only:
                print(f"[bench] {name}", flush=True)
                fn()
    finally:
        kill_children()  # none on the normal path: each benchmark stops its own
    _print_table()
    return 0


def _plan(base: Settings, quick: bool) -> dict[str, Callable[[], None]]:
    """Every benchmark by name, in the order ``make bench`` runs them."""
    runs = 1 if quick else 3
    return {
        "throughput": lambda: bench_throughput(base, runs, 20_000 if quick else 40_000),
        "skew": lambda: bench_skew(base, runs),
        "burst": lambda: bench_burst(base, runs, 10_000 if quick else 100_000),
        "million": lambda: bench_million(base, 1 if quick else 2, 50_000 if quick else 1_000_000),
        "distinct": lambda: bench_million(
            base, 1 if quick else 2, 50_000 if quick else 1_000_000, distinct=True
        ),
        "slots": lambda: bench_slots(runs, 100_000),
        "workers": lambda: bench_workers(base, runs, 12_000, (1, 2, 4)),
        "hops": lambda: bench_hops(base, runs, 24_000),
        "targets": lambda: bench_target_rows(base, runs, 2_000),
        "drain": lambda: bench_drain(base, runs, 10.0, (1, 2, 4)),
        "listener": lambda: bench_security(base, 2 * runs - 1, 3_000 if quick else 12_000),
        "security": lambda: bench_isolation(base, runs, quick),
        "malformed": lambda: bench_malformed(
            base,
            2 * runs - 1,
            (30_000, 9_000) if quick else (100_000, 30_000),
            3_000 if quick else 10_000,
        ),
        "scrape": lambda: bench_scrape(base, 2 * runs - 1, 9_000 if quick else 30_000),
        "latency": lambda: bench_fire_to_start(base, runs),
        "sink": lambda: bench_sink(base, runs, 100_000 if quick else 300_000),
        "fairness": lambda: bench_fairness(
            base, runs // 2 + 1 if not quick else 1, 10_000 if quick else 100_000
        ),
        "flows": lambda: bench_flows(base, runs, quick),
        "api": lambda: bench_api(base, runs, 1000 if quick else 4000),
        "queries": lambda: bench_queries(
            base, runs, 200_000 if quick else 1_000_000, 100 if quick else 300
        ),
        "ui": lambda: bench_ui(
            base,
            runs,
            20_000 if quick else 100_000,
            200_000 if quick else 1_000_000,
            50 if quick else 200,
        ),
        "archive": lambda: bench_archive(
            base, runs, 10_000_000 if quick else 100_000_000, 10 if quick else 20
        ),
        "boundary": lambda: bench_boundary(
            base, 1 if quick else 2, 10_000 if quick else 100_000, 5_000
        ),
        "tiers": lambda: bench_tiers(base, 1 if quick else 3, 200_000 if quick else 10_000_000),
        "scale": lambda: bench_scale(base, 1 if quick else 2, 3000, 3),
        "cluster": lambda: bench_cluster(runs, 12_000),
        "fire-path": lambda: bench_fire_path(runs),
        "triggers": lambda: bench_triggers(
            base, runs, 10.0 if quick else 20.0, 50_000 if quick else 200_000
        ),
    }


def _print_table() -> None:
    width = max(len(r[0]) for r in ROWS)
    print()
    print(f"{'benchmark':<{width}}  {'median':>12}  {'target':>10}  notes")
    for name, value, target, note in ROWS:
        print(f"{name:<{width}}  {value:>12}  {target:>10}  {note}")
    print(f"\n{os.cpu_count()} cores; medians of the runs listed")


def _interrupted(signum: int, _frame: object) -> None:
    """SIGTERM or Ctrl-C: kill the schedulers and workers this bench started first (they
    would go on firing into its topics), then unwind, so that every benchmark's
    ``finally`` runs and its namespace's topics are deleted."""
    kill_children()
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
