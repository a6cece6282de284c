"""Records for tests, with the fields a test does not look at filled in the same way
everywhere: a test passes what it checks (``definition(paused=True)``,
``run_request("j@1", priority=Priority.HIGH)``,
``outcome("j@1", status=RunStatus.FAILED)``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cronstream.schemas.events import (
    CronSchedule,
    JobDefinition,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
)

T0 = datetime(2026, 11, 22, 10, tzinfo=UTC)
HTTP = Target(type="http", url="https://e.x/h")
PYTHON = Target(type="python", callable="m:f")


def definition(job_id: str = "j", **fields: Any) -> JobDefinition:
    """A job every five minutes to ``HTTP``, defined at ``T0``."""
    fields.setdefault("schedule", CronSchedule(expression="*/5 * * * *"))
    fields.setdefault("target", HTTP)
    fields.setdefault("updated_at", T0)
    return JobDefinition(job_id=job_id, **fields)


def run_request(run_id: str, **fields: Any) -> RunRequest:
    """Run ``run_id`` of the job named before its ``@``: a ``PYTHON`` target, scheduled
    and fired at ``T0``."""
    fields.setdefault("job_id", run_id.split("@", maxsplit=1)[0])
    fields.setdefault("scheduled_at", T0)
    fields.setdefault("fired_at", fields["scheduled_at"])
    fields.setdefault("target", PYTHON)
    return RunRequest(run_id=run_id, **fields)


def outcome(run_id: str, **fields: Any) -> RunOutcome:
    """Run ``run_id`` of the job named before its ``@`` SUCCEEDED: scheduled at ``T0``
    and recorded when it was scheduled."""
    fields.setdefault("job_id", run_id.split("@", maxsplit=1)[0])
    fields.setdefault("status", RunStatus.SUCCEEDED)
    fields.setdefault("scheduled_at", T0)
    fields.setdefault("recorded_at", fields["scheduled_at"])
    return RunOutcome(run_id=run_id, **fields)
