"""What the API and the dashboard show of a job's triggers (cronstream.api.triggers): the
lag per source partition, the last record matched, the upstream jobs' day."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

from cronstream.api.triggers import (
    UPSTREAM_ROWS,
    Matched,
    PartitionLag,
    TopicLag,
    TriggerStatus,
    Upstream,
    day_bounds,
    last_matched,
    partition_lags,
    upstream_today,
)
from cronstream.schemas.catalog import FLOWS_APP, triggers_group
from cronstream.schemas.events import (
    EventTrigger,
    JobDefinition,
    RunOutcome,
    RunStatus,
    Target,
    Trigger,
)
from cronstream.schemas.ids import dependency_run_id, event_run_id
from cronstream.schemas.tenancy import unqualify

NOW = datetime(2026, 11, 24, 15, 30, tzinfo=UTC)
TODAY = date(2026, 11, 24)


def row(
    run_id: str,
    *,
    job: str = "acme/j",
    trigger: Trigger = Trigger.EVENT,
    status: RunStatus = RunStatus.SUCCEEDED,
    at: datetime = NOW,
    **kw: Any,
) -> RunOutcome:
    return RunOutcome(
        run_id=run_id,
        job_id=job,
        tenant="acme",
        status=status,
        trigger=trigger,
        scheduled_at=at,
        recorded_at=at,
        **kw,
    )


def test_the_lag_is_the_high_watermark_minus_the_trigger_groups_committed_offset() -> None:
    lags = partition_lags(
        {1: (0, 10), 0: (0, 100), 2: (50, 80), 3: (0, 5)}, {0: 40, 1: 10, 2: 20, 3: -1001}
    )
    assert [(p.partition, p.lag) for p in lags] == [(0, 60), (1, 0), (2, 30), (3, None)]
    # Retention deleted past the committed offset: only what is left counts.
    assert lags[2] == PartitionLag(2, 50, 80, 20)
    assert TopicLag("g", "t", lags).total == 90
    assert TopicLag("g", "t", [PartitionLag(0, 0, 9, None)]).total is None
    assert partition_lags({0: (0, 0)}, {}) == [PartitionLag(0, 0, 0, None)]
    assert triggers_group("cs.x") == "cs.x.triggers"


def test_the_last_record_matched_is_the_newest_event_run_with_its_coordinates() -> None:
    first = event_run_id("acme/j", "acme.orders", 2, 17)
    rows = [
        row("acme/j@2026-11-24T15:30:00.000Z", trigger=Trigger.SCHEDULE),  # on: beside cron
        row("acme/j@manual:k", trigger=Trigger.MANUAL),
        row(first, status=RunStatus.FAILED, at=NOW - timedelta(minutes=1)),
        row(event_run_id("acme/j", "acme.orders", 0, 3), at=NOW - timedelta(minutes=2)),
    ]
    assert last_matched(rows) == Matched(
        first, "acme.orders", 2, 17, NOW - timedelta(minutes=1), "FAILED"
    )
    assert last_matched(rows[:2]) is None
    node = row(event_run_id("etl", "files", 0, 5) + "/extract", job="etl", trigger=Trigger.FLOW)
    assert last_matched([node]) is None  # a flow's node run is not the flow's match


def test_an_upstream_succeeded_today_by_the_dependency_processors_rule() -> None:
    day, start, end = day_bounds(NOW)
    assert (day, start, end) == (
        TODAY,
        datetime(2026, 11, 24, tzinfo=UTC),
        datetime(2026, 11, 25, tzinfo=UTC),
    )
    ok = row(
        "acme/x@2026-11-24T02:00:00.000Z",
        job="acme/x",
        trigger=Trigger.SCHEDULE,
        at=start + timedelta(hours=2),
    )
    assert upstream_today("acme/x", True, [ok], TODAY) == Upstream("acme/x", True, True, ok.run_id)
    yesterday = replace(ok, scheduled_at=start - timedelta(hours=1))
    assert upstream_today("acme/x", True, [yesterday], TODAY).succeeded is False
    failed = replace(ok, status=RunStatus.FAILED)
    assert upstream_today("acme/x", False, [failed], TODAY) == Upstream("acme/x", False, False)
    # A flow: its schedule run (target flow) and node runs say nothing; its end does.
    # The end is recorded without a target type, so its row in runs_by_job keeps the
    # schedule run's (flow): found when building, read as its end all the same.
    flow_run = "acme/etl@2026-11-24T01:00:00.000Z"
    started = row(flow_run, job="acme/etl", trigger=Trigger.SCHEDULE, target_type="flow")
    node = row(f"{flow_run}/load", job="acme/etl", trigger=Trigger.FLOW, worker="w1")
    assert upstream_today("acme/etl", True, [started, node], TODAY).succeeded is False
    ended = replace(started, trigger=Trigger.FLOW, worker=FLOWS_APP)
    assert upstream_today("acme/etl", True, [node, ended], TODAY).run_id == flow_run
    # Not found in as many rows as were read: unknown, not "no".
    many = [node] * UPSTREAM_ROWS
    assert upstream_today("acme/etl", True, many, TODAY).succeeded is None


def test_the_answer_names_every_id_as_the_caller_does() -> None:  # long: one story
    job = JobDefinition(
        job_id="acme/j",
        tenant="acme",
        updated_at=NOW,
        target=Target(type="http", url="https://example.com/h"),
        on=EventTrigger(topic="acme.orders", filter="value.n > 1"),
    )
    run_id = event_run_id("acme/j", "acme.orders", 1, 9)
    status = TriggerStatus(
        job=job,
        lag=TopicLag(
            "p.triggers", "acme.orders", [PartitionLag(0, 0, 5, 2), PartitionLag(1, 0, 10, None)]
        ),
        matched=Matched(run_id, "acme.orders", 1, 9, NOW, "SUCCEEDED"),
    )

    def own(stored: str) -> str:
        return unqualify("acme", stored) or stored

    answer = status.as_json(own)
    assert answer["job_id"] == "j"
    assert answer["describe"] == "on acme.orders if value.n > 1"
    assert answer["on"] == {
        "topic": "acme.orders",
        "group": "p.triggers",
        "lag": 3,
        "lag_error": None,
        "partitions": [
            {"partition": 0, "start": 0, "end": 5, "committed": 2, "lag": 3},
            {"partition": 1, "start": 0, "end": 10, "committed": None, "lag": None},
        ],
        "last_matched": {
            "run_id": "j@evt:acme.orders:1:9",
            "topic": "acme.orders",
            "partition": 1,
            "offset": 9,
            "record_time": "2026-11-24T15:30:00.000Z",
            "status": "SUCCEEDED",
        },
    }
    assert "after" not in answer
    dependent = replace(job, on=None, after=("acme/x", "acme/y"))
    today = row(dependency_run_id("acme/j", TODAY), trigger=Trigger.DEPENDENCY)
    waiting = TriggerStatus(
        job=dependent,
        day=TODAY,
        today=today,
        upstream=(
            Upstream("acme/x", True, True, "acme/x@manual:k"),
            Upstream("acme/y", False, False),
        ),
    )
    assert waiting.as_json(own)["after"] == {
        "date": "2026-11-24",
        "jobs": [
            {"job_id": "x", "known": True, "succeeded": True, "run_id": "x@manual:k"},
            {"job_id": "y", "known": False, "succeeded": False, "run_id": None},
        ],
        "run": {"run_id": "j@dep:2026-11-24", "status": "SUCCEEDED"},
    }
    assert "on" not in waiting.as_json(own)
    broken = replace(status, history_error="history unavailable (x)")
    assert broken.as_json(own)["history_error"] == "history unavailable (x)"
