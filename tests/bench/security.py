"""The secured listener's cost: the same end-to-end pipeline on SASL_SSL
(SCRAM-SHA-512 over TLS, as cronstream's user) and on the broker's anonymous plaintext
listener (topics under ``bench-plain.``, the only ones it may use), side by side in one
run. Which arm goes first alternates from pair to pair; the row is the median of the
pairs' ratios."""

from __future__ import annotations

import statistics

from cronstream.runtime.kafka.security import BENCH_PLAIN_PREFIX
from cronstream.runtime.settings import Settings
from tests.bench.common import namespace, pct, row
from tests.bench.scheduler import fire_skews
from tests.bench.workers import end_to_end
from tests.integration.helpers import plaintext_listener


def bench_security(base: Settings, pairs: int, demand: int) -> None:
    rates: dict[bool, list[float]] = {True: [], False: []}
    skews: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, dict[str, list[float]]] = {True: {}, False: {}}
    for k in range(pairs):
        for secured in (True, False) if k % 2 == 0 else (False, True):
            arm = base if secured else plaintext_listener(base)
            prefix = "csbench" if secured else BENCH_PLAIN_PREFIX.rstrip(".")
            with namespace(arm, prefix) as settings:
                rate, used = end_to_end(settings, 1, demand)
            with namespace(arm, prefix) as settings:
                skews[secured].append(pct(fire_skews(settings), 0.99))
            rates[secured].append(rate)
            for role, us in used.items():
                cpu[secured].setdefault(role, []).append(us)
    ratio = statistics.median(s / p for s, p in zip(rates[True], rates[False], strict=True))

    def cpu_text(secured: bool) -> str:
        return ", ".join(f"{r} {statistics.median(v):.0f}" for r, v in cpu[secured].items())

    row(
        "no-op runs/s end to end, 1 worker, SASL_SSL vs plaintext",
        f"{ratio:.0%}",
        ">= 85%",
        f"demand {demand:,}/s; SASL_SSL {[round(r) for r in rates[True]]} vs plaintext "
        f"{[round(r) for r in rates[False]]} runs/s; CPU us/run SASL_SSL: {cpu_text(True)}; "
        f"plaintext: {cpu_text(False)}",
    )
    row(
        "fire skew p99 @1k/s, SASL_SSL vs plaintext (ms)",
        f"{statistics.median(skews[True]):.0f} vs {statistics.median(skews[False]):.0f}",
        "<= 50",
        f"SASL_SSL {skews[True]}, plaintext {skews[False]}",
    )
