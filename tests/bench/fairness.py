"""Fair share between tenants: tenant A bursts 100,000 runs on one instant
while tenant B has 100 jobs every second; B's due-to-start latency during the burst.

Side by side in one run: the scheduler without a per-tenant fire rate (A's burst enters
the runs topic at once, ahead of B's runs in every partition, and the worker's
round-robin among tenants only helps once B's runs are read), and with one
(``--tenant-fires-per-second``: A's excess is deferred at the rate, B's runs are never
behind more than a second of A's). One scheduler, one worker, no-op python runs.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from datetime import timedelta

from cronstream.runtime.settings import Settings
from cronstream.schemas.events import OnceSchedule, utc_now
from tests.bench.common import (
    NOOP_TARGET,
    job,
    namespace,
    pct,
    put_jobs,
    put_noop_jobs,
    read_runs,
    row,
)
from tests.bench.workers import Pipeline

B_JOBS = 100


def one_burst(base: Settings, burst: int, rate: int) -> tuple[float, float, float, int]:
    """(B's p50, p99 due-to-start in ms over the burst, A's drain s, B's runs seen)."""
    with namespace(base) as settings:
        put_noop_jobs(settings, B_JOBS, "b", tenant="beta")
        at = utc_now() + timedelta(seconds=60)
        acme = replace(
            job("acme/a", target=NOOP_TARGET), tenant="acme", schedule=OnceSchedule(at=at)
        )
        put_jobs(settings, burst, lambda i: replace(acme, job_id=f"acme/a-{i}"))
        pipeline = Pipeline(settings, 1, 64, "--tenant-fires-per-second", str(rate))
        t_burst = int(at.timestamp() * 1000)
        try:
            pipeline.wait_live()
            while time.time() * 1000 < t_burst:
                time.sleep(1)
            time.sleep(burst / 1500 + 20)  # the burst drains (at the rate, or as fast as run)
        finally:
            pipeline.stop()
        # Starts from the outcomes' started_at: a quick run writes no STARTED record.
        runs = read_runs(settings)
        acme_done = [
            run.started_ms
            for run in runs
            if run.job_id.startswith("acme/") and run.started_ms is not None
        ]
        if len(acme_done) < burst:
            raise RuntimeError(f"only {len(acme_done)} of {burst} burst runs started")
        drain_end = max(acme_done)
        # From each B run's due time: its slot plus its job's jitter offset.
        beta_lat = [
            run.started_ms - run.due_ms
            for run in runs
            if run.job_id.startswith("beta/")
            and run.started_ms is not None
            and t_burst - 1000 <= run.slot_ms <= drain_end
        ]
        return pct(beta_lat, 0.5), pct(beta_lat, 0.99), (drain_end - t_burst) / 1000, len(beta_lat)


def bench_fairness(base: Settings, runs: int, burst: int, rate: int = 2000) -> None:
    results: dict[int, list[tuple[float, float, float, int]]] = {0: [], rate: []}
    for i in range(runs):
        for r in (0, rate) if i % 2 == 0 else (rate, 0):
            results[r].append(one_burst(base, burst, r))
            print(f"    rate {r or 'off'}: {results[r][-1]}", flush=True)
    for r, label in ((rate, f"{rate}/s"), (0, "off")):
        got = results[r]
        p99 = statistics.median(x[1] for x in got)
        row(
            f"fairness: B p99 due-to-start, A bursts {burst:,} (rate {label}) (ms)",
            f"{p99:.0f}",
            "<= 500" if r else "-",
            f"p50 {[round(x[0]) for x in got]}, p99 {[round(x[1]) for x in got]}, "
            f"A drained in {[round(x[2], 1) for x in got]} s, B runs {[x[3] for x in got]}",
        )
