"""The cold tier on the real stack (issue 19): the archiver writes every outcome of the
history topic to Parquet once, across a crash between its files and its commit; a
job's history that spans the hot (Cassandra) and cold (archive) tiers comes back with
every run once; compaction changes no answer."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from consumers import archive
from consumers.archiver import Archiver, ArchiverConfig
from consumers.history import History
from cronstream.api.backend import Backend
from runtime.cassandra import cassandra_session
from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import RunOutcome, RunStatus, iso, to_ms
from tests.integration.helpers import CronstreamProcess, cronstream, group_caught_up
from tests.integration.test_history import publish, start_sink, wait_until

pytestmark = pytest.mark.integration
DAY = timedelta(days=1)


@pytest.fixture
def root(ns: Settings) -> Iterator[Path]:
    path = archive.archive_root(ns)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def daily_runs(job: str, days: int, tenant: str = "default") -> list[RunOutcome]:
    """One run a day for ``days`` days up to yesterday, STARTED then SUCCEEDED."""
    today = datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0)
    out = []
    for i in range(1, days + 1):
        at = today - i * DAY
        base = dict(run_id=f"{job}@{iso(at)}", job_id=job, tenant=tenant, scheduled_at=at,
                    target_type="http", worker="w1")  # fmt: skip
        out.append(RunOutcome(**base, status=RunStatus.STARTED,
                              recorded_at=at + timedelta(seconds=1)))  # fmt: skip
        out.append(RunOutcome(**base, status=RunStatus.SUCCEEDED,
                              recorded_at=at + timedelta(seconds=3), duration_ms=2000))  # fmt: skip
    return out


def rows_in(root: Path) -> int:
    files = [str(p) for p in root.rglob("*.parquet")]
    if not files:
        return 0
    (count,) = duckdb.sql("SELECT count(*) FROM read_parquet($f)", params={"f": files}).fetchall()
    return int(count[0])


def archived(ns: Settings, group: str) -> bool:
    return group_caught_up(ns, group, Topics(ns).history)


def test_every_outcome_is_archived_once_across_a_crash_before_the_commit(
    ns: Settings, root: Path
) -> None:
    outcomes = [*daily_runs("nightly", 200), *daily_runs("acme/etl", 50, tenant="acme")]
    publish(ns, outcomes)
    config = ArchiverConfig(group=f"{ns.topic_prefix}.archiver", flush_rows=10**6, flush_s=3600)

    # A first archiver writes its parts and checkpoints, then "crashes" before its
    # commits: nothing reaches the group.
    first = Archiver(ns, config, root)
    first.member.subscribe([first.topic], assigned=first._assigned)
    deadline = time.monotonic() + 60
    while sum(len(b.outcomes) for b in first.buffers.values()) < len(outcomes):
        assert time.monotonic() < deadline, "the first archiver never read everything"
        first.step()
    for partition, buffer in first.buffers.items():
        archive.write_parts(root, partition, buffer.first, buffer.outcomes)
        archive.save_checkpoint(root, partition, buffer.next_offset)
    first.member.close()
    first.codec.registry.close()
    files_before = sorted(p.relative_to(root) for p in root.rglob("*.parquet"))
    assert rows_in(root) == len(outcomes)

    # The next one reads the same records again (nothing committed), skips what the
    # checkpoints hold, and stops with everything committed and nothing written twice.
    # (no compaction here: its DISTINCT would hide a part written twice)
    second = Archiver(ns, ArchiverConfig(group=config.group, flush_rows=10, flush_s=0.5,
                                         compact_every_s=1e12), root)  # fmt: skip
    stop_at = time.monotonic() + 60

    def stop() -> bool:
        assert time.monotonic() < stop_at, "the second archiver never caught up"
        return archived(ns, config.group) if second.checkpoints else False

    second.run(stop)
    assert rows_in(root) == len(outcomes)
    assert sorted(p.relative_to(root) for p in root.rglob("*.parquet")) == files_before

    # The layout: a folder per slot day and tenant.
    days = {p.parent.parent.name for p in root.rglob("*.parquet")}
    assert len(days) == 200
    assert {p.parent.name for p in root.rglob("*.parquet")} == {"tenant=default", "tenant=acme"}


def test_a_job_history_spanning_the_hot_and_cold_tiers_has_every_run_once(  # long: one story
    history_ns: Settings, root: Path, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    outcomes = daily_runs("spans", 60)
    publish(ns, outcomes)
    start_sink(ns, tmp_path, procs)
    archiver = CronstreamProcess(ns, tmp_path, "archiver", "--flush-s", "1", command="archiver")
    procs.append(archiver)
    wait_until(lambda: archived(ns, f"{ns.topic_prefix}.archiver"), 120, "the archiver")
    wait_until(lambda: group_caught_up(ns, f"{ns.topic_prefix}.sink", Topics(ns).history),
               120, "the sink")  # fmt: skip

    # Cassandra's window is 30 days here: slots before it are read from the archive (the
    # sink's rows of older slots are still in Cassandra: they are not read twice).
    hot = {"CRONSTREAM_HISTORY_TTL_DAYS": "30"}
    every = cronstream(ns, "history", "spans", "--since", "70d", "--archive", "--json",
                       "--limit", "0", env=hot)  # fmt: skip
    assert every.returncode == 0, every.stderr
    runs = [line for line in every.stdout.splitlines() if line]
    assert len(runs) == 60, every.stdout
    assert len(set(runs)) == 60
    assert all('"status": "SUCCEEDED"' in line for line in runs)
    hot_only = cronstream(ns, "history", "spans", "--since", "70d", "--json", "--limit", "0",
                          env=hot)  # fmt: skip
    assert len(hot_only.stdout.splitlines()) == 60  # Cassandra still holds them all here
    cold = archive.Archive(root)
    boundary = archive.hot_from(replace(ns, history_ttl_days=30), datetime.now(UTC))
    from_archive = list(cold.job_runs("spans", boundary - 70 * DAY, boundary))
    older = {o.run_id for o in outcomes if o.scheduled_at < boundary}
    assert {r.run_id for r in from_archive} == older  # the days before the first hot day
    assert 0 < len(older) < 60
    assert all(to_ms(r.scheduled_at) < to_ms(boundary) for r in from_archive)

    # The dashboard's and the API's job history (``Backend.job_runs``) spans them too.
    backend = Backend(replace(ns, history_ttl_days=30))
    cluster, session = cassandra_session(ns)
    try:
        backend.history = History(session, ns.keyspace)
        now = datetime.now(UTC)
        shown = [r.run_id for r in backend.job_runs("spans", now - 70 * DAY, now)]
        assert sorted(shown) == sorted({o.run_id for o in outcomes})
        latest = [r.run_id for r in backend.job_runs("spans", now - 70 * DAY, now, limit=5)]
        assert latest == shown[:5]
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        recent = backend.job_runs("spans", midnight - 3 * DAY, now)  # Cassandra's alone
        assert [r.run_id for r in recent] == shown[:3]
    finally:
        backend.close()
        cluster.shutdown()

    # Compaction: one file per finished day and tenant, the same answer.
    archiver.cleanup()
    compacted = cronstream(ns, "archive", "compact")
    assert compacted.returncode == 0, compacted.stderr
    days = list(root.glob("day=*"))
    assert all([p.name for p in d.glob("*/*.parquet")] == [archive.COMPACTED] for d in days
               if d.name < f"day={(datetime.now(UTC) - DAY).date().isoformat()}")  # fmt: skip
    again = cronstream(ns, "history", "spans", "--since", "70d", "--archive", "--json",
                       "--limit", "0", env=hot)  # fmt: skip
    assert again.stdout == every.stdout
    cold.close()
