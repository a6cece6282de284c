"""A burst on one boundary, end to end: ``jobs`` no-op cron jobs on '* * * * *', one
scheduler and two workers, with and without the lookahead (side by side, alternating
which goes first). Per boundary: when the last run request was emitted relative to the
boundary, and each run's start at the workers (its outcome's ``started_at``) minus the
boundary."""

from __future__ import annotations

import statistics
import time

from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority, from_ms, iso
from tests.bench.common import NOOP_TARGET, job, namespace, pct, put_jobs, row, started_ms
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

WORKERS, CONCURRENCY = 2, 64


def one_boundary(base: Settings, jobs: int, lookahead_ms: int) -> tuple[float, int, list[int]]:
    """(last emit minus the boundary in s, run requests for it, first starts minus the
    boundary in ms) for the first boundary at least 25 s after the pipeline is live."""
    with namespace(base) as settings:
        put_jobs(settings, jobs, lambda i: job(f"b-{i}", cron="* * * * *", target=NOOP_TARGET))
        pipeline = Pipeline(settings, WORKERS, CONCURRENCY, "--lookahead-ms", str(lookahead_ms))
        try:
            pipeline.wait_live()
            boundary = (int(time.time() // 60) + 1) * 60
            if boundary - time.time() < 25:  # loaded, promoted, the workers assigned
                boundary += 60
            # Until every run started (~8,000 no-op starts/s), well before the next one.
            time.sleep(boundary - time.time() + 40)
        finally:
            pipeline.stop()
        slot = iso(from_ms(boundary * 1000))
        emits = [
            r.timestamp_ms
            for r in read_topic(settings, Topics(settings).runs(Priority.NORMAL))
            if r.headers.get("scheduled_at") == slot
        ]
        # A run's start from its outcome's started_at: a run that ends quickly writes no
        # STARTED record (the worker's --started-after-ms).
        history = [
            r
            for r in read_topic(settings, Topics(settings).history)
            if r.headers.get("scheduled_at") == slot
        ]
        starts = [at - boundary * 1000 for at in started_ms(settings, history).values()]
    return (max(emits) - boundary * 1000) / 1000, len(emits), starts


def bench_boundary(base: Settings, pairs: int, jobs: int, lookahead_ms: int) -> None:
    results: dict[int, list[tuple[float, int, list[int]]]] = {0: [], lookahead_ms: []}
    for k in range(pairs):
        order = (lookahead_ms, 0) if k % 2 == 0 else (0, lookahead_ms)
        for ahead in order:
            results[ahead].append(one_boundary(base, jobs, ahead))
            last, count, starts = results[ahead][-1]
            print(
                f"    lookahead {ahead} ms: last emit {last:+.2f} s, {count:,} emitted, "
                f"{len(starts):,} started, p50 {pct(starts, 0.5):.0f} p99 "
                f"{pct(starts, 0.99):.0f} ms",
                flush=True,
            )
    for ahead in (lookahead_ms, 0):
        runs = results[ahead]
        lasts = [r[0] for r in runs]
        p50s = [pct(r[2], 0.5) for r in runs]
        p99s = [pct(r[2], 0.99) for r in runs]
        counts = [(r[1], len(r[2])) for r in runs]
        label = f"--lookahead-ms {ahead}"
        row(
            f"boundary of {jobs:,}, {label}: last emit vs boundary (s)",
            f"{statistics.median(lasts):+.2f}",
            "< 0" if ahead else "-",
            f"runs {[round(v, 2) for v in lasts]}; (emitted, started) {counts}",
        )
        row(
            f"boundary of {jobs:,}, {label}: first start - boundary p50 / p99 (ms)",
            f"{statistics.median(p50s):.0f} / {statistics.median(p99s):.0f}",
            "report",
            f"runs p50 {p50s} p99 {p99s}; {WORKERS} workers x {CONCURRENCY}",
        )
