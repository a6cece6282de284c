"""Every hop's cost: one worker behind a scheduler firing more no-op runs than
the box can carry, this code side by side with a baseline version.

Per round, this code and then the baseline (``CRONSTREAM_BENCH_BASELINE``, a git revision,
checked out in a temporary worktree), each in a fresh namespace: SUCCEEDED outcomes per
second over a 15 s window after 10 s of warm-up, the CPU of each process per completed
run, and the records each hop wrote per run (run requests, STARTED, final outcomes, flow
events; commits are one request per COMMIT_EVERY_S per worker, whatever the rate). With
``py-spy`` installed, a further round of this code (not counted) samples the worker and
the scheduler for the window and prints each one's functions by own time (where a run's CPU
goes: ``docs/benchmarks.md`` keeps the one behind the figures there).
"""

from __future__ import annotations

import collections
import os
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.bench.common import checkout, namespace, put_noop_jobs, row
from tests.bench.profiles import SAMPLES_PER_S, can_spy, spy, top_functions
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

BASELINE = os.environ.get("CRONSTREAM_BENCH_BASELINE", "813f47f")
WARMUP_S, WINDOW_S = 10.0, 15.0


class Measure(NamedTuple):
    rate: float  # SUCCEEDED per second
    cpu_us: dict[str, float]  # per completed run, by process
    records: dict[str, float]  # written per completed run, by kind


def end_to_end(
    settings: Settings, demand: int, *, code: Path | None = None, profile: Path | None = None
) -> Measure:
    """A scheduler firing ``demand`` no-op runs a second and one worker (from ``code``, else
    this checkout); with ``profile``, py-spy samples both into ``profile``-{role}.txt."""
    put_noop_jobs(settings, demand, "h")
    pipeline = Pipeline(settings, 1, 64, code=code)

    def spying() -> Callable[[], None]:
        """py-spy on the worker and the scheduler for the window; what waits for it."""
        spies = [
            spy(proc.pid, WINDOW_S, Path(f"{profile}-{role}.txt"))
            for role, proc in (
                ("worker", pipeline.workers[0].proc),
                ("scheduler", pipeline.scheduler.proc),
            )
        ]

        def wait() -> None:
            for sampler in spies:
                sampler.wait(timeout=60)

        return wait

    lo, hi, used = pipeline.measure(WARMUP_S, WINDOW_S, spying if profile is not None else None)
    statuses: collections.Counter[str] = collections.Counter(
        r.headers.get("status", "?")
        for r in read_topic(settings, Topics(settings).history)
        if lo <= r.timestamp_ms < hi
    )
    requests = sum(
        1
        for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
        if lo <= r.timestamp_ms < hi
    )
    flow_events = sum(
        1 for r in read_topic(settings, Topics(settings).flow_events) if lo <= r.timestamp_ms < hi
    )
    done = max(1, statuses["SUCCEEDED"])
    records = {
        "run requests": requests / done,
        "STARTED": statuses["STARTED"] / done,
        "final outcomes": sum(n for s, n in statuses.items() if s != "STARTED") / done,
        "flow events": flow_events / done,
        "commits": (WINDOW_S / 0.2) / done,  # Outbox.COMMIT_EVERY_S, one request each
    }
    cpu = {role: seconds / done * 1e6 for role, seconds in used.items()}
    return Measure(statuses["SUCCEEDED"] / ((hi - lo) / 1000), cpu, records)


def bench_hops(base: Settings, runs: int, demand: int) -> None:
    """``end_to_end`` with this code and with BASELINE, alternating, ``runs`` rounds."""
    mine: list[Measure] = []
    theirs: list[Measure] = []
    profile = Path(tempfile.mkdtemp(prefix="csbench-profile-")) / "hops"
    with checkout(BASELINE) as baseline:
        for _ in range(runs):
            with namespace(base) as settings:
                mine.append(end_to_end(settings, demand))
            if baseline is not None:
                with namespace(base) as settings:
                    theirs.append(end_to_end(settings, demand, code=baseline))
    if can_spy():  # a round of its own: sampling takes CPU from the others
        with namespace(base) as settings:
            end_to_end(settings, demand, profile=profile)
    _rows("this code", demand, mine)
    if theirs:
        _rows(BASELINE, demand, theirs)
        ratios = [m.rate / t.rate for m, t in zip(mine, theirs, strict=True)]
        row(
            f"ratio this code / {BASELINE}, side by side",
            f"{statistics.median(ratios):.2f}",
            "-",
            f"rounds {[round(r, 2) for r in ratios]}",
        )
    else:
        row(f"baseline {BASELINE}", "-", "-", "not in this clone's history: not measured")
    for role in ("worker", "scheduler"):
        path = Path(f"{profile}-{role}.txt")
        if path.exists():
            print(f"\n{role}: own time by function (py-spy, {SAMPLES_PER_S}/s, a round of its own)")
            for share, name in top_functions(path, 15):
                print(f"  {share:5.1f} %  {name}")


def _rows(label: str, demand: int, measures: list[Measure]) -> None:
    rates = [m.rate for m in measures]
    cpu = {role: statistics.median(m.cpu_us[role] for m in measures) for role in measures[0].cpu_us}
    records = {
        kind: statistics.median(m.records[kind] for m in measures) for kind in measures[0].records
    }
    row(
        f"no-op runs/s end to end, 1 worker ({label})",
        f"{statistics.median(rates):,.0f}",
        ">= 20,000",
        f"demand {demand:,}/s; runs {[round(r) for r in rates]}; CPU us/run: "
        + ", ".join(f"{r} {v:.0f}" for r, v in cpu.items()),
    )
    row(
        f"records written per run ({label})",
        f"{sum(records.values()):.2f}",
        "-",
        ", ".join(f"{k} {v:.2f}" for k, v in records.items()),
    )
