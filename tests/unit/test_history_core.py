"""Pure parts of the history: buckets, shards, write timestamps, the named statements,
and the CLI's window and status parsing."""

from __future__ import annotations

import argparse
import struct
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from cronstream.cli.history import _checked, history_statuses, history_window, register
from cronstream.consumers.core.buckets import (
    SHARDS,
    day_of,
    days_desc,
    hour_of,
    hours_desc,
    shard_of,
    write_timestamp,
)
from cronstream.consumers.errors import StatementsError
from cronstream.consumers.history import load_statements
from cronstream.schemas.errors import SpecError

T = datetime(2026, 11, 22, 23, 30, tzinfo=UTC)


def test_days_and_hours_cover_the_window_newest_first() -> None:
    assert list(days_desc(T, T + timedelta(hours=1))) == [date(2026, 11, 23), date(2026, 11, 22)]
    # An end exactly at midnight does not touch the next day.
    midnight = datetime(2026, 11, 23, tzinfo=UTC)
    assert list(days_desc(T, midnight)) == [date(2026, 11, 22)]
    assert list(days_desc(T, T)) == []
    hours = list(hours_desc(T, T + timedelta(minutes=90)))
    assert hours == [T.replace(day=23, hour=0, minute=0), T.replace(minute=0)]
    assert list(hours_desc(T, T.replace(minute=45))) == [T.replace(minute=0)]


def test_buckets_are_utc_whatever_the_offset() -> None:
    paris = datetime(2026, 11, 23, 0, 30, tzinfo=UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("Europe/Paris")
    )
    assert day_of(paris) == date(2026, 11, 23)
    assert hour_of(paris) == datetime(2026, 11, 23, 0, tzinfo=UTC)


def test_shards_are_stable_and_spread() -> None:
    assert shard_of("job@2026-11-22T10:00:00.000Z") == shard_of("job@2026-11-22T10:00:00.000Z")
    # crc32 is fixed across processes and versions (Python's hash() is not).
    assert shard_of("abc") == 0x352441C2 % SHARDS
    seen = {shard_of(f"storm@{i}") for i in range(200)}
    assert seen == set(range(SHARDS))


def test_write_timestamp_orders_stages_within_a_millisecond() -> None:
    started, succeeded = write_timestamp(1000, "STARTED"), write_timestamp(1000, "SUCCEEDED")
    assert started == 1_000_000
    assert succeeded > started
    assert write_timestamp(999, "DUPLICATE") < started  # a millisecond outweighs any rank
    assert write_timestamp(1000, "SUCCEEDED") == succeeded  # redelivery: the same stamp


def test_named_statements_load_and_a_bad_file_is_refused(tmp_path: Path) -> None:
    names = load_statements()
    assert {
        "insert_by_job",
        "insert_by_tenant_status",
        "insert_by_id",
        "insert_tenant_hour",
        "select_job_day",
        "select_status_hour",
        "tenants_of_hour",
        "select_run",
    } <= set(names)
    assert "insert_by_status" not in names  # runs_by_status is read, no longer written
    assert all(";" not in cql for cql in names.values())
    bad = tmp_path / "bad.cql"
    bad.write_text("-- name: one\nSELECT 1 FROM t\n-- name: two\nSELECT 2 FROM t;\n")
    with pytest.raises(StatementsError, match="one must be one statement"):
        load_statements(bad)
    twice = tmp_path / "twice.cql"
    twice.write_text("-- name: one\nSELECT 1 FROM t;\n-- name: one\nSELECT 2 FROM t;\n")
    with pytest.raises(StatementsError, match="defined twice"):
        load_statements(twice)


def test_history_window_and_statuses() -> None:
    assert history_window("90m", None, None, T) == (T - timedelta(minutes=90), T)
    assert history_window(None, None, None, T) == (T - timedelta(hours=24), T)
    lo, hi = history_window(None, "2026-11-22T10:00:00+01:00", "2026-11-22T12:00:00Z", T)
    assert (lo, hi) == (
        datetime(2026, 11, 22, 9, tzinfo=UTC),
        datetime(2026, 11, 22, 12, tzinfo=UTC),
    )
    with pytest.raises(SpecError, match="not both"):
        history_window("1h", "2026-11-22T10:00:00Z", None, T)
    with pytest.raises(SpecError, match="is not before"):
        history_window(None, "2026-11-22T12:00:00Z", "2026-11-22T10:00:00Z", T)
    with pytest.raises(SpecError, match="not a duration"):
        history_window("yesterday", None, None, T)
    assert history_statuses(["failed,timed_out", "DEAD_LETTERED"]) == [
        "FAILED",
        "TIMED_OUT",
        "DEAD_LETTERED",
    ]
    with pytest.raises(SpecError, match="unknown status BOOM"):
        history_statuses(["boom"])


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["history", *argv])


def test_a_flow_run_query_takes_nothing_else_and_is_made_the_tenants() -> None:
    args = _args("--flow-run", "etl@manual:k", "--tenant", "acme")
    assert _checked(args) == []
    assert args.flow_run == "acme/etl@manual:k"
    for extra in (["etl"], ["--status", "FAILED"], ["--since", "1h"], ["--run", "etl@1"]):
        with pytest.raises(SpecError, match=r"--(flow-)?run takes no"):
            _checked(_args("--flow-run", "etl@manual:k", *extra))
    with pytest.raises(SpecError, match="--flow-run FLOW_RUN_ID"):
        _checked(_args())


def test_an_outcome_is_three_rows_and_a_tenants_hour_is_indexed_once() -> None:
    from cronstream.consumers.history import INDEX_TTL_MARGIN_S, TENANT_HOURS_KEPT, HistoryTables
    from cronstream.schemas.events import RunOutcome, RunStatus
    from tests.processors import SchemaSession

    tables = HistoryTables(SchemaSession(), "ks", ttl_s=3600)

    def outcome(tenant: str, at: datetime, status: RunStatus = RunStatus.SUCCEEDED) -> RunOutcome:
        return RunOutcome(
            run_id=f"{tenant}/j@{at.isoformat()}",
            job_id=f"{tenant}/j",
            tenant=tenant,
            status=status,
            scheduled_at=at,
            recorded_at=at,
        )

    first = [table for table, _ in tables.rows(outcome("acme", T))]
    assert first == ["runs_by_id", "runs_by_tenant_status", "runs_by_job", "history_tenants"]
    again = [table for table, _ in tables.rows(outcome("acme", T + timedelta(minutes=1)))]
    assert again == ["runs_by_id", "runs_by_tenant_status", "runs_by_job"]
    # rows that cannot be built (the sink dead-letters the record) index nothing
    bad = replace(outcome("gamma", T), duration_ms=2**70)
    with pytest.raises(struct.error):
        tables.rows(bad)
    assert "history_tenants" in [table for table, _ in tables.rows(outcome("gamma", T))]
    other = [table for table, _ in tables.rows(outcome("beta", T, RunStatus.DUPLICATE))]
    assert other == ["runs_by_id", "runs_by_tenant_status", "history_tenants"]
    # a status of its own: a failure search reads only the tenants that failed
    ttl = 3600 + INDEX_TTL_MARGIN_S  # outlives the hour's last outcome row
    failed = tables.rows(outcome("acme", T + timedelta(minutes=3), RunStatus.FAILED))
    assert ("history_tenants", (hour_of(T), "FAILED", "acme", ttl)) in failed
    # the next hours index acme again; after TENANT_HOURS_KEPT more, T's hour is forgotten
    for hours in range(1, TENANT_HOURS_KEPT + 1):
        rows = tables.rows(outcome("acme", T + timedelta(hours=hours)))
        index = (hour_of(T + timedelta(hours=hours)), "SUCCEEDED", "acme", ttl)
        assert ("history_tenants", index) in rows
    late = tables.rows(outcome("acme", T + timedelta(minutes=2)))
    assert ("history_tenants", (hour_of(T), "SUCCEEDED", "acme", ttl)) in late
