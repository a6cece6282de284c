"""History benchmarks: sink rows/s into Cassandra, and query latency over stored runs."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from itertools import islice
from pathlib import Path
from typing import Any

from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    RunOutcome,
    RunStatus,
    from_ms,
)
from tests.bench.common import checkout, cpu_s, namespace, pct, row
from tests.chaos.stack import service
from tests.integration.helpers import (
    CronstreamProcess,
    group_caught_up,
    history_keyspace,
)

BASELINE = os.environ.get("CRONSTREAM_BENCH_SINK_BASELINE", "c4846ca")
SINK_JOBS = 10_000
SINK_TENANTS = 4


def finished_outcomes(count: int, now_ms: int) -> Iterator[RunOutcome]:
    """SUCCEEDED outcomes of quick runs of ``SINK_JOBS`` jobs of ``SINK_TENANTS``
    tenants, as workers publish them (a run that finishes within its start's grace
    writes no STARTED)."""
    for i in range(count):
        tenant = f"t{i % SINK_TENANTS}"
        job_id, at = f"{tenant}.sinkjob{i % SINK_JOBS}", now_ms - (count - i) * 10
        yield RunOutcome(
            run_id=f"{job_id}@{i}",
            job_id=job_id,
            tenant=tenant,
            status=RunStatus.SUCCEEDED,
            scheduled_at=from_ms(at),
            recorded_at=from_ms(at + 3),
            started_at=from_ms(at + 2),
            finished_at=from_ms(at + 3),
            duration_ms=1,
            target_type="http",
            worker="bench",
        )


SinkRound = tuple[float, list[float], float]  # outcomes/s, each sink's us/outcome, Cassandra's


def _sink_round(base: Settings, count: int, sinks: int, code: Path | None) -> SinkRound:
    """A backlog of ``count`` outcomes on history drained by ``sinks`` sink processes of
    ``code`` (None: this checkout) into a fresh keyspace: outcomes/s, CPU us per
    outcome of each sink and of Cassandra."""
    cassandra = service(base, "cassandra").pid() or 0
    with namespace(base) as topics_ns, history_keyspace(topics_ns, "csbench") as settings:
        publisher = Publisher(settings, serve_each=False)
        for outcome in finished_outcomes(count, int(time.time() * 1000)):
            publisher.publish(Topics(settings).history, outcome)
        publisher.flush(120)
        settle(settings)
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        procs = [
            CronstreamProcess(settings, logdir, f"sink{n}", command="sink", code=code)
            for n in range(sinks)
        ]
        try:
            for proc in procs:
                proc.wait_live(1, timeout=120, text="assigned")
            t0 = time.monotonic()
            c0 = [cpu_s(p.proc.pid) for p in procs] + [cpu_s(cassandra)]
            group = f"{settings.topic_prefix}.sink"
            while not group_caught_up(settings, group, Topics(settings).history):
                for proc in procs:
                    assert proc.proc.poll() is None, proc.log()[-2000:]
                time.sleep(0.5)
            elapsed = time.monotonic() - t0
            c1 = [cpu_s(p.proc.pid) for p in procs] + [cpu_s(cassandra)]
        finally:
            for proc in procs:
                proc.stop()
    used = [(b - a) / count * 1e6 for a, b in zip(c0, c1, strict=True)]
    return count / elapsed, used[:-1], used[-1]


def bench_sink(base: Settings, runs: int, outcomes: int) -> None:
    """A backlog of ``outcomes`` SUCCEEDED outcomes drained into Cassandra by one sink
    of this checkout and one of ``BASELINE`` (round by round, side by side), then by two
    sinks of this checkout: outcomes/s and CPU us per outcome of the sink(s) and of
    Cassandra, medians of ``runs`` rounds."""
    found: dict[str, list[SinkRound]] = {"this": [], BASELINE: [], "two sinks": []}
    with checkout(BASELINE) as older:
        for _ in range(runs):
            found["this"].append(_sink_round(base, outcomes, 1, None))
            if older is not None:
                found[BASELINE].append(_sink_round(base, outcomes, 1, older))
            found["two sinks"].append(_sink_round(base, outcomes, 2, None))
    for name, rounds in found.items():
        if not rounds:
            row(f"history sink ({name})", "n/a", "", f"revision {BASELINE} not in this clone")
            continue
        rate = statistics.median(r[0] for r in rounds)
        sinks = [statistics.median(r[1][n] for r in rounds) for n in range(len(rounds[0][1]))]
        cassandra = statistics.median(r[2] for r in rounds)
        together = sum(sinks) + cassandra
        each = " + ".join(f"{v:.0f}" for v in sinks)
        row(
            f"history ({name}): sink + Cassandra CPU us per outcome",
            f"{together:.0f}",
            "<= 60",
            f"sink {each}, Cassandra {cassandra:.0f}; {rate:,.0f} outcomes/s; "
            f"{outcomes:,} outcomes of {SINK_JOBS:,} jobs; rounds "
            f"{[round(sum(r[1]) + r[2]) for r in rounds]}",
        )
        if len(sinks) > 1:
            share = [v / sum(sinks) for v in sinks]
            row(
                f"history ({name}): each sink's share of the sinks' CPU",
                " / ".join(f"{v:.2f}" for v in share),
                "~0.5 each",
            )


def store_runs(
    session: Any, keyspace: str, outcomes: Iterable[RunOutcome], chunk_rows: int = 30_000
) -> float:
    """Write ``outcomes`` straight into ``keyspace``'s history tables the sink's way
    (``HistoryTables.rows``, ``RowWriter`` batches, 16 in flight), ``chunk_rows`` rows
    at a time; the seconds it took."""
    from cronstream.consumers.history import HistoryTables
    from cronstream.consumers.sink import RowWriter

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
    cassandra = service(settings, "cassandra").pid() or 0
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
                run_id=f"job{j}@{k}",
                job_id=f"job{j}",
                status=RunStatus.FAILED if failed else RunStatus.SUCCEEDED,
                scheduled_at=from_ms(at),
                recorded_at=from_ms(at + 50),
                started_at=from_ms(at + 5),
                finished_at=from_ms(at + 50),
                duration_ms=45,
                error="HttpError: 500" if failed else None,
                target_type="http",
                worker="bench",
            )


def bench_queries(base: Settings, runs: int, stored: int, samples: int) -> None:
    """``stored`` runs (1,000 jobs over the last day, 1 % failed) written straight to
    Cassandra, then the three history queries, ``samples`` times each per run."""
    import random

    from cronstream.consumers.history import History
    from cronstream.runtime.cassandra import cassandra_session

    with history_keyspace(base, prefix="csbench") as settings:
        cluster, session = cassandra_session(settings)
        try:
            now_ms = int(time.time() * 1000)
            per_job = stored // 1000
            load_s = store_runs(session, settings.keyspace, _day_of_runs(stored, now_ms))
            print(f"  loaded {stored:,} runs ({stored * 3:,} rows) in {load_s:.0f}s", flush=True)
            history = History(session, settings.keyspace)
            end = from_ms(now_ms + 1000)
            queries: dict[str, Callable[[], object]] = {
                f"a job's last day (all {per_job:,} rows)": lambda: list(
                    history.job_runs(f"job{random.randrange(1000)}", end - timedelta(hours=24), end)
                ),
                "a job's last day (first 100 rows)": lambda: list(
                    islice(
                        history.job_runs(
                            f"job{random.randrange(1000)}", end - timedelta(hours=24), end
                        ),
                        100,
                    )
                ),
                f"failures in the last hour (all ~{stored // 100 // 24:,} rows)": lambda: list(
                    history.by_status(["FAILED"], end - timedelta(hours=1), end)
                ),
                "one run_id": lambda: history.run(
                    f"job{random.randrange(1000)}@{random.randrange(per_job)}"
                ),
            }
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
                row(
                    f"history query p99: {name}",
                    f"{statistics.median(p99s):.1f} ms",
                    "<= 50 ms",
                    f"p50 {statistics.median(p50s):.1f} ms; {stored:,} runs stored; "
                    f"p99 of runs {[round(v, 1) for v in p99s]}",
                )
        finally:
            cluster.shutdown()
