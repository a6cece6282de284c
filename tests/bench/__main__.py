"""`make bench`: scheduler, worker, history sink and query benchmarks against the local broker, as a table.

Every scenario runs in a fresh topic prefix. Skew is measured from the outside: the
record timestamp librdkafka stamps at produce() minus the run's due time (slot + the
job's jitter offset), read back from the runs topic. Worker figures come from the
history topic the same way: a run's STARTED record timestamp minus its run request's,
and SUCCEEDED records per second. CPU is read from /proc for every process involved.
Medians of several runs.

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
from datetime import timedelta
from itertools import islice
from pathlib import Path

from infra.bootstrap import ensure_subjects, ensure_topics
from infra.services import all_services
from runtime.kafka.clients import kafka_admin
from runtime.kafka.publisher import Publisher
from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import (
    EPOCH,
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    Priority,
    RunOutcome,
    RunStatus,
    Target,
    from_ms,
    utc_now,
)
from schemas.templates import avro_string
from streams.core.schedule import jitter_offset
from streams.processor import Processor, ProcessorConfig
from tests.conftest import cli_env
from tests.integration.helpers import (
    CronstreamProcess,
    group_caught_up,
    history_keyspace,
    read_topic,
    record_count,
)

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


HTTP_TARGET = Target(type="http", url="https://example.com/hook")
NOOP_TARGET = Target(type="python", callable="tests.bench.targets:noop")


def job(job_id: str, *, cron: str | None = None, every_ms: int = 0, jitter_ms: int = 0,
        zone: str = "UTC", target: Target = HTTP_TARGET) -> JobDefinition:  # fmt: skip
    schedule = (
        CronSchedule(expression=cron) if cron else IntervalSchedule(every_ms=every_ms, anchor=EPOCH)
    )
    return JobDefinition(
        job_id=job_id, target=target, updated_at=utc_now(), schedule=schedule, timezone=zone,
        jitter_ms=jitter_ms,
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


def put_noop_jobs(settings: Settings, count: int, prefix: str) -> None:
    """``count`` no-op python jobs every second, spread over the second by jitter."""
    put_jobs(settings, count, lambda i: job(
        f"{prefix}-{i}", every_ms=1000, jitter_ms=999, target=NOOP_TARGET))  # fmt: skip


class Pipeline:
    """One scheduler and ``workers`` worker processes in ``settings``' namespace."""

    def __init__(self, settings: Settings, workers: int, concurrency: int) -> None:
        self.logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        self.scheduler = CronstreamProcess(settings, self.logdir, "scheduler")
        options = ("--concurrency", str(concurrency))
        self.workers = [
            CronstreamProcess(settings, self.logdir, f"worker{k}", *options, command="worker")
            for k in range(workers)
        ]

    def wait_live(self) -> None:
        self.scheduler.wait_live(12, timeout=240)
        for worker in self.workers:
            worker.wait_live(1, timeout=120, text="assigned")

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds used so far, per role (the broker's JVM included)."""
        kafka = next(s for s in all_services(Settings.from_env()) if s.name == "kafka").pid()
        out = {"scheduler": _cpu_s(self.scheduler.proc.pid), "broker": _cpu_s(kafka or 0)}
        out["workers"] = sum(_cpu_s(w.proc.pid) for w in self.workers)
        return out

    def stop(self) -> None:
        for process in [*self.workers, self.scheduler]:
            process.stop()


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_workers(base: Settings, runs: int, demand: int, counts: tuple[int, ...]) -> None:
    """A scheduler firing ``demand`` no-op python runs per second, and 1, 2, 4 worker
    processes: SUCCEEDED outcomes per second published to history, end to end."""
    warmup, window = 10.0, 15.0
    for count in counts:
        rates: list[float] = []
        cpu_per_run: dict[str, list[float]] = {}
        for _ in range(runs):
            with namespace(base) as settings:
                put_noop_jobs(settings, demand, "w")
                pipeline = Pipeline(settings, count, concurrency=64)
                try:
                    pipeline.wait_live()
                    time.sleep(warmup)
                    cpu0, t0 = pipeline.cpu_seconds(), time.time()
                    time.sleep(window)
                    cpu1, t1 = pipeline.cpu_seconds(), time.time()
                finally:
                    pipeline.stop()
                done = [
                    r for r in read_topic(settings, Topics(settings).history)
                    if r.headers.get("status") == "SUCCEEDED"
                    and t0 * 1000 <= r.timestamp_ms < t1 * 1000
                ]  # fmt: skip
                rates.append(len(done) / (t1 - t0))
                for role in cpu0:
                    used = (cpu1[role] - cpu0[role]) / max(1, len(done)) * 1e6
                    cpu_per_run.setdefault(role, []).append(used)
        cpu = ", ".join(f"{role} {statistics.median(v):.0f}" for role, v in cpu_per_run.items())
        row(f"no-op runs/s end to end, {count} worker(s)", f"{statistics.median(rates):,.0f}",
            ">= 10,000", f"demand {demand:,}/s; runs {[round(r) for r in rates]}; "
            f"CPU us/run: {cpu}")  # fmt: skip


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
                options = ("--concurrency", "64")
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
                    used = sum(_cpu_s(w.proc.pid) for w in workers)
                finally:
                    for worker in workers:
                        worker.stop()
                done = sorted(
                    r.timestamp_ms for r in read_topic(settings, history)
                    if r.headers.get("status") == "SUCCEEDED"
                )  # fmt: skip
                # The middle 80 %: joining the group and the last stragglers excluded.
                lo, hi = done[len(done) // 10], done[len(done) * 9 // 10]
                rates.append(0.8 * len(done) / max(0.001, (hi - lo) / 1000))
                cpu_per_run.append(used / max(1, len(done)) * 1e6)
        row(f"no-op runs/s draining a backlog, {count} worker(s)",
            f"{statistics.median(rates):,.0f}", "-",
            f"runs {[round(r) for r in rates]}; worker CPU us/run "
            f"{statistics.median(cpu_per_run):.0f} (startup included)")  # fmt: skip


def bench_fire_to_start(base: Settings, runs: int) -> None:
    """1,000 no-op runs per second through one scheduler and one worker: a run's STARTED
    record timestamp minus its run request's."""
    p50s, p99s, maxes = [], [], []
    for _ in range(runs):
        with namespace(base) as settings:
            put_noop_jobs(settings, 1000, "l")
            pipeline = Pipeline(settings, 1, concurrency=32)
            try:
                pipeline.wait_live()
                time.sleep(5)
                t0 = time.time() * 1000
                time.sleep(15)
                t1 = time.time() * 1000
            finally:
                pipeline.stop()
            fired = {
                r.headers["run_id"]: r.timestamp_ms
                for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
                if t0 <= r.timestamp_ms < t1
            }
            latencies = [
                r.timestamp_ms - fired[r.headers["run_id"]]
                for r in read_topic(settings, Topics(settings).history)
                if r.headers.get("status") == "STARTED" and r.headers.get("run_id") in fired
            ]
            p50s.append(pct(latencies, 0.5))
            p99s.append(pct(latencies, 0.99))
            maxes.append(max(latencies))
    row("fire-to-start p50 @1k/s (ms)", f"{statistics.median(p50s):.0f}", "-", f"runs {p50s}")
    row("fire-to-start p99 @1k/s (ms)", f"{statistics.median(p99s):.0f}", "<= 100",
        f"runs {p99s}")  # fmt: skip
    row("fire-to-start max @1k/s (ms)", f"{statistics.median(maxes):.0f}", "-", f"runs {maxes}")


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _noop_outcomes(count: int, now_ms: int) -> Iterator[RunOutcome]:
    """STARTED + SUCCEEDED pairs of no-op runs of 1,000 jobs, as workers publish them."""
    for i in range(count // 2):
        job_id, at = f"sinkjob{i % 1000}", now_ms - (count - i) * 10
        base = dict(run_id=f"{job_id}@{i}", job_id=job_id, scheduled_at=from_ms(at),
                    target_type="python", worker="bench")  # fmt: skip
        yield RunOutcome(**base, status=RunStatus.STARTED, recorded_at=from_ms(at + 2),
                         started_at=from_ms(at + 2))  # fmt: skip
        yield RunOutcome(**base, status=RunStatus.SUCCEEDED, recorded_at=from_ms(at + 3),
                         started_at=from_ms(at + 2), finished_at=from_ms(at + 3),
                         duration_ms=1)  # fmt: skip


def bench_sink(base: Settings, runs: int, outcomes: int, batch_rows: tuple[int, ...]) -> None:
    """A backlog of ``outcomes`` on history (STARTED + SUCCEEDED pairs) drained by one
    sink process into Cassandra: rows per second (3 rows per outcome), sink and
    Cassandra CPU per row, for each ``--batch-rows`` setting."""
    cassandra = next(s for s in all_services(base) if s.name == "cassandra").pid() or 0
    for rows_per_batch in batch_rows:
        rates: list[float] = []
        cpu: dict[str, list[float]] = {"sink": [], "cassandra": []}
        count = outcomes if rows_per_batch > 1 else outcomes // 4
        for _ in range(runs if rows_per_batch > 1 else 1):
            with namespace(base) as topics_ns, history_keyspace(topics_ns, "csbench") as settings:
                publisher = Publisher(settings, serve_each=False)
                for outcome in _noop_outcomes(count, int(time.time() * 1000)):
                    publisher.publish(Topics(settings).history, outcome)
                publisher.flush(120)
                logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
                sink = CronstreamProcess(settings, logdir, "sink", "--batch-rows",
                                         str(rows_per_batch), command="sink")  # fmt: skip
                try:
                    sink.wait_live(1, timeout=120, text="assigned")
                    t0 = time.monotonic()
                    c0 = {"sink": _cpu_s(sink.proc.pid), "cassandra": _cpu_s(cassandra)}
                    group = f"{settings.topic_prefix}.sink"
                    while not group_caught_up(settings, group, Topics(settings).history):
                        assert sink.proc.poll() is None, sink.log()[-2000:]
                        time.sleep(0.5)
                    elapsed = time.monotonic() - t0
                    c1 = {"sink": _cpu_s(sink.proc.pid), "cassandra": _cpu_s(cassandra)}
                finally:
                    sink.stop()
                rows = count * 3
                rates.append(rows / elapsed)
                for role, used in cpu.items():
                    used.append((c1[role] - c0[role]) / rows * 1e6)
        where = ", ".join(f"{role} {statistics.median(v):.0f}" for role, v in cpu.items())
        row(f"sink rows/s into Cassandra, --batch-rows {rows_per_batch}",
            f"{statistics.median(rates):,.0f}", ">= 10,000",
            f"{count:,} outcomes drained; runs {[round(r) for r in rates]}; "
            f"CPU us/row: {where}")  # fmt: skip


def bench_queries(base: Settings, runs: int, stored: int, samples: int) -> None:
    """``stored`` runs (1,000 jobs over the last day, 1 % failed) written straight to
    Cassandra, then the three history queries, ``samples`` times each per run."""
    import random

    from consumers.history import History, HistoryTables
    from consumers.sink import RowWriter
    from runtime.cassandra import cassandra_session

    with history_keyspace(base, prefix="csbench") as settings:
        cluster, session = cassandra_session(settings)
        try:
            tables = HistoryTables(session, settings.keyspace, ttl_s=86400 * 7)
            writer = RowWriter(session)
            now_ms = int(time.time() * 1000)
            per_job = stored // 1000
            step = 86_400_000 // per_job
            t0 = time.monotonic()
            chunk: list[tuple[str, object]] = []
            for k in range(per_job):
                for j in range(1000):
                    at = now_ms - k * step - j
                    failed = (k * 1000 + j) % 100 == 0
                    outcome = RunOutcome(
                        run_id=f"job{j}@{k}", job_id=f"job{j}",
                        status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
                        scheduled_at=from_ms(at), recorded_at=from_ms(at + 50),
                        started_at=from_ms(at + 5), finished_at=from_ms(at + 50),
                        duration_ms=45, error="HttpError: 500" if failed else None,
                        target_type="http", worker="bench",
                    )  # fmt: skip
                    chunk.extend(tables.rows(outcome))
                if len(chunk) >= 30_000 or k == per_job - 1:
                    failed_batches = writer.send(writer.batches(chunk))  # type: ignore[arg-type]
                    assert not failed_batches, "cassandra refused the bench load"
                    chunk = []
            load_s = time.monotonic() - t0
            print(f"  loaded {stored:,} runs ({stored * 3:,} rows) in {load_s:.0f}s", flush=True)
            history = History(session, settings.keyspace)
            end = from_ms(now_ms + 1000)
            queries: dict[str, Callable[[], object]] = {
                f"a job's last day (all {per_job:,} rows)": lambda: list(history.job_runs(
                    f"job{random.randrange(1000)}", end - timedelta(hours=24), end)),
                "a job's last day (first 100 rows)": lambda: list(islice(history.job_runs(
                    f"job{random.randrange(1000)}", end - timedelta(hours=24), end), 100)),
                f"failures in the last hour (all ~{stored // 100 // 24:,} rows)": lambda: list(history.by_status(
                    ["FAILED"], end - timedelta(hours=1), end)),
                "one run_id": lambda: history.run(
                    f"job{random.randrange(1000)}@{random.randrange(per_job)}"),
            }  # fmt: skip
            time.sleep(15)  # let the flushes and compactions the bulk load started settle
            for name, query in queries.items():
                for _ in range(20):  # warm-up: connections, caches, the JIT
                    query()
                p50s, p99s = [], []
                for _ in range(runs):
                    took = []
                    for _ in range(samples):
                        q0 = time.perf_counter()
                        assert query(), name
                        took.append((time.perf_counter() - q0) * 1000)
                    p50s.append(pct(took, 0.50))
                    p99s.append(pct(took, 0.99))
                row(f"history query p99: {name}", f"{statistics.median(p99s):.1f} ms",
                    "<= 50 ms", f"p50 {statistics.median(p50s):.1f} ms; {stored:,} runs stored; "
                    f"p99 of runs {[round(v, 1) for v in p99s]}")  # fmt: skip
        finally:
            cluster.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench")
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller loads")
    parser.add_argument("--only", nargs="*", default=None,
                        choices=["throughput", "skew", "burst", "million", "workers",
                                 "drain", "latency", "sink", "queries"])  # fmt: skip
    args = parser.parse_args()
    base = Settings.from_env()
    runs = 1 if args.quick else 3
    plan = {
        "throughput": lambda: bench_throughput(base, runs, 20_000 if args.quick else 40_000),
        "skew": lambda: bench_skew(base, runs),
        "burst": lambda: bench_burst(base, runs, 10_000 if args.quick else 100_000),
        "million": lambda: bench_million(base, 1 if args.quick else 2,
                                         50_000 if args.quick else 1_000_000),
        "workers": lambda: bench_workers(base, runs, 12_000, (1, 2, 4)),
        "drain": lambda: bench_drain(base, runs, 10.0, (1, 2, 4)),
        "latency": lambda: bench_fire_to_start(base, runs),
        "sink": lambda: bench_sink(base, runs, 100_000 if args.quick else 300_000, (64, 1)),
        "queries": lambda: bench_queries(base, runs, 200_000 if args.quick else 1_000_000,
                                         100 if args.quick else 300),
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
