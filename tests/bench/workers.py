"""Worker benchmarks: no-op runs/s end to end, draining a backlog, fire-to-start latency."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from cronstream.infra.services import Kafka, all_services
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.bench.common import cpu_s, namespace, pct, put_noop_jobs, read_runs, row
from tests.integration.helpers import CronstreamProcess, read_topic, record_count


class Pipeline:
    """``schedulers`` scheduler (one by default) and ``workers`` worker processes in
    ``settings``' namespace."""

    def __init__(
        self,
        settings: Settings,
        workers: int,
        concurrency: int,
        *scheduler_args: str,
        schedulers: int = 1,
        code: Path | None = None,
        worker_args: tuple[str, ...] = (),
    ) -> None:
        """``code``: a checkout of another version to run (``tests.bench.hops``);
        ``worker_args``: the workers' further flags."""
        self.logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        names = [f"s{k}" if k else "scheduler" for k in range(schedulers)]
        self.schedulers = [
            CronstreamProcess(settings, self.logdir, name, *scheduler_args, code=code)
            for name in names
        ]
        self.scheduler = self.schedulers[0]
        options = ("--concurrency", str(concurrency), "--python-allow", "tests.bench", *worker_args)
        self.workers = [
            CronstreamProcess(
                settings, self.logdir, f"worker{k}", *options, command="worker", code=code
            )
            for k in range(workers)
        ]

    def wait_live(self) -> None:
        deadline = time.monotonic() + 240
        while sum(s.log().count(" live: ") for s in self.schedulers) < 12:
            assert time.monotonic() < deadline, "the schedulers never went live"
            for scheduler in self.schedulers:
                assert scheduler.proc.poll() is None, scheduler.log()[-3000:]
            time.sleep(0.2)
        for worker in self.workers:
            worker.wait_live(1, timeout=120, text="assigned")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far, per role (the brokers' JVMs included, all of them on a
        cluster)."""
        brokers = [s.pid() for s in all_services(Settings.from_env()) if isinstance(s, Kafka)]
        out = {
            "scheduler": cpu_s(self.scheduler.proc.pid),
            "broker": sum(cpu_s(pid or 0) for pid in brokers),
        }
        # with the commands a worker ran and waited for (shell targets)
        out["workers"] = sum(cpu_s(w.proc.pid, children=True) for w in self.workers)
        return out

    def stop(self) -> None:
        for process in [*self.workers, *self.schedulers]:
            process.stop()

    def measure(
        self, warmup: float = 10.0, window: float = 15.0, during: Callable[[], Any] | None = None
    ) -> Window:
        """Live, ``warmup`` s, then ``window`` s measured (``during``, called at its
        start, may return a callable to call at its end); the pipeline stopped after."""
        try:
            self.wait_live()
            time.sleep(warmup)
            cpu0, t0 = self.cpu_seconds(), time.time()
            end = during() if during is not None else None
            time.sleep(window)
            cpu1, t1 = self.cpu_seconds(), time.time()
            if end is not None:
                end()
        finally:
            self.stop()
        return Window(t0 * 1000, t1 * 1000, {role: cpu1[role] - cpu0[role] for role in cpu0})


class Window(NamedTuple):
    """A measured window: its bounds (wall clock ms) and the CPU seconds each role used."""

    t0: float
    t1: float
    cpu: dict[str, float]


def end_to_end(settings: Settings, workers: int, demand: int) -> tuple[float, dict[str, float]]:
    """A scheduler firing ``demand`` no-op python runs per second and ``workers`` worker
    processes in ``settings``' namespace: (SUCCEEDED outcomes per second published to
    history over a 15 s window after 10 s of warm-up, CPU us per run by role)."""
    put_noop_jobs(settings, demand, "w")
    t0, t1, used = Pipeline(settings, workers, concurrency=64).measure()
    done = [
        r
        for r in read_topic(settings, Topics(settings).history)
        if r.headers.get("status") == "SUCCEEDED" and t0 <= r.timestamp_ms < t1
    ]
    cpu = {role: seconds / max(1, len(done)) * 1e6 for role, seconds in used.items()}
    return len(done) / ((t1 - t0) / 1000), cpu


def bench_workers(base: Settings, runs: int, demand: int, counts: tuple[int, ...]) -> None:
    """End to end (``end_to_end``) with 1, 2, 4 worker processes."""
    for count in counts:
        rates: list[float] = []
        cpu_per_run: dict[str, list[float]] = {}
        for _ in range(runs):
            with namespace(base) as settings:
                rate, cpu = end_to_end(settings, count, demand)
            rates.append(rate)
            for role, used in cpu.items():
                cpu_per_run.setdefault(role, []).append(used)
        cpu_text = ", ".join(f"{r} {statistics.median(v):.0f}" for r, v in cpu_per_run.items())
        row(
            f"no-op runs/s end to end, {count} worker(s)",
            f"{statistics.median(rates):,.0f}",
            ">= 10,000",
            f"demand {demand:,}/s; runs {[round(r) for r in rates]}; CPU us/run: {cpu_text}",
        )


def bench_drain(base: Settings, runs: int, backlog_s: float, counts: tuple[int, ...]) -> None:
    """Worker capacity alone: a scheduler fires no-op runs for ``backlog_s`` seconds and
    stops; then 1, 2, 4 workers drain the backlog. SUCCEEDED per second, first to last."""
    for count in counts:
        rates: list[float] = []
        cpu_per_run: list[float] = []
        for _ in range(runs):
            with namespace(base) as settings:
                put_noop_jobs(settings, 12_000, "d")
                logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
                scheduler = CronstreamProcess(settings, logdir, "scheduler")
                scheduler.wait_live(12, timeout=240)
                time.sleep(backlog_s)
                scheduler.stop()
                backlog = record_count(settings, Topics(settings).runs(Priority.NORMAL))
                options = ("--concurrency", "64", "--python-allow", "tests.bench")
                workers = [
                    CronstreamProcess(settings, logdir, f"w{k}", *options, command="worker")
                    for k in range(count)
                ]
                try:
                    history = Topics(settings).history
                    deadline = time.monotonic() + 300
                    while time.monotonic() < deadline:
                        time.sleep(2)
                        if record_count(settings, history) >= 2 * backlog:
                            break
                    used = sum(cpu_s(w.proc.pid) for w in workers)
                finally:
                    for worker in workers:
                        worker.stop()
                done = sorted(
                    r.timestamp_ms
                    for r in read_topic(settings, history)
                    if r.headers.get("status") == "SUCCEEDED"
                )
                # The middle 80 %: joining the group and the last stragglers excluded.
                lo, hi = done[len(done) // 10], done[len(done) * 9 // 10]
                rates.append(0.8 * len(done) / max(0.001, (hi - lo) / 1000))
                cpu_per_run.append(used / max(1, len(done)) * 1e6)
        row(
            f"no-op runs/s draining a backlog, {count} worker(s)",
            f"{statistics.median(rates):,.0f}",
            "-",
            f"runs {[round(r) for r in rates]}; worker CPU us/run "
            f"{statistics.median(cpu_per_run):.0f} (startup included)",
        )


def _starts(settings: Settings, lookahead_ms: int) -> tuple[list[int], list[int]]:
    """1,000 no-op runs per second through one scheduler (``--lookahead-ms``) and one
    worker for 15 s: each run's start (its outcome's ``started_at``) minus its run
    request's record timestamp (fire-to-start), and minus its due time (slot + jitter:
    due-to-start), ms."""
    put_noop_jobs(settings, 1000, "l")
    pipeline = Pipeline(settings, 1, 32, "--lookahead-ms", str(lookahead_ms))
    t0, t1, _ = pipeline.measure(warmup=5.0, window=15.0)
    started = [
        (run.started_ms, run)
        for run in read_runs(settings)
        if run.started_ms is not None and t0 <= run.emitted_ms < t1
    ]
    return [ts - run.emitted_ms for ts, run in started], [ts - run.due_ms for ts, run in started]


def bench_fire_to_start(base: Settings, runs: int) -> None:
    """The worker's part (``--lookahead-ms 0``: a run arrives when due, fire-to-start),
    and the lateness users see with the default lookahead (due-to-start)."""
    p50s, p99s, maxes, late50, late99 = [], [], [], [], []
    for _ in range(runs):
        with namespace(base) as settings:
            latencies = _starts(settings, 0)[0]
        p50s.append(pct(latencies, 0.5))
        p99s.append(pct(latencies, 0.99))
        maxes.append(max(latencies))
        with namespace(base) as settings:
            late = _starts(settings, 1000)[1]
        late50.append(pct(late, 0.5))
        late99.append(pct(late, 0.99))
    row(
        "fire-to-start p50 @1k/s, --lookahead-ms 0 (ms)",
        f"{statistics.median(p50s):.0f}",
        "-",
        f"runs {p50s}",
    )
    row(
        "fire-to-start p99 @1k/s, --lookahead-ms 0 (ms)",
        f"{statistics.median(p99s):.0f}",
        "<= 100",
        f"runs {p99s}",
    )
    row(
        "fire-to-start max @1k/s, --lookahead-ms 0 (ms)",
        f"{statistics.median(maxes):.0f}",
        "-",
        f"runs {maxes}",
    )
    row(
        "due-to-start p50 / p99 @1k/s, --lookahead-ms 1000 (ms)",
        f"{statistics.median(late50):.0f} / {statistics.median(late99):.0f}",
        "p99 <= 100",
        f"runs p50 {late50} p99 {late99}",
    )
