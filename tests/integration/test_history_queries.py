"""The history's queries against the real Cassandra: across day and hour buckets, paged;
an operator's status query across every tenant (and the rows sinks of an older release
wrote); a tenant's history is its own."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from cronstream.consumers.core.buckets import hour_of, shard_of
from cronstream.consumers.history import History, HistoryTables
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunStatus, to_ms
from tests.integration.helpers import cronstream
from tests.integration.history_runs import runs_of

pytestmark = pytest.mark.integration


def test_queries_cross_day_and_hour_buckets_and_page(
    history_ns: Settings, session: Any
) -> None:  # long: one table of rows, then its queries
    ns = history_ns
    tables = HistoryTables(session, ns.keyspace, ttl_s=3600 * 24 * 30)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = midnight - timedelta(hours=20)  # 04:00 yesterday .. 20:00 today: 3 days touched
    every = runs_of("pager", 1200, to_ms(start), step_ms=60_000)
    for _table, statement in (row for o in every for row in tables.rows(o)):
        session.execute(statement)
    history = History(session, ns.keyspace, page_size=100)

    # A window across midnight, exactly the slots in it, latest first.
    lo, hi = midnight - timedelta(minutes=90), midnight + timedelta(minutes=45)
    found = list(history.job_runs("pager", lo, hi))
    slots = [o for o in every if lo <= o.scheduled_at < hi and o.status is RunStatus.SUCCEEDED]
    assert [(r.run_id, r.attempt) for r in found if r.status == "SUCCEEDED"] == [
        (o.run_id, o.attempt) for o in sorted(slots, key=lambda o: o.scheduled_at, reverse=True)
    ]
    assert [r.scheduled_at for r in found] == sorted((r.scheduled_at for r in found), reverse=True)

    # All 1200 slots (12 pages) across three day partitions, every attempt once.
    whole = list(history.job_runs("pager", start - timedelta(hours=1), start + timedelta(days=2)))
    assert len(whole) == 1200 + 240 + 1  # attempts (1 + the failed firsts) + the MISSED slot
    assert len({(r.run_id, r.attempt) for r in whole}) == len(whole)

    # Failures over hour buckets and shards, merged latest first, paged 7 at a time.
    history.page_size = 7
    f_lo, f_hi = start + timedelta(hours=2, minutes=30), start + timedelta(hours=5, minutes=10)
    failed = list(history.by_status(["FAILED"], f_lo, f_hi))
    want = sorted(
        (o for o in every if o.status is RunStatus.FAILED and f_lo <= o.recorded_at < f_hi),
        key=lambda o: o.recorded_at,
        reverse=True,
    )
    assert [r.run_id for r in failed] == [o.run_id for o in want]
    assert len(want) > 7 * 4
    assert {r.error for r in failed} == {"HttpError: 500"}

    # One run: every record, attempt by attempt.
    records = history.run("pager@10")
    assert [(r.attempt, r.status) for r in records] == [
        (1, "STARTED"),
        (1, "FAILED"),
        (2, "STARTED"),
        (2, "SUCCEEDED"),
    ]
    assert records[1].next_attempt_at is not None
    assert records[3].duration_ms == 0

    # The CLI over the same rows: paging through more than one page, JSON lines.
    window = ["--from", lo.isoformat(), "--to", hi.isoformat()]
    cli = cronstream(ns, "history", "pager", *window, "--json", "--limit", "0", "--page-size", "50")
    assert cli.returncode == 0, cli.stderr
    assert len(cli.stdout.splitlines()) == len(found)
    limited = cronstream(ns, "history", "pager", *window, "--limit", "5")
    assert limited.returncode == 0
    assert len(limited.stdout.splitlines()) == 6
    assert "more than 5 rows" in limited.stderr
    one = cronstream(ns, "history", "--run", "pager@10")
    assert one.returncode == 0, one.stderr
    assert "HttpError: 500" in one.stdout
    assert cronstream(ns, "history", "--run", "nope").returncode == 4
    bad = cronstream(ns, "history", "pager", "--status", "exploded")
    assert bad.returncode == 2
    assert "unknown status EXPLODED" in bad.stderr


def test_an_operators_status_query_reads_every_tenant_and_older_sinks_rows(
    history_ns: Settings, session: Any
) -> None:
    """An operator's status query (every tenant) merges the partitions of the (status,
    tenant) pairs history_tenants names for each hour, and the runs_by_status rows of the
    pairs it does not name: outcomes sinks of an older release wrote (to runs_by_status
    and runs_by_tenant_status, without the index), in hours of their own or in an hour
    the new sinks wrote too. Each outcome once."""
    ns = history_ns
    tables = HistoryTables(session, ns.keyspace, ttl_s=3600)
    now = datetime.now(UTC).replace(minute=30)
    recent = [
        replace(o, tenant=tenant, job_id=f"{tenant}/j")
        for tenant in ("acme", "beta", "gamma")
        for o in runs_of(f"{tenant}/j", 10, to_ms(now - timedelta(minutes=20)))
    ]
    for _table, statement in (row for o in recent for row in tables.rows(o)):
        session.execute(statement)
    old_hour = runs_of("old/j", 10, to_ms(now - timedelta(hours=3)))
    same_hour = [
        replace(o, tenant="delta", job_id="delta/j")
        for o in runs_of("delta/j", 10, to_ms(now - timedelta(minutes=25)))
    ]
    columns = "recorded_at, run_id, attempt, job_id, tenant, trigger, scheduled_at"
    by_status = session.prepare(
        f"INSERT INTO runs_by_status (status, hour, shard, {columns}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    by_tenant = session.prepare(
        f"INSERT INTO runs_by_tenant_status (status, hour, shard, {columns}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    for o in old_hour + same_hour:  # as an older sink wrote them
        bucket = (o.status.value, hour_of(o.recorded_at), shard_of(o.run_id), o.recorded_at)
        keys = (o.run_id, o.attempt, o.job_id, o.tenant, o.trigger.value, o.scheduled_at)
        session.execute(by_status, (*bucket, *keys))
        session.execute(by_tenant, (*bucket, *keys))
    history = History(session, ns.keyspace, page_size=5)
    failed = list(history.by_status(["FAILED"], now - timedelta(hours=4), now))
    want = [o for o in recent + old_hour + same_hour if o.status is RunStatus.FAILED]
    assert sorted((r.run_id, r.tenant) for r in failed) == sorted(
        (o.run_id, o.tenant) for o in want
    )
    assert [r.recorded_at for r in failed] == sorted((r.recorded_at for r in failed), reverse=True)
    assert {r.tenant for r in failed} == {"acme", "beta", "gamma", "delta", "default"}
    named = history.tenants_of(hour_of(recent[0].recorded_at))
    assert sorted(who for status, who in named if status == "FAILED") == ["acme", "beta", "gamma"]


def test_a_tenants_history_is_its_own_and_status_queries_need_a_tenant(
    history_ns: Settings, session: Any
) -> None:
    """The tenant is part of every history query: a tenant's job ids are
    stored as tenant/id, and --status across jobs needs --tenant or --all-tenants."""
    ns = history_ns
    tables = HistoryTables(session, ns.keyspace, ttl_s=3600)
    start = datetime.now(UTC) - timedelta(minutes=30)
    mine = [replace(o, tenant="acme") for o in runs_of("acme/x", 20, to_ms(start))]
    theirs = [replace(o, tenant="beta") for o in runs_of("beta/y", 20, to_ms(start))]
    for _table, statement in (row for o in mine + theirs for row in tables.rows(o)):
        session.execute(statement)
    window = ["--since", "1h", "--json", "--limit", "0"]

    def rows(*args: str) -> list[dict[str, Any]]:
        run = cronstream(ns, "history", *args, *window)
        assert run.returncode == 0, run.stderr
        return [json.loads(line) for line in run.stdout.splitlines()]

    assert {r["job_id"] for r in rows("x", "--tenant", "acme")} == {"acme/x"}
    failed = rows("--status", "failed", "--tenant", "beta")
    assert failed
    assert {(r["job_id"], r["tenant"]) for r in failed} == {("beta/y", "beta")}
    every = rows("--status", "failed", "--all-tenants")
    assert {r["tenant"] for r in every} == {"acme", "beta"}
    one = cronstream(
        ns, "history", "--run", mine[0].run_id.removeprefix("acme/"), "--tenant", "acme", "--json"
    )
    assert one.returncode == 0, one.stderr
    # beta has no job x: acme's run is not in its reach.
    assert (
        cronstream(
            ns, "history", "--run", mine[0].run_id.removeprefix("acme/"), "--tenant", "beta"
        ).returncode
        == 4
    )
    assert rows("x", "--tenant", "beta") == []
    unscoped = cronstream(ns, "history", "--status", "failed", "--since", "1h")
    assert unscoped.returncode == 2
    assert "--status across jobs needs --tenant T or --all-tenants" in unscoped.stderr
