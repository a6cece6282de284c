"""Outcomes as the history tests write them: a job's runs with the records workers and
schedulers publish (STARTED, FAILED and retried, SUCCEEDED, DUPLICATE, MISSED), and how
they are written to the history tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cronstream.consumers.history import HistoryTables
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunOutcome, RunStatus, Trigger, from_ms


def write_history(settings: Settings, outcomes: Iterable[RunOutcome]) -> None:
    """``outcomes`` in the history tables, through the sink's own path
    (``HistoryTables.rows``)."""
    cluster, session = cassandra_session(settings, keyspace=settings.keyspace)
    try:
        tables = HistoryTables(session, settings.keyspace, ttl_s=3600)
        for _table, statement in (row for o in outcomes for row in tables.rows(o)):
            session.execute(statement)
    finally:
        cluster.shutdown()


def runs_of(job: str, count: int, start_ms: int, step_ms: int = 1000) -> list[RunOutcome]:
    """Varied outcomes: every run STARTED + SUCCEEDED (the same millisecond), every
    fifth failing attempt 1 first, every seventh redelivered (DUPLICATE), one MISSED."""
    out = [o for i in range(count) for o in _one_run(job, i, start_ms + i * step_ms)]
    missed = from_ms(start_ms - 1000)
    out.append(
        RunOutcome(
            run_id=f"{job}@missed",
            job_id=job,
            status=RunStatus.MISSED,
            scheduled_at=missed,
            recorded_at=from_ms(start_ms),
        )
    )
    return out


def attempt_records(
    base: dict[str, Any], status: RunStatus, started_ms: int, finished_ms: int, **more: Any
) -> list[RunOutcome]:
    """An attempt's two records, as a worker writes them: STARTED at ``started_ms``, then
    ``status`` at ``finished_ms`` with its start, end and duration (and ``more``)."""
    started, finished = from_ms(started_ms), from_ms(finished_ms)
    return [
        RunOutcome(**base, status=RunStatus.STARTED, recorded_at=started),
        RunOutcome(
            **base,
            status=status,
            recorded_at=finished,
            started_at=started,
            finished_at=finished,
            duration_ms=finished_ms - started_ms,
            **more,
        ),
    ]


def _one_run(job: str, i: int, at: int) -> list[RunOutcome]:
    """The records of run ``i`` of ``runs_of``, scheduled at ``at`` (ms)."""
    base = dict(
        run_id=f"{job}@{i}", job_id=job, scheduled_at=from_ms(at), target_type="http", worker="w1"
    )
    out = []
    attempt = 1
    if i % 5 == 0:
        failed = {"error": "HttpError: 500", "next_attempt_at": from_ms(at + 50)}
        out += attempt_records(base, RunStatus.FAILED, at + 1, at + 5, **failed)
        attempt = 2
    trigger = Trigger.RETRY if attempt == 2 else Trigger.SCHEDULE
    again = dict(base, attempt=attempt, trigger=trigger)
    out += attempt_records(again, RunStatus.SUCCEEDED, at + 60, at + 60)
    if i % 7 == 0:
        out.append(
            RunOutcome(
                **base,
                status=RunStatus.DUPLICATE,
                attempt=attempt,
                recorded_at=from_ms(at + 60 + 900),
                error="already executed (see history)",
            )
        )
    return out
