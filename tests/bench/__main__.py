"""`make bench`: scheduler benchmarks against the local broker, printed as a table.

Every scenario runs in a fresh topic prefix. Skew is measured from the outside: the
record timestamp librdkafka stamps at produce() minus the run's due time (slot + the
job's jitter offset), read back from the runs topic. Medians of several runs.

    python -m tests.bench [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from cronstream.connect import kafka_admin
from cronstream.settings import Settings
from infra.bootstrap import ensure_subjects, ensure_topics
from producers.publisher import Publisher
from schemas.catalog import Topics
from schemas.events import (
    EPOCH,
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    Priority,
    Target,
    utc_now,
)
from schemas.templates import avro_string
from streams.core.schedule import jitter_offset
from streams.processor import Processor, ProcessorConfig
from tests.conftest import cli_env
from tests.integration.helpers import read_topic

ROWS: list[tuple[str, str, str, str]] = []


def row(name: str, value: str, target: str, note: str = "") -> None:
    ROWS.append((name, value, target, note))
    print(f"  {name}: {value}  (target {target}) {note}", flush=True)


@contextmanager
def namespace(base: Settings) -> Iterator[Settings]:
    settings = base.with_namespace(topic_prefix=f"csbench.{uuid.uuid4().hex[:8]}")
    ensure_topics(settings)
    ensure_subjects(settings)
    try:
        yield settings
    finally:
        admin = kafka_admin(settings)
        names = [name for name, _ in Topics(settings).all()]
        for future in admin.delete_topics(names, operation_timeout=60).values():
            future.result()


def put_jobs(settings: Settings, count: int, make: Callable[[int], JobDefinition]) -> float:
    """Write ``count`` definitions fast: one encode per shape, the job id spliced in."""
    topic = Topics(settings).jobs
    publisher = Publisher(settings)
    started = time.perf_counter()
    shapes: dict[int, tuple[bytes, bytes]] = {}
    for i in range(count):
        job = make(i)
        shape_key = hash((job.schedule, job.timezone, job.jitter_ms))
        shape = shapes.get(shape_key)
        if shape is None:
            encoded = publisher.codec.encode(topic, job)
            head = encoded[:5]
            body = encoded[5 + len(avro_string(job.job_id)) :]
            shape = shapes[shape_key] = (head, body)
        value = shape[0] + avro_string(job.job_id) + shape[1]
        publisher.produce_raw(topic, job.job_id, value, [("job_id", job.job_id.encode())])
    publisher.close()
    return time.perf_counter() - started


def job(job_id: str, *, cron: str | None = None, every_ms: int = 0, jitter_ms: int = 0,
        zone: str = "UTC") -> JobDefinition:  # fmt: skip
    schedule = (
        CronSchedule(expression=cron) if cron else IntervalSchedule(every_ms=every_ms, anchor=EPOCH)
    )
    return JobDefinition(
        job_id=job_id, target=Target(type="http", url="https://example.com/hook"),
        updated_at=utc_now(), schedule=schedule, timezone=zone, jitter_ms=jitter_ms,
    )  # fmt: skip


def run_records(settings: Settings) -> list[tuple[str, int, int]]:
    """(job_id, produce timestamp ms, slot ms) of every run request, from the topic."""
    return [
        (r.headers["job_id"], r.timestamp_ms, _iso_ms(r.headers["scheduled_at"]))
        for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
    ]


_ISO: dict[str, int] = {}


def _iso_ms(text: str) -> int:
    cached = _ISO.get(text)
    if cached is None:
        from datetime import datetime

        cached = _ISO[text] = int(
            datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000
        )
    return cached


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(processor: Processor, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        processor.step()


def live(processor: Processor, timeout: float = 300) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        processor.step()
        if len(processor.owned) == processor.settings.partitions and all(
            not o.loading for o in processor.owned.values()
        ):
            return time.monotonic() - started
    raise RuntimeError("processor never went live")


def processor(settings: Settings) -> Processor:
    return Processor(settings, ProcessorConfig(group=f"{settings.topic_prefix}.scheduler"))


# -- scenarios --------------------------------------------------------------------------
def bench_throughput(base: Settings, runs: int, jobs: int) -> None:
    """Demand above capacity (jobs every second, spread by jitter): fires/s achieved."""
    rates = []
    for _ in range(runs):
        with namespace(base) as settings:
            put_jobs(settings, jobs, lambda i: job(f"t-{i}", every_ms=1000, jitter_ms=999))
            proc = processor(settings)
            live(proc)
            drive(proc, 3)
            before = proc.publisher.delivered
            t0 = time.monotonic()
            drive(proc, 10)
            proc.publisher.flush()
            rates.append((proc.publisher.delivered - before) / (time.monotonic() - t0))
            proc.close()
    row("sustained fires/s, one process", f"{statistics.median(rates):,.0f}", ">= 20,000",
        f"demand {jobs:,}/s; runs {[round(r) for r in rates]}")  # fmt: skip


def bench_skew(base: Settings, runs: int) -> None:
    """1,000 jobs every second, jitter spreading them: a steady 1,000 fires/s."""
    p50s, p99s, maxes = [], [], []
    for _ in range(runs):
        with namespace(base) as settings:
            put_jobs(settings, 1000, lambda i: job(f"s-{i}", every_ms=1000, jitter_ms=999))
            proc = processor(settings)
            live(proc)
            drive(proc, 2)
            start_ms = int(time.time() * 1000)
            drive(proc, 15)
            proc.close()
            skews = [
                ts - (slot + jitter_offset(job_id, 999))
                for job_id, ts, slot in run_records(settings)
                if slot > start_ms
            ]
            p50s.append(pct(skews, 0.5))
            p99s.append(pct(skews, 0.99))
            maxes.append(max(skews))
    row("fire skew p50 @1k/s (ms)", f"{statistics.median(p50s):.1f}", "-", f"runs {p50s}")
    row("fire skew p99 @1k/s (ms)", f"{statistics.median(p99s):.1f}", "<= 50", f"runs {p99s}")
    row("fire skew max @1k/s (ms)", f"{statistics.median(maxes):.1f}", "-", f"runs {maxes}")


def bench_burst(base: Settings, runs: int, jobs: int) -> None:
    """``jobs`` cron jobs on '* * * * *': all due on each minute boundary."""
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
    row(f"burst of {jobs:,}: last emit after boundary (s)", f"{statistics.median(spans):.2f}",
        "<= 5", f"runs {[round(s, 2) for s in spans]}, emitted {counts}, load {load:.1f}s")  # fmt: skip
    row("burst skew p50 / p99 (ms)", f"{statistics.median(p50):.0f} / {statistics.median(p99):.0f}",
        "-", f"runs p50 {p50} p99 {p99}")  # fmt: skip


def bench_million(base: Settings, runs: int, jobs: int) -> None:
    """``jobs`` daily cron jobs (1,440 times x 4 zones) + 100 every-second probes, then a
    scheduler process restarted ``runs`` times: RSS and time to the first on-time fire."""
    zones = ("UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe")
    with namespace(base) as settings:

        def make(i: int) -> JobDefinition:
            if i < 100:
                return job(f"probe-{i}", every_ms=1000)
            return job(f"m-{i}", cron=f"{i % 60} {(i // 60) % 24} * * *", zone=zones[i % 4])

        wrote = put_jobs(settings, jobs + 100, make)
        print(f"  wrote {jobs + 100:,} definitions in {wrote:.1f}s", flush=True)
        rss, first_fire, all_live = [], [], []
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        for k in range(runs + 1):
            log = logdir / f"s{k}.log"
            started = time.time()
            with log.open("w") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "cronstream.cli", "scheduler", "--name", f"m{k}"],
                    env=cli_env(settings), stdout=out, stderr=subprocess.STDOUT,
                )  # fmt: skip
            deadline = started + 240
            while time.time() < deadline and log.read_text().count(" live: ") < 12:
                time.sleep(0.5)
                if proc.poll() is not None:
                    raise RuntimeError(log.read_text()[-3000:])
            live_s = time.time() - started
            time.sleep(10)
            rss.append(_rss_mib(proc.pid))
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
            on_time = [
                ts for job_id, ts, slot in run_records(settings)
                if job_id.startswith("probe-") and ts >= started * 1000 and ts - slot <= 50
            ]  # fmt: skip
            if k == 0:
                continue  # the first start builds the checkpoint; restarts are measured
            all_live.append(live_s)
            first_fire.append(min(on_time) / 1000 - started if on_time else float("inf"))
    row(f"RSS with {jobs:,} schedules (MiB)", f"{statistics.median(rss[1:]):.0f}", "<= 1,536",
        f"runs {rss[1:]}")  # fmt: skip
    row("restart -> first on-time fire (s)", f"{statistics.median(first_fire):.1f}", "<= 60",
        f"runs {[round(x, 1) for x in first_fire]}")  # fmt: skip
    row("restart -> all 12 partitions live (s)", f"{statistics.median(all_live):.1f}", "-",
        f"runs {[round(x, 1) for x in all_live]}")  # fmt: skip


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench")
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller loads")
    parser.add_argument("--only", nargs="*", default=None,
                        choices=["throughput", "skew", "burst", "million"])  # fmt: skip
    args = parser.parse_args()
    base = Settings.from_env()
    runs = 1 if args.quick else 3
    plan = {
        "throughput": lambda: bench_throughput(base, runs, 20_000 if args.quick else 40_000),
        "skew": lambda: bench_skew(base, runs),
        "burst": lambda: bench_burst(base, runs, 10_000 if args.quick else 100_000),
        "million": lambda: bench_million(base, 1 if args.quick else 2,
                                         50_000 if args.quick else 1_000_000),
    }  # fmt: skip
    for name, fn in plan.items():
        if args.only is None or name in args.only:
            print(f"[bench] {name}", flush=True)
            fn()
    width = max(len(r[0]) for r in ROWS)
    print()
    print(f"{'benchmark':<{width}}  {'median':>12}  {'target':>10}  notes")
    for name, value, target, note in ROWS:
        print(f"{name:<{width}}  {value:>12}  {target:>10}  {note}")
    print(f"\n{os.cpu_count()} cores; medians of the runs listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
