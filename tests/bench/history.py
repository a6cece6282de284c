"""History benchmarks: sink rows/s into Cassandra, and query latency over stored runs."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

from infra.services import all_services
from runtime.kafka.publisher import Publisher
from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import (
    RunOutcome,
    RunStatus,
    from_ms,
)
from tests.bench.common import cpu_s, namespace, pct, row
from tests.integration.helpers import (
    CronstreamProcess,
    group_caught_up,
    history_keyspace,
)


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
                    c0 = {"sink": cpu_s(sink.proc.pid), "cassandra": cpu_s(cassandra)}
                    group = f"{settings.topic_prefix}.sink"
                    while not group_caught_up(settings, group, Topics(settings).history):
                        assert sink.proc.poll() is None, sink.log()[-2000:]
                        time.sleep(0.5)
                    elapsed = time.monotonic() - t0
                    c1 = {"sink": cpu_s(sink.proc.pid), "cassandra": cpu_s(cassandra)}
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


def store_runs(session: Any, keyspace: str, outcomes: Iterable[RunOutcome],
               chunk_rows: int = 30_000) -> float:  # fmt: skip
    """Write ``outcomes`` straight into ``keyspace``'s history tables the sink's way
    (``HistoryTables.rows``, ``RowWriter`` batches, 16 in flight), ``chunk_rows`` rows
    at a time; the seconds it took."""
    from consumers.history import HistoryTables
    from consumers.sink import RowWriter

    tables = HistoryTables(session, keyspace, ttl_s=86400 * 7)
    writer = RowWriter(session)
    t0 = time.monotonic()
    chunk: list[tuple[str, Any]] = []
    for outcome in outcomes:
        chunk.extend(tables.rows(outcome))
        if len(chunk) >= chunk_rows:
            _send(writer, chunk)
            chunk = []
    _send(writer, chunk)
    return time.monotonic() - t0


def _send(writer: Any, rows: list[tuple[str, Any]]) -> None:
    if rows and writer.send(writer.batches(rows)):
        raise RuntimeError("cassandra refused the bench load")


def settle(settings: Settings, idle_cores: float = 0.25, most_s: float = 300) -> float:
    """Wait until Cassandra uses less than ``idle_cores`` of CPU over 5 s (after a bulk
    load, its flushes and compactions take a core for minutes), ``most_s`` at most;
    the seconds waited."""
    cassandra = next(s for s in all_services(settings) if s.name == "cassandra").pid() or 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < most_s:
        used = cpu_s(cassandra)
        time.sleep(5)
        if (cpu_s(cassandra) - used) / 5 < idle_cores:
            break
    return time.monotonic() - t0


def _day_of_runs(stored: int, now_ms: int) -> Iterator[RunOutcome]:
    """``stored`` runs of 1,000 jobs over the last day, 1 % failed."""
    per_job = stored // 1000
    step = 86_400_000 // per_job
    for k in range(per_job):
        for j in range(1000):
            at = now_ms - k * step - j
            failed = (k * 1000 + j) % 100 == 0
            yield RunOutcome(
                run_id=f"job{j}@{k}", job_id=f"job{j}",
                status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
                scheduled_at=from_ms(at), recorded_at=from_ms(at + 50),
                started_at=from_ms(at + 5), finished_at=from_ms(at + 50),
                duration_ms=45, error="HttpError: 500" if failed else None,
                target_type="http", worker="bench",
            )  # fmt: skip


def bench_queries(base: Settings, runs: int, stored: int, samples: int) -> None:
    """``stored`` runs (1,000 jobs over the last day, 1 % failed) written straight to
    Cassandra, then the three history queries, ``samples`` times each per run."""
    import random

    from consumers.history import History
    from runtime.cassandra import cassandra_session

    with history_keyspace(base, prefix="csbench") as settings:
        cluster, session = cassandra_session(settings)
        try:
            now_ms = int(time.time() * 1000)
            per_job = stored // 1000
            load_s = store_runs(session, settings.keyspace, _day_of_runs(stored, now_ms))
            print(f"  loaded {stored:,} runs ({stored * 4:,} rows) in {load_s:.0f}s", flush=True)
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
