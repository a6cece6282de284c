"""The cold tier: one job's runs over a year from an archive table of at
least 100,000,000 outcomes, side by side with the local Parquet day files of the
baseline revision, and the archiver's rate into the table.

The year is appended day by day to the Iceberg table in the stack's S3Proxy bucket (its
catalog in the stack's PostgreSQL), one sorted file per day, from columns built in Arrow,
not through Kafka (100 million records would take the topic hours here), then its
finished months compacted into one file each (``compact_finished``, as the archiver does
hourly: a year is then about 40 files, not 365); the baseline's
year is the same columns (same generator, same seed) written by its own code in a
worktree of ``CRONSTREAM_BENCH_ARCHIVE_BASELINE`` (default 9ba235a: the local-file archive
before the Iceberg table), queried there by its own ``Archive``. The export row measures the
archiver itself: outcomes on the history topic -> snapshots, commit."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from itertools import islice

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow.fs import FileSelector

from cronstream.consumers import archive
from cronstream.consumers.archiver import Archiver, ArchiverConfig
from cronstream.consumers.compaction import compact_finished
from cronstream.consumers.lakehouse import ARROW, ArchiveTable, Part, filesystem, sort
from cronstream.infra.objects import ensure_lakehouse
from cronstream.runtime.lakehouse import lakehouse
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from tests.bench.archive_tiers import bench_tier_queries
from tests.bench.common import checkout, for_checkout, namespace, pct, row
from tests.bench.history import finished_outcomes
from tests.integration.helpers import group_caught_up
from tests.integration.test_history import publish

DAY_MS = 86_400_000
_MS = pa.timestamp("ms", tz="UTC")
SCHEMA = pa.schema(
    [f.with_type(_MS) if pa.types.is_timestamp(f.type) else f for f in ARROW if f.name != "tenant"]
)  # the baseline's columns
PROBE = "probe-00042"  # every 5 minutes all year: 105,120 runs, two outcomes each
BASELINE = os.environ.get("CRONSTREAM_BENCH_ARCHIVE_BASELINE", "9ba235a")


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
    return pa.table(
        {
            "job_id": twice(jobs_arr),
            "scheduled_at": twice(sched),
            "run_id": twice(run_ids),
            "attempt": pa.array(np.ones(2 * n, dtype=np.int32)),
            "status": status,
            "trigger": pa.array(["SCHEDULE"] * (2 * n)),
            "recorded_at": recorded,
            "started_at": pa.concat_arrays([pa.array(slots + 3, pa.timestamp("ms", tz="UTC"))] * 2),
            "finished_at": pa.concat_arrays([nulls_ts.slice(0, n), recorded.slice(n)]),
            "duration_ms": pa.concat_arrays(
                [pa.nulls(n, pa.int64()), pa.array(duration, pa.int64())]
            ),
            "error": pa.nulls(2 * n, pa.string()),
            "next_attempt_at": nulls_ts,
            "target_type": pa.array(["http"] * (2 * n)),
            "worker": pa.array(["w1"] * (2 * n)),
        },
        schema=SCHEMA,
    )


def build_year(table: ArchiveTable, total: int, jobs: int = 100_000) -> float:
    """``total`` outcomes over the 365 days before today, one snapshot (one sorted file)
    a day."""
    rng = np.random.default_rng(19)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    began = time.monotonic()
    per_day = total // 365
    for i in range(365, 0, -1):
        day = _day(today - timedelta(days=i), per_day, jobs, rng)
        rows = day.append_column("tenant", pa.array(["default"] * day.num_rows))
        table.table.append(sort(rows.cast(ARROW)))
    return time.monotonic() - began


def compact_year(table: ArchiveTable) -> tuple[float, dict[Part, int], int]:
    """The finished months folded into one file each, as the archiver's maintenance does:
    seconds, files merged per month, files in the table then."""
    t0 = time.monotonic()
    merged = compact_finished(table, datetime.now(UTC).date())
    took = time.monotonic() - t0
    files = len(table.table.inspect.files())
    print(
        f"  finished months compacted in {took:.0f}s: {len(merged)} partitions, "
        f"{sum(merged.values())} day files merged; {files} files now",
        flush=True,
    )
    return took, merged, files


def _queries(cold: archive.Archive, samples: int) -> tuple[float, list[float], int]:
    """A new reader's first query (ms), then ``samples`` more (s), and the runs found."""
    now = datetime.now(UTC)
    year = (now - timedelta(days=366), now)
    t0 = time.perf_counter()
    found = cold.job_runs_table(PROBE, *year).num_rows
    first = (time.perf_counter() - t0) * 1000
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        assert cold.job_runs_table(PROBE, *year).num_rows == found
        times.append(time.perf_counter() - t0)
    return first, times, found


def bench_archive(
    base: Settings, runs: int, total: int, samples: int
) -> None:  # long: one bench: the year built, queried, compared
    """One job's year from ``total`` archived outcomes (p50/p99 of ``samples`` queries
    per run, ``runs`` readers), the same on the baseline's local files, then the
    archiver's export rate."""
    with namespace(base, "csbench-archive") as ns:
        ensure_lakehouse(ns)
        where = lakehouse(ns)
        table = ArchiveTable(where)
        try:
            took = build_year(table, total)
            compacting, merged, files = compact_year(table)
            fs, root = filesystem(where, table.table.location())
            size = sum(f.size or 0 for f in fs.get_file_info(FileSelector(root, recursive=True)))
            print(
                f"  archive table: {total:,} outcomes over 365 days appended in {took:.0f}s "
                f"({total / took:,.0f} rows/s, {size / 2**30:.1f} GiB in the bucket)",
                flush=True,
            )
            firsts, times, found = [], [], 0
            for _ in range(runs):
                cold = archive.Archive(where)
                first, more, found = _queries(cold, samples)
                firsts.append(first)
                times += more
                t0 = time.perf_counter()
                assert len(list(islice(cold.job_runs(PROBE, *_year()), 100))) == 100
                hundred = (time.perf_counter() - t0) * 1000
                cold.close()
            bench_tier_queries(ns, where, PROBE, f"archive: {total / 1e6:,.0f}M outcomes", samples)
        finally:
            table.catalog.drop_table(where.table)
            fs.delete_dir_contents(root, missing_dir_ok=True)
            table.close()
    theirs = _baseline(total, samples * runs)
    name = f"archive: one job's year of {total / 1e6:,.0f}M outcomes"
    note = f"{found:,} runs of one job over 365 days; {runs} readers x {samples} queries"
    ours_50, ours_99 = pct(times, 0.5) * 1000, pct(times, 0.99) * 1000
    row(f"{name}, Iceberg on S3, query p50", f"{ours_50:,.0f} ms", "-", note)
    row(
        f"{name}, Iceberg on S3, query p99",
        f"{ours_99:,.0f} ms",
        "<= 1,000 ms",
        note + " (scan planned through the catalog, row groups read, then one sort in Arrow)",
    )
    row(
        f"{name}, Iceberg on S3, finished months compacted",
        f"{compacting:,.0f} s",
        "-",
        f"{len(merged)} months' day files folded into sorted files of disjoint job ranges "
        f"({files} files then: the months', and this month's days)",
    )
    row(
        f"{name}, Iceberg on S3, a reader's first query",
        f"{statistics.median(firsts):,.0f} ms",
        "-",
        "the table's metadata loaded: each `cronstream history` command reaching it",
    )
    row(
        f"{name}, Iceberg on S3, first 100 as RunOutcomes",
        f"{hundred:,.0f} ms",
        "-",
        "the table's part of `history JOB --since 366d` (--limit 100; one reader, warm)",
    )
    if theirs is None:
        row(f"{name}, local files ({BASELINE})", "not run", "-", "revision not in this clone")
        return
    theirs_50, theirs_99 = pct(theirs["times"], 0.5) * 1000, pct(theirs["times"], 0.99) * 1000
    row(
        f"{name}, local files ({BASELINE}), query p50 / p99",
        f"{theirs_50:,.0f} / {theirs_99:,.0f} ms",
        "-",
        f"the same year as Parquet day files read by DuckDB; ratio p99 table/files "
        f"{ours_99 / theirs_99:.2f}",
    )
    bench_export(base, runs)


def _year() -> tuple[datetime, datetime]:
    now = datetime.now(UTC)
    return now - timedelta(days=366), now


_BASELINE_PROBE = """
import json, shutil, sys, tempfile, time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from cronstream.consumers import archive
from tests.bench.archive import PROBE, build_year
total, samples = int(sys.argv[1]), int(sys.argv[2])
root = Path(tempfile.mkdtemp(prefix="cs-archive-baseline-"))
try:
    took = build_year(root, total)
    now = datetime.now(UTC)
    year = (now - timedelta(days=366), now)
    cold = archive.Archive(root)
    cold.job_runs_table(PROBE, *year)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        cold.job_runs_table(PROBE, *year)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"took": took, "times": times}))
finally:
    shutil.rmtree(root, ignore_errors=True)
"""


def _baseline(total: int, samples: int) -> dict[str, list[float]] | None:
    """The baseline revision's local-file archive of the same year, queried by its own
    code in a worktree (its own process)."""
    with checkout(BASELINE) as where:
        if where is None:
            return None
        done = subprocess.run(
            [sys.executable, "-c", for_checkout(where, _BASELINE_PROBE), str(total), str(samples)],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        )
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def bench_export(base: Settings, runs: int, outcomes: int = 200_000) -> None:
    """The archiver's rate: ``outcomes`` waiting on the history topic, one archiver
    (in this process) until its group has committed them all."""
    rates = [outcomes / _export_once(base, outcomes) for _ in range(runs)]
    row(
        "archive: export (archiver) rate",
        f"{statistics.median(rates):,.0f} outcomes/s",
        "-",
        f"{outcomes:,} outcomes from the history topic into the table, committed; median of {runs}",
    )


def _export_once(base: Settings, outcomes: int) -> float:
    with namespace(base, "csbench-archive") as ns:
        publish(ns, list(finished_outcomes(outcomes, int(time.time() * 1000))))
        ensure_lakehouse(ns)
        where = lakehouse(ns)
        config = ArchiverConfig(
            group=f"{ns.topic_prefix}.archiver",
            flush_rows=50_000,
            flush_s=2.0,
            compact_every_s=1e12,
        )
        archiver = Archiver(ns, config, where)
        t0, checked = time.monotonic(), [0.0]

        def done() -> bool:  # the group's offsets at the end (asked once a second)
            if archiver.buffers or time.monotonic() - checked[0] < 1:
                return False
            checked[0] = time.monotonic()
            return group_caught_up(ns, config.group, Topics(ns).history)

        archiver.run(done)
        took = time.monotonic() - t0
        table = ArchiveTable(where)
        fs, root = filesystem(where, table.table.location())
        table.catalog.drop_table(where.table)
        fs.delete_dir_contents(root, missing_dir_ok=True)
        table.close()
        return took
