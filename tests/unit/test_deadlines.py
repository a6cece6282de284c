"""The worker's deadline checks (consumers.core.deadlines) and what dedup tells them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cronstream.consumers.core.deadlines import Deadlines
from cronstream.consumers.core.dedup import Dedup
from cronstream.schemas.alerts import AlertKind
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import RunRequest, Target, Trigger, from_ms

SLOT = 1_800_000_000_000
DEADLINE = SLOT + 60_000


def _check(run_id: str = "j@1") -> RunRequest:
    return RunRequest(
        run_id=run_id,
        job_id="j",
        scheduled_at=from_ms(SLOT),
        fired_at=from_ms(DEADLINE),
        trigger=Trigger.DEADLINE,
        target=Target(type="python", callable="m:f"),
        tenant="acme",
    )


def _deadlines() -> tuple[Deadlines, Dedup]:
    dedup = Dedup(3_600_000, 1_000_000, now_ms=SLOT)
    return Deadlines(dedup, name="w1"), dedup


def test_dedup_tells_a_runs_final_status_and_highest_finished_attempt() -> None:
    dedup = Dedup(3_600_000, 1_000_000, now_ms=SLOT)
    assert dedup.status("r") == ("", 0)
    dedup.note("r", 1, "FAILED")
    assert dedup.status("r") == ("", 1)
    assert not dedup.seen("r", 2)
    assert dedup.seen("r", 1)
    dedup.note("r", 2, "SUCCEEDED")
    assert dedup.status("r") == ("SUCCEEDED", 2)
    assert dedup.seen("r", 5)  # settled: every attempt is a duplicate
    dedup.note("x", 1, "STARTED")  # not an end: nothing kept
    assert dedup.status("x") == ("", 0)
    dedup.note("d", 3, "DEAD_LETTERED")
    assert dedup.status("d") == ("DEAD_LETTERED", 3)


def test_a_run_that_succeeded_raises_nothing() -> None:
    deadlines, dedup = _deadlines()
    dedup.note("j@1", 1, "SUCCEEDED")
    assert deadlines.check(_check(), DEADLINE + 5, running=False) is None


@pytest.mark.parametrize(
    ("noted", "running", "last"),
    [
        (None, False, "NOT_STARTED"),
        (None, True, "RUNNING"),
        ("FAILED", False, "FAILED (retrying)"),
        ("DEAD_LETTERED", False, "DEAD_LETTERED"),
        ("CANCELED", False, "CANCELED"),
    ],
)
def test_a_run_not_succeeded_raises_one_alert_with_its_last_status(
    noted: str | None, running: bool, last: str
) -> None:
    deadlines, dedup = _deadlines()
    if noted:
        dedup.note("j@1", 1, noted)
    alert = deadlines.check(_check(), DEADLINE + 250, running=running)
    assert alert is not None
    assert (alert.kind, alert.last_status, alert.late_ms, alert.tenant) == (
        AlertKind.DEADLINE_MISSED,
        last,
        250,
        "acme",
    )
    assert alert.deadline_at == from_ms(DEADLINE)
    assert alert.scheduled_at == from_ms(SLOT)
    assert deadlines.check(_check(), DEADLINE + 900, running=running) is None  # fired again


def test_a_late_success_clears_the_alert_once() -> None:
    deadlines, _ = _deadlines()
    missed = deadlines.check(_check(), DEADLINE + 10, running=True)
    assert deadlines.succeeded("other@1", 1, DEADLINE + 20) is None  # never alerted
    cleared = deadlines.succeeded("j@1", 2, DEADLINE + 3000)
    assert missed is not None
    assert cleared is not None
    assert (cleared.kind, cleared.alert_id, cleared.late_ms, cleared.last_status) == (
        AlertKind.DEADLINE_CLEARED,
        missed.alert_id,
        3000,
        "SUCCEEDED",
    )
    assert deadlines.succeeded("j@1", 2, DEADLINE + 4000) is None


def test_alerts_older_than_the_lookback_are_forgotten() -> None:
    deadlines, _ = _deadlines()
    deadlines.check(_check(), DEADLINE, running=False)
    deadlines.forget(from_ms(DEADLINE) - timedelta(seconds=1))
    assert "j@1" in deadlines.alerted
    deadlines.forget(from_ms(DEADLINE) + timedelta(seconds=1))
    assert deadlines.alerted == {}


def test_a_deadline_is_a_positive_duration_of_at_most_seven_days() -> None:
    base = {"id": "j", "every": "1m", "target": "python", "callable": "m:f"}
    assert job_from_spec({**base, "deadline": "90s"}, max_payload_bytes=100).deadline_ms == 90_000
    assert job_from_spec(base, max_payload_bytes=100).deadline_ms is None
    for bad, problem in (
        ("0s", "deadline 0 is out of range"),
        ("8d", "at most 7 days"),
        ("soon", "deadline"),
    ):
        with pytest.raises(SpecError, match=problem):
            job_from_spec({**base, "deadline": bad}, max_payload_bytes=100)
