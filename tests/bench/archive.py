"""The cold tier (issue 19): one job's runs over a year from an archive of at least
100,000,000 outcomes, and the archiver's export throughput.

The year is written as compacted day files (``archive.write_table``, the compaction's
own writer: sorted, 64,000-row groups, zstd) from columns built in Arrow, not through
Kafka (100 million records would take the topic hours here); the export row measures
the archiver itself: outcomes on the history topic -> parts, checkpoint, commit."""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from consumers import archive
from consumers.archiver import Archiver, ArchiverConfig
from runtime.settings import Settings
from schemas.catalog import Topics
from tests.bench.common import namespace, pct, row
from tests.bench.history import _noop_outcomes
from tests.integration.helpers import group_caught_up
from tests.integration.test_history import publish

DAY_MS = 86_400_000
PROBE = "probe-00042"  # every 5 minutes all year: 105,120 runs, two outcomes each


def _day(day: datetime, rows: int, jobs: int, rng: np.random.Generator) -> pa.Table:
    """One day of outcomes: ``rows`` of random jobs (STARTED and SUCCEEDED pairs) and
    the probe's 288 runs."""
    start_ms = int(day.timestamp() * 1000)
    pairs = (rows - 2 * 288) // 2
    job_ids = np.char.add("job-", np.char.zfill(rng.integers(0, jobs, pairs).astype(str), 6))
    slots = start_ms + rng.integers(0, DAY_MS // 60_000, pairs) * 60_000
    job_ids = np.concatenate([job_ids, np.full(288, PROBE)])
    slots = np.concatenate([slots, start_ms + np.arange(288) * 300_000])
    n = len(job_ids)
    sched = pa.array(slots, pa.timestamp("ms", tz="UTC"))
    jobs_arr = pa.array(job_ids)
    run_ids = pc.binary_join_element_wise(jobs_arr, pc.cast(pa.array(slots), pa.string()), "@")
    duration = rng.integers(5, 5000, n)

    def twice(a: pa.Array) -> pa.Array:
        return pa.concat_arrays([a, a])

    status = pa.array(["STARTED"] * n + ["SUCCEEDED"] * n)
    rec_ms = np.concatenate([slots + 3, slots + 3 + duration])
    recorded = pa.array(rec_ms, pa.timestamp("ms", tz="UTC"))
    nulls_ts = pa.nulls(2 * n, pa.timestamp("ms", tz="UTC"))
    return pa.table({
        "job_id": twice(jobs_arr), "scheduled_at": twice(sched), "run_id": twice(run_ids),
        "attempt": pa.array(np.ones(2 * n, dtype=np.int32)), "status": status,
        "trigger": pa.array(["SCHEDULE"] * (2 * n)), "recorded_at": recorded,
        "started_at": pa.concat_arrays([pa.array(slots + 3, pa.timestamp("ms", tz="UTC"))] * 2),
        "finished_at": pa.concat_arrays([nulls_ts.slice(0, n), recorded.slice(n)]),
        "duration_ms": pa.concat_arrays([pa.nulls(n, pa.int64()),
                                         pa.array(duration, pa.int64())]),
        "error": pa.nulls(2 * n, pa.string()), "next_attempt_at": nulls_ts,
        "target_type": pa.array(["http"] * (2 * n)), "worker": pa.array(["w1"] * (2 * n)),
    }, schema=archive.SCHEMA)  # fmt: skip


def build_year(root: Path, total: int, jobs: int = 100_000) -> float:
    """``total`` outcomes over the 365 days before today, one compacted file a day."""
    rng = np.random.default_rng(19)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    began = time.monotonic()
    per_day = total // 365
    for i in range(365, 0, -1):
        day = today - timedelta(days=i)
        path = archive.folder(root, day.date(), "default") / archive.COMPACTED
        archive.write_table(_day(day, per_day, jobs, rng), path)
    return time.monotonic() - began


def bench_archive(base: Settings, runs: int, total: int, samples: int) -> None:
    """One job's year from ``total`` archived outcomes (p50/p99 of ``samples`` queries,
    median of ``runs``), then the archiver's export rate."""
    root = Path(tempfile.mkdtemp(prefix="cs-archive-bench-"))
    try:
        took = build_year(root, total)
        size = sum(p.stat().st_size for p in root.rglob("*.parquet")) / 2**30
        print(f"  archive: {total:,} outcomes over 365 days written in {took:.0f}s "
              f"({total / took:,.0f} rows/s, {size:.1f} GiB)", flush=True)  # fmt: skip
        now = datetime.now(UTC)
        year = (now - timedelta(days=366), now)
        p50s, p99s, whole, first, fresh, found = [], [], [], [], [], 0
        for _ in range(runs):
            cold = archive.Archive(root)
            t0 = time.perf_counter()
            cold.job_runs_table(PROBE, *year)  # the first reads the files' footers
            fresh.append((time.perf_counter() - t0) * 1000)
            times = []
            for _ in range(samples):
                t0 = time.perf_counter()
                found = cold.job_runs_table(PROBE, *year).num_rows
                times.append(time.perf_counter() - t0)
            p50s.append(pct(times, 0.50) * 1000)
            p99s.append(pct(times, 0.99) * 1000)
            t0 = time.perf_counter()
            assert len(list(islice(cold.job_runs(PROBE, *year), 100))) == 100
            first.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            assert len(list(cold.job_runs(PROBE, *year))) == found
            whole.append((time.perf_counter() - t0) * 1000)
            cold.close()
        note = f"{found:,} runs of one job over 365 days; median of {runs} x {samples} queries"
        name = f"archive: one job's year of {total / 1e6:,.0f}M outcomes"
        row(f"{name}, query p50", f"{statistics.median(p50s):,.0f} ms", "-", note)
        row(f"{name}, query p99", f"{statistics.median(p99s):,.0f} ms", "<= 1,000 ms",
            note + " (DuckDB to an Arrow table)")  # fmt: skip
        row(f"{name}, a connection's first query", f"{statistics.median(fresh):,.0f} ms", "-",
            "footers not cached yet (each `cronstream history --archive` command)")  # fmt: skip
        row(f"{name}, first 100 as RunOutcomes", f"{statistics.median(first):,.0f} ms", "-",
            "what `history JOB --archive` (--limit 100) waits for")  # fmt: skip
        row(f"{name}, all {found:,} as RunOutcomes", f"{statistics.median(whole):,.0f} ms",
            "-", "one Python object per run")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bench_export(base, runs)


def bench_export(base: Settings, runs: int, outcomes: int = 200_000) -> None:
    """The archiver's rate: ``outcomes`` waiting on the history topic, one archiver
    (in this process) until its group has committed them all."""
    rates = [outcomes / _export_once(base, outcomes) for _ in range(runs)]
    row(
        "archive: export (archiver) rate",
        f"{statistics.median(rates):,.0f} outcomes/s",
        "-",
        f"{outcomes:,} outcomes from the history topic to Parquet, committed; median of {runs}",
    )


def _export_once(base: Settings, outcomes: int) -> float:
    with namespace(base, "csbench-archive") as ns:
        publish(ns, list(_noop_outcomes(outcomes, int(time.time() * 1000))))
        root = archive.archive_root(ns)
        config = ArchiverConfig(group=f"{ns.topic_prefix}.archiver", flush_rows=5_000,
                                flush_s=0.5, compact_every_s=1e12)  # fmt: skip
        archiver = Archiver(ns, config, root)
        t0, checked = time.monotonic(), [0.0]

        def done() -> bool:  # the group's offsets at the end (asked once a second)
            if archiver.buffers or time.monotonic() - checked[0] < 1:
                return False
            checked[0] = time.monotonic()
            return group_caught_up(ns, config.group, Topics(ns).history)

        archiver.run(done)
        took = time.monotonic() - t0
        shutil.rmtree(root, ignore_errors=True)
        return took
