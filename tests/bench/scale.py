"""Horizontal scale, simulated on one box: the same demand (``demand`` no-op runs per
second: every-second jobs spread by jitter) through 1 scheduler + 1 worker, then through
``wide`` schedulers + ``wide`` workers on the same 12 partitions. Per process: CPU
seconds per second over a 15 s window and the partitions it owns (a worker's: of each
runs topic); in all: runs requested and SUCCEEDED per second. The prediction: each
role's CPU divides among its processes (each about 1/``wide`` of the single one's) while
the total stays the demand.

Run twice: every job at normal priority, then a third at each priority. The workers
share ``runs.high``, ``runs.normal`` and ``runs.low`` in one consumer group with the
broker's range assignor (KIP-848), so each gets 12/``wide`` partitions of every topic
and one priority alone divides too. With the cooperative-sticky assignor they had
before (count balance, not per topic) one worker kept all of ``runs.normal`` and the
others idled with every job at normal priority (found by this simulation)."""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import replace
from typing import Any

from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import JobDefinition, Priority
from tests.bench.common import NOOP_TARGET, cpu_s, every_second, namespace, put_jobs, row
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

PRIORITIES = tuple(Priority)

WINDOW_S = 15.0


def _measure(settings: Settings, count: int) -> dict[str, list[Any]]:
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
        runs = [Topics(settings).runs(p) for p in PRIORITIES]
        shares = [_shares(w.log(), runs) for w in workers]
    finally:
        pipeline.stop()
    used = [(b - a) / (t1 - t0) for a, b in zip(cpu0, cpu1, strict=True)]
    requested = sum(
        1
        for p in Priority
        for r in read_topic(settings, Topics(settings).runs(p))
        if t0 * 1000 <= r.timestamp_ms < t1 * 1000
    )
    done = sum(
        1
        for r in read_topic(settings, Topics(settings).history)
        if r.headers.get("status") == "SUCCEEDED" and t0 * 1000 <= r.timestamp_ms < t1 * 1000
    )
    return {
        "scheduler": used[:count],
        "worker": used[count:],
        "owned": owned,
        "shares": shares,
        "requested": [requested / (t1 - t0)],
        "done": [done / (t1 - t0)],
    }


def _owned(log: str) -> float:
    """Partitions a scheduler owns at the end of its log (assigned minus handed over)."""
    assigned = len(re.findall(r"partition \d+ assigned", log))
    handed = sum(len(m.split(",")) for m in re.findall(r"partitions \[([\d, ]+)\] handed", log))
    return float(assigned - handed)


OWNED = re.compile(r"\b(assigned|revoked|partitions lost:) (.*)$", re.MULTILINE)


def _shares(log: str, topics: list[str]) -> str:
    """A worker's partitions of each of ``topics`` at the end of its log (assigned minus
    revoked), as ``high/normal/low`` counts."""
    have: set[str] = set()
    for verb, names in OWNED.findall(log):
        parts = set(names.split(", "))
        have = have | parts if verb == "assigned" else have - parts
    return "/".join(str(sum(1 for n in have if n.rsplit("/", 1)[0] == t)) for t in topics)


def bench_scale(
    base: Settings, runs: int, demand: int, wide: int, spreads: tuple[bool, ...] = (False, True)
) -> None:
    for spread in spreads:
        _bench_scale(base, runs, demand, wide, spread=spread)


def _bench_scale(base: Settings, runs: int, demand: int, wide: int, *, spread: bool) -> None:
    results: dict[int, list[dict[str, list[Any]]]] = {1: [], wide: []}
    label = "3 priorities" if spread else "normal priority"
    print(f"  {label}", flush=True)

    noop = every_second("x", target=NOOP_TARGET)

    def make(i: int) -> JobDefinition:
        return replace(noop(i), priority=PRIORITIES[i % 3]) if spread else noop(i)

    for k in range(runs):
        for count in (1, wide) if k % 2 == 0 else (wide, 1):
            with namespace(base) as settings:
                put_jobs(settings, demand, make)
                results[count].append(_measure(settings, count))
            last = results[count][-1]
            print(
                f"    {count} + {count}: scheduler CPU {[round(c, 2) for c in last['scheduler']]}"
                f", worker CPU {[round(c, 2) for c in last['worker']]}, owned "
                f"{last['owned']}, runs partitions per worker (high/normal/low) "
                f"{last['shares']}, requested {last['requested'][0]:.0f}/s, succeeded "
                f"{last['done'][0]:.0f}/s",
                flush=True,
            )
    single, several = results[1], results[wide]
    for role in ("scheduler", "worker"):
        one = statistics.median(r[role][0] for r in single)
        each = statistics.median(c for r in several for c in r[role])
        total = statistics.median(sum(r[role]) for r in several)
        spread_of = [[round(c, 2) for c in r[role]] for r in several]
        row(
            f"scale ({label}): {role} CPU s/s, 1 process / each of {wide} (sum)",
            f"{one:.2f} / {each:.2f} ({total:.2f})",
            f"each ~{one / wide:.2f}",
            f"demand {demand:,} runs/s; 12 partitions; per process {spread_of}",
        )
    for key, what in (("requested", "run requests/s"), ("done", "SUCCEEDED/s")):
        row(
            f"scale ({label}): {what}, 1+1 / {wide}+{wide}",
            f"{statistics.median(r[key][0] for r in single):,.0f} / "
            f"{statistics.median(r[key][0] for r in several):,.0f}",
            f"{demand:,}",
        )
    shares = [r["shares"] for r in several]
    row(
        f"scale ({label}): runs partitions per worker (high/normal/low), {wide} processes",
        str(shares),
        f"{12 // wide} of each",
    )
    owned = [o for r in several for o in r["owned"]]
    row(
        f"scale ({label}): jobs partitions per scheduler, {wide} processes",
        str(sorted(owned)),
        f"12 / {wide}",
    )
