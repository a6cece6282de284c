"""What replication costs on this box: the same end-to-end no-op pipeline and the same
fire-skew run on the single-node stack (replication 1) and on the 3-node cluster
(``tests.chaos.stack.cluster_environment``: replication 3, min ISR 2, LOCAL_QUORUM),
alternating round by round so that both see the same machine.

The cluster is started if it is not running (about five minutes: three Cassandra nodes
one after the other) and stopped afterwards if this benchmark started it.
"""

from __future__ import annotations

import statistics

from cronstream.infra.services import all_services
from tests.bench.common import namespace, pct, row
from tests.bench.scheduler import fire_skews
from tests.bench.workers import end_to_end
from tests.chaos import stack


def bench_cluster(runs: int, demand: int) -> None:
    """End to end (1 worker, a scheduler asked for ``demand`` no-op runs/s) and fire skew
    at 1,000 fires/s (lookahead 0), single node and 3-node cluster side by side."""
    single, cluster = "1 node, RF 1", "3 nodes, RF 3 / min ISR 2"
    shapes = {single: {}, cluster: stack.cluster_environment()}
    with stack.environment(shapes[cluster]) as settings:
        started = not all(svc.running() for svc in all_services(settings))
        stack.up(settings)
    rates: dict[str, list[float]] = {name: [] for name in shapes}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in shapes}
    p99s: dict[str, list[float]] = {name: [] for name in shapes}
    try:
        for _ in range(runs):
            for name, variables in shapes.items():
                with stack.environment(variables) as settings:
                    with namespace(settings) as ns:
                        rate, used = end_to_end(ns, 1, demand)
                    with namespace(settings) as ns:
                        p99s[name].append(pct(fire_skews(ns), 0.99))
                rates[name].append(rate)
                for role, us in used.items():
                    cpu[name].setdefault(role, []).append(us)
                print(
                    f"  {name}: {rate:,.0f} runs/s, fire skew p99 {p99s[name][-1]} ms", flush=True
                )
    finally:
        if started:
            with stack.environment(shapes[cluster]) as settings:
                stack.down(settings)
    baseline = statistics.median(rates[single])
    for name in shapes:
        median = statistics.median(rates[name])
        roles = ", ".join(f"{r} {statistics.median(v):.0f}" for r, v in cpu[name].items())
        row(
            f"no-op runs/s end to end, 1 worker, {name}",
            f"{median:,.0f}",
            "-",
            f"{median / baseline:.2f} x the single node in the same run; demand {demand:,}/s; "
            f"runs {[round(r) for r in rates[name]]}; CPU us/run: {roles}",
        )
        row(
            f"fire skew p99 @1k/s, --lookahead-ms 0, {name} (ms)",
            f"{statistics.median(p99s[name]):.1f}",
            "<= 50",
            f"runs {p99s[name]}",
        )
