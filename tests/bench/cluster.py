"""What replication costs on this box: the same end-to-end no-op pipeline and the same
fire-skew run on the single-node stack (replication 1) and on the 3-node cluster
(``tests.chaos.stack.cluster_environment``: replication 3, min ISR 2, LOCAL_QUORUM),
alternating round by round so that both see the same machine.

The cluster is started if it is not running (about five minutes: three Cassandra nodes
one after the other) and stopped afterwards if this benchmark started it.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager

from infra.services import all_services
from runtime.settings import Settings
from tests.bench.common import namespace, pct, row
from tests.bench.scheduler import fire_skews
from tests.bench.workers import end_to_end
from tests.chaos import stack


@contextmanager
def _environment(variables: dict[str, str]) -> Iterator[Settings]:
    """This process (and the processes it starts: ``cli_env`` copies ``os.environ``)
    pointed at another stack for the block."""
    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        yield Settings.from_env()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_cluster(base: Settings, runs: int, demand: int) -> None:
    """End to end (1 worker, a scheduler asked for ``demand`` no-op runs/s) and fire skew
    at 1,000 fires/s (lookahead 0), single node and 3-node cluster side by side."""
    shapes = {"1 node, RF 1": {}, "3 nodes, RF 3 / min ISR 2": stack.cluster_environment()}
    with _environment(shapes["3 nodes, RF 3 / min ISR 2"]) as cluster:
        started = not all(svc.running() for svc in all_services(cluster))
        stack.up(cluster)
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in shapes}
    p99s: dict[str, list[float]] = {name: [] for name in shapes}
    try:
        for _ in range(runs):
            for name, variables in shapes.items():
                with _environment(variables) as settings:
                    shape_base = settings if variables else base
                    with namespace(shape_base) as ns:
                        rate, used = end_to_end(ns, 1, demand)
                    with namespace(shape_base) as ns:
                        p99s[name].append(pct(fire_skews(ns), 0.99))
                rates[name].append(rate)
                for role, us in used.items():
                    cpu[name].setdefault(role, []).append(us)
                print(f"  {name}: {rate:,.0f} runs/s, fire skew p99 {p99s[name][-1]} ms",
                      flush=True)  # fmt: skip
    finally:
        if started:
            with _environment(shapes["3 nodes, RF 3 / min ISR 2"]) as cluster:
                stack.down(cluster)
    single = statistics.median(rates["1 node, RF 1"])
    for name in shapes:
        median = statistics.median(rates[name])
        roles = ", ".join(f"{r} {statistics.median(v):.0f}" for r, v in cpu[name].items())
        row(f"no-op runs/s end to end, 1 worker, {name}", f"{median:,.0f}", "-",
            f"{median / single:.2f} x the single node in the same run; demand {demand:,}/s; "
            f"runs {[round(r) for r in rates[name]]}; CPU us/run: {roles}")  # fmt: skip
        row(f"fire skew p99 @1k/s, --lookahead-ms 0, {name} (ms)",
            f"{statistics.median(p99s[name]):.1f}", "<= 50", f"runs {p99s[name]}")  # fmt: skip
