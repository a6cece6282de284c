"""The dashboard (`cronstream ui`) over a large namespace: render time of the overview,
the jobs list, a jobs search and a busy job's page, p50/p99 of sequential GETs.

100,000 definitions on the jobs topic (the dashboard's JobsView reads them at start)
and 1,000,000 runs written straight to Cassandra the sink's way over the last 7 days:
half of them by 50 busy jobs (every minute: 10,000 runs each, ~1,440 per day
partition), the other half spread over the other jobs (about 5 each); 1 % failed,
0.3 % timed out. One `cronstream ui` process, read anonymously (read-only), as an
operator's browser would: one keep-alive connection, one page at a time."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import JobDefinition, RunOutcome, RunStatus, from_ms
from cronstream.schemas.ids import run_id_for
from tests.bench.common import job, namespace, pct, put_jobs, row, rss_mib
from tests.bench.history import settle, store_runs
from tests.integration.helpers import CronstreamProcess, free_port, history_keyspace, wait_http_up

KINDS = ("billing-report", "etl-load", "cache-warm", "email-digest")
# (cron, every_ms, zone) of the jobs that are not busy: a few shapes, as put_jobs likes.
SHAPES = (
    ("*/5 * * * *", 0, "UTC"),
    ("0 3 * * *", 0, "Europe/Paris"),
    ("15 9 * * 1-5", 0, "America/New_York"),
    (None, 3_600_000, "UTC"),
    (None, 900_000, "UTC"),
    ("0 */6 * * *", 0, "Asia/Tokyo"),
)
BUSY = 50  # jobs firing every minute, with half of the stored runs
WEEK_MS = 7 * 86_400_000
TARGET = "<= 300 ms"


def job_id(i: int) -> str:
    return f"{KINDS[i % len(KINDS)]}.{i:06d}"


def definition(i: int) -> JobDefinition:
    if i < BUSY:
        return job(job_id(i), every_ms=60_000)
    cron, every_ms, zone = SHAPES[i % len(SHAPES)]
    return job(job_id(i), cron=cron, every_ms=every_ms, zone=zone)


def outcomes(jobs: int, stored: int, now_ms: int) -> Iterator[RunOutcome]:
    """Half of ``stored`` runs by the busy jobs (one a minute back from now), the rest
    spread evenly over the other jobs across the last 7 days."""
    per_busy = stored // 2 // BUSY
    minute = now_ms // 60_000 * 60_000
    for k in range(per_busy):
        for i in range(BUSY):
            yield _outcome(k * BUSY + i, job_id(i), minute - k * 60_000)
    others = jobs - BUSY
    rest = stored - per_busy * BUSY
    step = WEEK_MS // -(-rest // others)
    for n in range(rest):
        i, k = BUSY + n % others, n // others
        slot = (now_ms - k * step - (i * 7_919) % step) // 1000 * 1000
        yield _outcome(n + 1, job_id(i), slot)


def _outcome(n: int, job: str, slot_ms: int) -> RunOutcome:
    status = (
        RunStatus.FAILED
        if n % 97 == 0
        else RunStatus.TIMED_OUT
        if n % 331 == 0
        else RunStatus.SUCCEEDED
    )
    duration = 30_000 if status is RunStatus.TIMED_OUT else 20 + (n * 7_919) % 2_000
    error = {
        RunStatus.FAILED: "HttpError: 500 Internal Server Error from https://example.com/hook",
        RunStatus.TIMED_OUT: "TimeoutError: no answer in 30000 ms",
    }.get(status)
    scheduled = from_ms(slot_ms)
    return RunOutcome(
        run_id=run_id_for(job, scheduled),
        job_id=job,
        status=status,
        scheduled_at=scheduled,
        recorded_at=from_ms(slot_ms + 8 + duration),
        started_at=from_ms(slot_ms + 5),
        finished_at=from_ms(slot_ms + 5 + duration),
        duration_ms=duration,
        error=error,
        target_type="http",
        worker="bench",
    )


def load(settings: Settings, jobs: int, stored: int) -> tuple[float, float]:
    """The jobs onto the jobs topic, the runs into Cassandra: seconds each took."""
    jobs_s = put_jobs(settings, jobs, definition)
    print(f"  put {jobs:,} jobs in {jobs_s:.1f}s", flush=True)
    cluster, session = cassandra_session(settings)
    try:
        runs_s = store_runs(
            session, settings.keyspace, outcomes(jobs, stored, int(time.time() * 1000))
        )
    finally:
        cluster.shutdown()
    print(
        f"  stored {stored:,} runs ({stored * 4:,} rows) in {runs_s:.0f}s "
        f"({stored / runs_s:,.0f} runs/s)",
        flush=True,
    )
    print(f"  Cassandra's flushes and compactions settled in {settle(settings):.0f}s", flush=True)
    return jobs_s, runs_s


def start_ui(settings: Settings, jobs: int) -> tuple[CronstreamProcess, str, float]:
    """A `cronstream ui` on a free port, once it answers /readyz and counts ``jobs``
    jobs; the seconds that took."""
    port = free_port()
    ui = CronstreamProcess(
        settings,
        Path(tempfile.mkdtemp(prefix="csbench-")),
        "ui",
        "--port",
        str(port),
        "--anonymous",
        command="ui",
    )
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        wait_http_up(url, 600, ui.log, path="/readyz", alive=lambda: ui.proc.poll() is None)
        while (seen := httpx.get(f"{url}/ui/overview.json", timeout=30).json()["jobs"]) < jobs:
            assert time.monotonic() - t0 < 600, f"the dashboard sees {seen} jobs of {jobs}"
            time.sleep(0.5)
    except BaseException:
        ui.stop()
        raise
    return ui, url, time.monotonic() - t0


def timed(client: httpx.Client, paths: list[str], samples: int) -> list[float]:
    """Milliseconds of ``samples`` GETs, cycling through ``paths``; each must answer 200."""
    took = []
    for n in range(samples):
        path = paths[n % len(paths)]
        t0 = time.perf_counter()
        reply = client.get(path)
        took.append((time.perf_counter() - t0) * 1000)
        if reply.status_code != 200:
            raise RuntimeError(f"GET {path}: {reply.status_code} {reply.text[:300]!r}")
    return took


def pages(jobs: int) -> dict[str, tuple[list[str], str]]:
    """name -> (paths, a text each page must show)."""
    busy = [f"/ui/jobs/{job_id(i)}" for i in range(BUSY)]
    return {
        "overview /ui": (["/ui"], f">{jobs}<"),
        f"jobs list /ui/jobs (page 1 of {-(-jobs // 50):,})": (["/ui/jobs"], job_id(0)),
        "jobs search /ui/jobs?q=report.0123 (25 found)": (
            ["/ui/jobs?q=report.0123"],
            job_id(12_300),
        ),
        f"job page /ui/jobs/JOB (one of {BUSY} busy jobs, ~10,000 runs in 7 d)": (
            busy,
            "HttpError: 500",
        ),
    }


def bench_ui(base: Settings, runs: int, jobs: int, stored: int, samples: int) -> None:
    """Load, start one dashboard, then per run ``samples`` GETs of each page (after a
    warm-up); a row per page: median over the runs of p99 (and p50)."""
    with namespace(base) as topics_ns, history_keyspace(topics_ns, "csbench") as settings:
        jobs_s, runs_s = load(settings, jobs, stored)
        ui, url, ready_s = start_ui(settings, jobs)
        print(
            f"  dashboard ready with {jobs:,} jobs in {ready_s:.1f}s, "
            f"RSS {rss_mib(ui.proc.pid):.0f} MiB",
            flush=True,
        )
        measured: dict[str, list[tuple[float, float]]] = {name: [] for name in pages(jobs)}
        rss: list[int] = []  # MiB after each run
        try:
            with httpx.Client(base_url=url, timeout=60) as client:
                for name, (paths, shows) in pages(jobs).items():
                    assert shows in client.get(paths[0]).text, f"{name}: no {shows!r}"
                    timed(client, paths, 20)  # warm-up: templates, connections, caches
                for _ in range(runs):
                    for name, (paths, _) in pages(jobs).items():
                        took = timed(client, paths, samples)
                        measured[name].append((pct(took, 0.50), pct(took, 0.99)))
                    rss.append(round(rss_mib(ui.proc.pid)))
        finally:
            ui.stop()
        for name, got in measured.items():
            p99s = [p99 for _, p99 in got]
            row(
                f"ui p99: {name}",
                f"{statistics.median(p99s):.0f} ms",
                TARGET,
                f"p50 {statistics.median([p50 for p50, _ in got]):.0f} ms; {samples} GETs "
                f"per run; p99 of runs {[round(v) for v in p99s]}; {jobs:,} jobs, "
                f"{stored:,} runs stored",
            )
        print(
            f"  {jobs:,} jobs put in {jobs_s:.1f}s, {stored:,} runs stored in {runs_s:.0f}s, "
            f"dashboard ready in {ready_s:.1f}s; its RSS (MiB) after each run {rss}",
            flush=True,
        )
