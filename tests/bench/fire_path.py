"""The scheduler's fire path with its checkpoint off it: fire skew at a steady
1,000 fires/s without the lookahead, and the scheduler's CPU per fire, this code side by
side with a baseline (``CRONSTREAM_BENCH_FIRE_BASELINE``, default 4e35e3f: the last
revision whose checkpoint waited in the loop for acknowledgements and a synchronous
commit), on the single-node stack and on the 3-node cluster (replication 3, min ISR 2),
round by round so that both see the same machine.

Each measure is a `cronstream scheduler --lookahead-ms 0` process of that code in a
fresh namespace: 1,000 jobs every second spread by jitter, 12 partitions live, 2 s of
warm-up, then 15 s; skew = a run request's produce time minus its due time, from the
topic; CPU from /proc over the same 15 s, per fire. Beside each measure, in the same
15 s, the machine's floor: a bare asyncio loop firing 1,000 timers a second and how
late they ran (``tests.bench.loop_lateness``): what no scheduler code can beat at that
moment. The cluster is started if it is not running (minutes) and stopped afterwards if
this benchmark started it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from cronstream.infra.services import all_services
from cronstream.runtime.settings import Settings
from tests.bench.common import (
    checkout,
    cpu_s,
    due_ms,
    every_second,
    namespace,
    pct,
    put_jobs,
    row,
    run_records,
)
from tests.chaos import stack
from tests.integration.helpers import CronstreamProcess

BASELINE = os.environ.get("CRONSTREAM_BENCH_FIRE_BASELINE", "4e35e3f")
JOBS, WARMUP_S, WINDOW_S = 1000, 2.0, 15.0


class Measure(NamedTuple):
    skews: list[int]  # each fire's skew, ms
    cpu_us: float  # the scheduler's CPU per fire
    floor: list[float]  # a bare loop's timer lateness in the same window, ms


def skews_and_cpu(settings: Settings, code: Path | None) -> Measure:
    """One scheduler process's fires over the window, and the machine's floor beside it."""
    put_jobs(settings, JOBS, every_second("s"))
    logdir = Path(tempfile.mkdtemp(prefix="csbench-fire-"))
    proc = CronstreamProcess(settings, logdir, "fire", "--lookahead-ms", "0", code=code)
    try:
        proc.wait_live(12, timeout=120)
        time.sleep(WARMUP_S)
        start_ms, cpu0 = int(time.time() * 1000), cpu_s(proc.proc.pid)
        floor = subprocess.run(
            [sys.executable, "-m", "tests.bench.loop_lateness", str(WINDOW_S), str(JOBS)],
            check=True,
            capture_output=True,
            text=True,
        )
        end_ms, used = int(time.time() * 1000), cpu_s(proc.proc.pid) - cpu0
        proc.stop()
    finally:
        proc.cleanup()
    skews = [
        ts - due_ms(job_id, slot)
        for job_id, ts, slot in run_records(settings)
        if start_ms < due_ms(job_id, slot) <= end_ms
    ]
    return Measure(skews, used / max(1, len(skews)) * 1e6, json.loads(floor.stdout))


def bench_fire_path(runs: int) -> None:
    """Fire skew p99 and scheduler CPU per fire, this code and ``BASELINE``, single node
    and cluster."""
    single, cluster = "1 node", "3 nodes"
    shapes = {single: {}, cluster: stack.cluster_environment()}
    with stack.environment(shapes[cluster]) as settings:
        started = not all(svc.running() for svc in all_services(settings))
        stack.up(settings)
    p99: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    floor: dict[str, list[float]] = {}
    try:
        with checkout(BASELINE) as baseline:
            codes = {"this": None, BASELINE: baseline}
            for _ in range(runs):
                for shape, variables in shapes.items():
                    for name, code in codes.items():
                        with stack.environment(variables) as settings, namespace(settings) as ns:
                            measured = skews_and_cpu(ns, code)
                        p99.setdefault((shape, name), []).append(pct(measured.skews, 0.99))
                        cpu.setdefault((shape, name), []).append(measured.cpu_us)
                        floor.setdefault(shape, []).append(pct(measured.floor, 0.99))
                        print(_said(shape, name, measured), flush=True)
    finally:
        if started:
            with stack.environment(shapes[cluster]) as settings:
                stack.down(settings)
    for (shape, name), values in p99.items():
        used = cpu[(shape, name)]
        row(
            f"fire skew p99 @1k/s, --lookahead-ms 0, {shape}, {name} (ms)",
            f"{statistics.median(values):.0f}",
            "<= 20" if shape == cluster else "-",
            f"runs {values}; scheduler CPU us/fire {statistics.median(used):.0f} "
            f"(runs {[round(u) for u in used]})",
        )
    for shape, values in floor.items():
        row(
            f"machine floor: a bare loop's timer lateness p99 @1k/s beside it, {shape} (ms)",
            f"{statistics.median(values):.1f}",
            "-",
            f"runs {[round(v, 1) for v in values]}: no scheduler code beats this",
        )


def _said(shape: str, name: str, measured: Measure) -> str:
    skews, floor = measured.skews, measured.floor
    return (
        f"  {shape}, {name}: skew p50 {pct(skews, 0.5)} / p99 {pct(skews, 0.99)} / max "
        f"{max(skews)} ms, {len(skews)} fires, {measured.cpu_us:.0f} us CPU per fire; "
        f"a bare loop beside it: p50 {pct(floor, 0.5):.1f} / p99 {pct(floor, 0.99):.1f} / "
        f"max {max(floor):.1f} ms"
    )
