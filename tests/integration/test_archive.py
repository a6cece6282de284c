"""The cold tier on the real stack: the archiver writes every outcome of
the history topic once into the Iceberg table (S3Proxy's bucket, the catalog in the stack's
PostgreSQL), across a kill -9 between its data files and its snapshot, and across a crash
between its snapshot and its Kafka commit; a job's history that spans the hot
(Cassandra) and cold (archive) tiers comes back with every run once; compaction changes
no answer; a tenant's query reads its own rows; expiry removes the old partitions and,
once their snapshots are forgotten, their files; a column the Avro contract adds joins
the table."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow.fs import FileSelector, FileType

from cronstream.api.backend import Backend
from cronstream.consumers import archive
from cronstream.consumers.archiver import Archiver, ArchiverConfig
from cronstream.consumers.history import History
from cronstream.consumers.lakehouse import ArchiveTable, filesystem, iceberg_schema, to_arrow
from cronstream.consumers.tiers import Tiers, hot_from
from cronstream.infra.objects import ensure_lakehouse
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.lakehouse import Lakehouse, lakehouse
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import RunOutcome, RunStatus, iso, to_ms
from tests.conftest import cli_env
from tests.integration.helpers import CronstreamProcess, cronstream, group_caught_up
from tests.integration.test_history import publish, start_sink, wait_until

pytestmark = pytest.mark.integration
DAY = timedelta(days=1)


@pytest.fixture
def lake(ns: Settings) -> Iterator[Lakehouse]:
    """The namespace's archive table (bucket and catalog ready), dropped with its files
    afterwards."""
    ensure_lakehouse(ns)
    where = lakehouse(ns)
    yield where
    table = ArchiveTable(where)
    try:
        fs, root = filesystem(where, table.table.location())
        table.catalog.drop_table(where.table)
        fs.delete_dir_contents(root, missing_dir_ok=True)
    finally:
        table.close()


def daily_runs(job: str, days: int, tenant: str = "default", *, first: int = 1) -> list[RunOutcome]:
    """One run a day for ``days`` days up to ``first`` days ago, STARTED then SUCCEEDED."""
    today = datetime.now(UTC).replace(hour=3, minute=0, second=0, microsecond=0)
    out = []
    for i in range(first, first + days):
        at = today - i * DAY
        base = dict(
            run_id=f"{job}@{iso(at)}",
            job_id=job,
            tenant=tenant,
            scheduled_at=at,
            target_type="http",
            worker="w1",
        )
        out.append(
            RunOutcome(**base, status=RunStatus.STARTED, recorded_at=at + timedelta(seconds=1))
        )
        out.append(
            RunOutcome(
                **base,
                status=RunStatus.SUCCEEDED,
                recorded_at=at + timedelta(seconds=3),
                duration_ms=2000,
            )
        )
    return out


def stored(where: Lakehouse) -> Counter[tuple[str, str]]:
    """(run id, status) -> how many rows of it the table holds."""
    table = ArchiveTable(where)
    try:
        rows = table.scan(columns=("run_id", "status"))
    finally:
        table.close()
    return Counter(
        zip(rows.column("run_id").to_pylist(), rows.column("status").to_pylist(), strict=True)
    )


def files_under(where: Lakehouse, suffix: str) -> set[str]:
    table = ArchiveTable(where)
    try:
        fs, root = filesystem(where, table.table.location())
    finally:
        table.close()
    found = fs.get_file_info(FileSelector(root, recursive=True, allow_not_found=True))
    return {f.path for f in found if f.type == FileType.File and f.path.endswith(suffix)}


def one_file_per_finished_day(where: Lakehouse) -> bool:
    table = ArchiveTable(where)
    try:
        yesterday = (datetime.now(UTC) - DAY).date()
        return all(files == 1 for part, files in table.partitions().items() if part.end < yesterday)
    finally:
        table.close()


def archived(ns: Settings, group: str) -> bool:
    return group_caught_up(ns, group, Topics(ns).history)


def catch_up(ns: Settings, where: Lakehouse, config: ArchiverConfig) -> Archiver:
    """An archiver run until its group has committed the whole history topic."""
    archiver = Archiver(ns, config, where)
    stop_at = time.monotonic() + 90

    def stop() -> bool:
        assert time.monotonic() < stop_at, "the archiver never caught up"
        return archived(ns, config.group) if archiver.checkpoints else False

    archiver.run(stop)
    return archiver


def test_a_kill_9_between_the_data_files_and_the_snapshot_archives_each_outcome_once(
    ns: Settings, lake: Lakehouse, tmp_path: Path
) -> None:
    outcomes = [*daily_runs("nightly", 40), *daily_runs("acme/etl", 20, tenant="acme")]
    publish(ns, outcomes)
    crash = subprocess.run(
        [sys.executable, "-m", "tests.integration.archiver_crash"],
        env=cli_env(ns),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert crash.returncode == -9, crash.stdout + crash.stderr
    assert "killed before the commit" in crash.stdout
    orphans = files_under(lake, ".parquet")
    assert orphans  # its data files reached the bucket ...
    assert stored(lake) == Counter()  # ... and no snapshot holds them

    config = ArchiverConfig(
        group=f"{ns.topic_prefix}.archiver", flush_rows=50, flush_s=0.5, compact_every_s=1e12
    )
    catch_up(ns, lake, config)
    held = stored(lake)
    assert set(held.values()) == {1}  # each outcome once
    assert sum(held.values()) == len(outcomes)

    # The crashed writer's files: referenced by nothing, removed once old enough.
    table = ArchiveTable(lake)
    try:
        assert not orphans & {f.split("://", 1)[1] for f in table.referenced()}
        assert table.remove_orphans() == 0  # too young: may be a commit in progress
        removed = table.remove_orphans(now=datetime.now(UTC) + 2 * DAY)
    finally:
        table.close()
    assert removed >= len(orphans)
    assert not orphans & files_under(lake, ".parquet")
    assert sum(stored(lake).values()) == len(outcomes)


def test_a_crash_between_the_snapshot_and_the_kafka_commit_writes_nothing_twice(
    ns: Settings, lake: Lakehouse
) -> None:
    outcomes = [*daily_runs("nightly", 30), *daily_runs("acme/etl", 10, tenant="acme")]
    publish(ns, outcomes)
    config = ArchiverConfig(
        group=f"{ns.topic_prefix}.archiver", flush_rows=10**6, flush_s=3600, compact_every_s=1e12
    )
    # A first archiver commits its snapshots, then "crashes" before its Kafka commits.
    first = Archiver(ns, config, lake)
    first.member.subscribe([first.topic], assigned=first._assigned)
    deadline = time.monotonic() + 60
    while sum(len(b.outcomes) for b in first.buffers.values()) < len(outcomes):
        assert time.monotonic() < deadline, "the first archiver never read everything"
        first.step()
    for partition, buffer in first.buffers.items():
        first.table.write(
            partition,
            first.checkpoints.get(partition),
            buffer.next_offset,
            to_arrow(buffer.outcomes),
        )
    first.member.close()
    first.table.close()
    first.codec.registry.close()
    assert sum(stored(lake).values()) == len(outcomes)

    # The next one reads the same records again (nothing committed), skips what the
    # table holds, and stops with everything committed and nothing written twice.
    catch_up(ns, lake, replace(config, flush_rows=10, flush_s=0.5))
    held = stored(lake)
    assert set(held.values()) == {1}
    assert sum(held.values()) == len(outcomes)
    table = ArchiveTable(lake)
    try:
        days = {part.start for part in table.partitions()}
        assert {part.tenant for part in table.partitions()} == {"default", "acme"}
    finally:
        table.close()
    assert len(days) == 30


def test_expiry_removes_the_old_partitions_and_then_their_files(
    ns: Settings, lake: Lakehouse
) -> None:
    old = daily_runs("nightly", 5, first=400)
    recent = daily_runs("nightly", 5)
    table = ArchiveTable(lake)
    try:
        table.write(0, None, 1, to_arrow(old))
        table.write(0, 1, 2, to_arrow(recent))
        old_files = files_under(lake, ".parquet")
        today = datetime.now(UTC).date()
        gone = table.expire(today, 366, now=datetime.now(UTC) + 2 * DAY)
        assert len(gone) == 5
        assert all(part.end < today - 366 * DAY for part in gone)
        assert {run for run, _ in stored(lake)} == {o.run_id for o in recent}
        removed = table.remove_orphans(now=datetime.now(UTC) + 2 * DAY)
        left = files_under(lake, ".parquet")
        assert removed >= 5
        assert len(left) < len(old_files)
        assert {f.split("://", 1)[1] for f in table.referenced()} >= left
        assert table.checkpoint(0) == 2  # the offsets stay with the table
    finally:
        table.close()
    assert sum(stored(lake).values()) == len(recent)


def test_a_column_the_avro_contract_adds_joins_the_table_and_old_rows_read_null(
    ns: Settings, lake: Lakehouse
) -> None:
    # A table made before ``worker`` existed, holding a row.
    table = ArchiveTable.__new__(ArchiveTable)
    table.where = lake
    from pyiceberg.catalog.sql import SqlCatalog

    table.catalog = SqlCatalog("cronstream", **lake.catalog_properties())
    table.catalog.create_namespace_if_not_exists(lake.namespace)
    older = iceberg_schema().select(*(n for n in archive.COLUMNS if n != "worker"))
    made = table.catalog.create_table(lake.table, schema=older)
    row = to_arrow(daily_runs("nightly", 1)[:1]).drop_columns(["worker"])
    made.append(row.cast(pa.schema([f for f in row.schema])))
    table.catalog.engine.dispose()

    reopened = ArchiveTable(lake)  # adds the column
    try:
        assert "worker" in reopened.table.schema().column_names
        rows = reopened.scan()
        assert rows.column("worker").to_pylist() == [None]
        reopened.write(0, None, 1, to_arrow(daily_runs("nightly", 1, first=2)))
        assert sorted(reopened.scan().column("worker").to_pylist(), key=str) == [None, "w1", "w1"]
    finally:
        reopened.close()


def test_a_job_history_spanning_the_hot_and_cold_tiers_has_every_run_once(  # long: one story
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    ensure_lakehouse(ns)
    lake = lakehouse(ns)
    outcomes = daily_runs("spans", 60)
    publish(ns, outcomes)
    start_sink(ns, tmp_path, procs)
    archiver = CronstreamProcess(
        ns, tmp_path, "archiver", "--flush-interval", "1s", command="archiver"
    )
    procs.append(archiver)
    wait_until(lambda: archived(ns, f"{ns.topic_prefix}.archiver"), 120, "the archiver")
    wait_until(
        lambda: group_caught_up(ns, f"{ns.topic_prefix}.sink", Topics(ns).history), 120, "the sink"
    )

    # Cassandra keeps 30 days (the default): older slots are read from the archive too
    # (the sink's rows of them are still in Cassandra here: each run is shown once).
    every = cronstream(ns, "history", "spans", "--since", "70d", "--json", "--limit", "0")
    assert every.returncode == 0, every.stderr
    runs = [line for line in every.stdout.splitlines() if line]
    assert len(runs) == 60, every.stdout
    assert len(set(runs)) == 60
    assert all('"status": "SUCCEEDED"' in line for line in runs)
    deprecated = cronstream(
        ns, "history", "spans", "--since", "70d", "--json", "--limit", "0", "--archive"
    )
    assert deprecated.stdout == every.stdout
    assert "--archive is no longer needed" in deprecated.stderr
    cold = archive.Archive(lake)
    boundary = hot_from(ns, datetime.now(UTC))
    from_archive = list(cold.job_runs("spans", boundary - 70 * DAY, boundary))
    assert not list(cold.job_runs("spans", boundary - 70 * DAY, boundary, tenant="acme"))
    older = {o.run_id for o in outcomes if o.scheduled_at < boundary}
    assert {r.run_id for r in from_archive} == older  # the days before the first hot day
    assert 0 < len(older) < 60
    assert all(to_ms(r.scheduled_at) < to_ms(boundary) for r in from_archive)

    status_and_run_span_the_tiers(ns, outcomes)

    # Compaction: one file per finished day and tenant, the same answer.
    archiver.cleanup()
    compacted = cronstream(ns, "archive", "compact")
    assert compacted.returncode == 0, compacted.stderr
    assert one_file_per_finished_day(lake)
    again = cronstream(ns, "history", "spans", "--since", "70d", "--json", "--limit", "0")
    assert again.stdout == every.stdout
    cold.close()


def status_and_run_span_the_tiers(ns: Settings, outcomes: list[RunOutcome]) -> None:
    """``daily_runs``' outcomes, recorded and archived, found by status and by run id from
    the CLI and the dashboard's backend, across the tiers."""
    # By status (by recorded time: the archive's before the boundary, Cassandra's after)
    # and one run's records, across the tiers too.
    succeeded = cronstream(
        ns,
        "history",
        "--status",
        "SUCCEEDED",
        "--all-tenants",
        "--since",
        "70d",
        "--json",
        "--limit",
        "0",
    )
    assert succeeded.returncode == 0, succeeded.stderr
    assert len(succeeded.stdout.splitlines()) == 60
    assert len(set(succeeded.stdout.splitlines())) == 60
    oldest = outcomes[-1].run_id
    one = cronstream(ns, "history", "--run", oldest, "--json")
    assert one.returncode == 0, one.stderr
    assert [line.count('"attempt": 1') for line in one.stdout.splitlines()] == [1, 1]

    # The dashboard's and the API's history (``Backend.history``: ``Tiers``) spans them too.
    backend = Backend(ns)
    cluster, session = cassandra_session(ns)
    try:
        backend.hot = History(session, ns.keyspace)
        backend.history = Tiers(backend.hot, ns)
        now = datetime.now(UTC)
        shown = [r.run_id for r in backend.history.job_runs("spans", now - 70 * DAY, now)]
        assert sorted(shown) == sorted({o.run_id for o in outcomes})
        latest = [r.run_id for r in backend.history.job_runs("spans", now - 70 * DAY, now, limit=5)]
        assert latest == shown[:5]
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        recent = backend.history.job_runs("spans", midnight - 3 * DAY, now)  # Cassandra's alone
        assert [r.run_id for r in recent] == shown[:3]
        assert [r.status for r in backend.history.run(oldest)] == [
            RunStatus.STARTED,
            RunStatus.SUCCEEDED,
        ]
        found = backend.history.by_status(["SUCCEEDED"], now - 70 * DAY, now, "default")
        assert len({r.run_id for r in found}) == 60
    finally:
        backend.close()
        cluster.shutdown()
