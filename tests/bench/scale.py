"""Horizontal scale, simulated on one box: the same demand (``demand`` no-op runs per
second: every-second jobs spread by jitter) through 1 scheduler + 1 worker, then through
``wide`` schedulers + ``wide`` workers on the same 12 partitions. Per process: CPU
seconds per second over a 15 s window and the partitions it owns; in all: runs
requested and SUCCEEDED per second. The prediction: each role's CPU divides among its
processes (each about 1/``wide`` of the single one's) while the total stays the demand.

Run twice: every job at normal priority, then a third at each priority. The workers
share ``runs.high``, ``runs.normal`` and ``runs.low`` in one consumer group, and the
cooperative-sticky assignor balances the count of partitions per member, not per topic:
members that join one after the other can end with one holding all of ``runs.normal``
(found by this simulation)."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import replace

from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import JobDefinition, Priority
from tests.bench.common import NOOP_TARGET, cpu_s, job, namespace, put_jobs, row
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

PRIORITIES = tuple(Priority)

WINDOW_S = 15.0


def _measure(settings: Settings, count: int) -> dict[str, list[float]]:
    """``count`` schedulers and ``count`` workers: CPU s/s of each, runs/s in all."""
    pipeline = Pipeline(settings, count, 64, schedulers=count)
    schedulers, workers = pipeline.schedulers, pipeline.workers
    try:
        pipeline.wait_live()
        time.sleep(15)  # the groups settle, the backlog of the start drains
        procs = schedulers + workers
        cpu0, t0 = [cpu_s(p.proc.pid) for p in procs], time.time()
        time.sleep(WINDOW_S)
        cpu1, t1 = [cpu_s(p.proc.pid) for p in procs], time.time()
        owned = [_owned(s.log()) for s in schedulers]
    finally:
        pipeline.stop()
    used = [(b - a) / (t1 - t0) for a, b in zip(cpu0, cpu1, strict=True)]
    requested = sum(1 for p in Priority for r in read_topic(settings, Topics(settings).runs(p))
                    if t0 * 1000 <= r.timestamp_ms < t1 * 1000)  # fmt: skip
    done = sum(1 for r in read_topic(settings, Topics(settings).history)
               if r.headers.get("status") == "SUCCEEDED"
               and t0 * 1000 <= r.timestamp_ms < t1 * 1000)  # fmt: skip
    return {"scheduler": used[:count], "worker": used[count:], "owned": owned,
            "requested": [requested / (t1 - t0)], "done": [done / (t1 - t0)]}  # fmt: skip


def _owned(log: str) -> float:
    """Partitions a scheduler owns at the end of its log (assigned minus handed over)."""
    assigned = len(re.findall(r"partition \d+ assigned", log))
    handed = sum(len(m.split(",")) for m in re.findall(r"partitions \[([\d, ]+)\] handed", log))
    return float(assigned - handed)


def bench_scale(
    base: Settings, runs: int, demand: int, wide: int, spreads: tuple[bool, ...] = (False, True)
) -> None:
    for spread in spreads:
        _bench_scale(base, runs, demand, wide, spread=spread)


def _bench_scale(base: Settings, runs: int, demand: int, wide: int, *, spread: bool) -> None:
    results: dict[int, list[dict[str, list[float]]]] = {1: [], wide: []}
    label = "3 priorities" if spread else "normal priority"
    print(f"  {label}", flush=True)

    def make(i: int) -> JobDefinition:
        made = job(f"x-{i}", every_ms=1000, jitter_ms=999, target=NOOP_TARGET)
        return replace(made, priority=PRIORITIES[i % 3]) if spread else made

    for k in range(runs):
        for count in (1, wide) if k % 2 == 0 else (wide, 1):
            with namespace(base) as settings:
                put_jobs(settings, demand, make)
                results[count].append(_measure(settings, count))
            last = results[count][-1]
            print(f"    {count} + {count}: scheduler CPU {[round(c, 2) for c in last['scheduler']]}"
                  f", worker CPU {[round(c, 2) for c in last['worker']]}, owned "
                  f"{last['owned']}, requested {last['requested'][0]:.0f}/s, succeeded "
                  f"{last['done'][0]:.0f}/s", flush=True)  # fmt: skip
    single, spread = results[1], results[wide]
    for role in ("scheduler", "worker"):
        one = statistics.median(r[role][0] for r in single)
        each = statistics.median(c for r in spread for c in r[role])
        total = statistics.median(sum(r[role]) for r in spread)
        spread_of = [[round(c, 2) for c in r[role]] for r in spread]
        row(f"scale ({label}): {role} CPU s/s, 1 process / each of {wide} (sum)",
            f"{one:.2f} / {each:.2f} ({total:.2f})", f"each ~{one / wide:.2f}",
            f"demand {demand:,} runs/s; 12 partitions; per process {spread_of}")  # fmt: skip
    for key, what in (("requested", "run requests/s"), ("done", "SUCCEEDED/s")):
        row(f"scale ({label}): {what}, 1+1 / {wide}+{wide}",
            f"{statistics.median(r[key][0] for r in single):,.0f} / "
            f"{statistics.median(r[key][0] for r in spread):,.0f}", f"{demand:,}")  # fmt: skip
    owned = [o for r in spread for o in r["owned"]]
    row(f"scale ({label}): jobs partitions per scheduler, {wide} processes", str(sorted(owned)),
        f"12 / {wide}")  # fmt: skip
