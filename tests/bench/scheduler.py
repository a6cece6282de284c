"""Scheduler benchmarks: sustained fires/s, skew at a steady rate, a boundary burst, and a million schedules (memory, restart)."""

from __future__ import annotations

import signal
import statistics
import tempfile
import time
from pathlib import Path

import cronstream.schemas.definition.cron as cron_module
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition.cron import cron_times
from cronstream.schemas.events import (
    JobDefinition,
    Priority,
)
from tests.bench.common import (
    drive,
    due_ms,
    every_second,
    job,
    live,
    namespace,
    pct,
    processor,
    put_jobs,
    put_probed,
    row,
    run_records,
    scheduler_process,
    scheduler_up,
)
from tests.integration.helpers import record_count


def bench_throughput(base: Settings, runs: int, jobs: int) -> None:
    """Demand above capacity (jobs every second, spread by jitter): fires/s achieved."""
    rates = []
    for _ in range(runs):
        with namespace(base) as settings:
            put_jobs(settings, jobs, every_second("t"))
            proc = processor(settings)
            live(proc)
            drive(proc, 3)
            proc.publisher.flush()
            runs_topic = Topics(settings).runs(Priority.NORMAL)
            before, t0 = record_count(settings, runs_topic), time.monotonic()
            drive(proc, 10)
            proc.publisher.flush()
            elapsed = time.monotonic() - t0
            rates.append((record_count(settings, runs_topic) - before) / elapsed)
            proc.close()
    row(
        "sustained fires/s, one process",
        f"{statistics.median(rates):,.0f}",
        ">= 20,000",
        f"demand {jobs:,}/s; runs {[round(r) for r in rates]}",
    )


def fire_skews(settings: Settings) -> list[int]:
    """1,000 jobs every second, jitter spreading them (a steady 1,000 fires/s) for 15 s
    in ``settings``' namespace: each fire's skew (produce time minus due time), ms.
    Without the lookahead (``processor``): runs emitted when due."""
    put_jobs(settings, 1000, every_second("s"))
    proc = processor(settings)
    live(proc)
    drive(proc, 2)
    start_ms = int(time.time() * 1000)
    drive(proc, 15)
    proc.close()
    return [
        ts - due_ms(job_id, slot) for job_id, ts, slot in run_records(settings) if slot > start_ms
    ]


def bench_skew(base: Settings, runs: int) -> None:
    """1,000 jobs every second, jitter spreading them: a steady 1,000 fires/s."""
    p50s, p99s, maxes = [], [], []
    for _ in range(runs):
        with namespace(base) as settings:
            skews = fire_skews(settings)
            p50s.append(pct(skews, 0.5))
            p99s.append(pct(skews, 0.99))
            maxes.append(max(skews))
    label = "fire skew {} @1k/s, --lookahead-ms 0 (ms)"
    row(label.format("p50"), f"{statistics.median(p50s):.1f}", "-", f"runs {p50s}")
    row(label.format("p99"), f"{statistics.median(p99s):.1f}", "<= 50", f"runs {p99s}")
    row(label.format("max"), f"{statistics.median(maxes):.1f}", "-", f"runs {maxes}")


def bench_burst(base: Settings, runs: int, jobs: int) -> None:
    """``jobs`` cron jobs on '* * * * *': all due on each minute boundary, without the
    lookahead (the lookahead's effect on a boundary: ``tests.bench.boundary``)."""
    with namespace(base) as settings:
        put_jobs(settings, jobs, lambda i: job(f"b-{i}", cron="* * * * *"))
        proc = processor(settings)
        load = live(proc)
        boundaries = []
        now = time.time()
        first = (int(now // 60) + 1) * 60
        if first - now < 15:  # give the wheel time to promote before the first burst
            first += 60
        for k in range(runs):
            boundaries.append((first + 60 * k) * 1000)
        drive(proc, boundaries[-1] / 1000 - time.time() + 10)
        proc.close()
        by_slot: dict[int, list[int]] = {b: [] for b in boundaries}
        for _, ts, slot in run_records(settings):
            if slot in by_slot:
                by_slot[slot].append(ts - slot)
    spans = [max(v) / 1000 for v in by_slot.values()]
    counts = [len(v) for v in by_slot.values()]
    p50 = [pct(v, 0.5) for v in by_slot.values()]
    p99 = [pct(v, 0.99) for v in by_slot.values()]
    row(
        f"burst of {jobs:,}, --lookahead-ms 0: last emit after boundary (s)",
        f"{statistics.median(spans):.2f}",
        "<= 5",
        f"runs {[round(s, 2) for s in spans]}, emitted {counts}, load {load:.1f}s",
    )
    row(
        "burst skew p50 / p99 (ms)",
        f"{statistics.median(p50):.0f} / {statistics.median(p99):.0f}",
        "-",
        f"runs p50 {p50} p99 {p99}",
    )


ZONES = ("UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe")


def distinct_cron(i: int) -> str:
    """The i-th of 2,419,200 distinct monthly expressions (seconds first)."""
    return f"{i % 60} {i // 60 % 60} {i // 3600 % 24} {1 + i // 86400 % 28} * *"


def bench_million(base: Settings, runs: int, jobs: int, *, distinct: bool = False) -> None:
    """``jobs`` cron jobs + 100 every-second probes, then a scheduler process restarted
    ``runs`` times: RSS and time to the first on-time fire. The jobs share 1,440 daily
    times x 4 zones, or (``distinct``) each has an expression of its own."""
    label = "distinct expressions" if distinct else "schedules"
    with namespace(base) as settings:

        def make(i: int) -> JobDefinition:
            cron = distinct_cron(i) if distinct else f"{i % 60} {(i // 60) % 24} * * *"
            return job(f"m-{i}", cron=cron, zone=ZONES[i % 4])

        put_probed(settings, jobs, make)
        rss, first_fire, all_live = [], [], []
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        for k in range(runs + 1):
            log = logdir / f"s{k}.log"
            started = time.time()
            proc = scheduler_process(settings, log, f"m{k}")
            up = scheduler_up(settings, proc, log, started, timeout=240, settle_s=10)
            rss.append(up.rss_mib)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
            if k == 0:
                continue  # the first start builds the checkpoint; restarts are measured
            all_live.append(up.live_s)
            first_fire.append(up.first_fire_s)
    row(
        f"RSS with {jobs:,} {label} (MiB)",
        f"{statistics.median(rss[1:]):.0f}",
        "<= 1,536",
        f"runs {rss[1:]}",
    )
    row(
        f"restart -> first on-time fire, {label} (s)",
        f"{statistics.median(first_fire):.1f}",
        "<= 60",
        f"runs {[round(x, 1) for x in first_fire]}",
    )
    row(
        f"restart -> all 12 partitions live, {label} (s)",
        f"{statistics.median(all_live):.1f}",
        "-",
        f"runs {[round(x, 1) for x in all_live]}",
    )


def bench_slots(runs: int, count: int) -> None:
    """Slot computation alone: ``count`` distinct expressions, each read and asked for
    its first slot (what a restart pays per expression), then the next slot of one
    expression again and again (what a tick pays)."""
    now = int(time.time() * 1000)
    cold, warm = [], []
    for k in range(runs):
        cron_module._read.cache_clear()  # what parse_cron remembers
        cron_times.cache_clear()
        exprs = [distinct_cron(i + k * count) for i in range(count)]
        started = time.perf_counter()
        for expr in exprs:
            cron_times(expr, "Europe/Paris").next_after(now)
        cold.append(count / (time.perf_counter() - started))
        times, at = cron_times("*/10 * * * * *", "Europe/Paris"), now
        started = time.perf_counter()
        for _ in range(count):
            at = times.next_after(at) or at
        warm.append(count / (time.perf_counter() - started))
    row(
        f"first slots/s, {count:,} distinct expressions",
        f"{statistics.median(cold):,.0f}",
        "-",
        f"runs {[round(x) for x in cold]}",
    )
    row(
        "next slots/s, one expression",
        f"{statistics.median(warm):,.0f}",
        "-",
        f"runs {[round(x) for x in warm]}",
    )
