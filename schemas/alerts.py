"""Alerts (``cronstream.alerts``): what the workers raise when a scheduled run has not
succeeded by its job's deadline, and clear when it succeeds late."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from cronstream.schemas.avro import KeyedByJob
from cronstream.schemas.headers import record_headers
from cronstream.schemas.instants import to_ms


class AlertKind(StrEnum):
    DEADLINE_MISSED = "DEADLINE_MISSED"
    DEADLINE_CLEARED = "DEADLINE_CLEARED"


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert(KeyedByJob):
    """A scheduled run's deadline missed, or that alert cleared (``cronstream.alerts``)."""

    AVRO_NAME: ClassVar[str] = "cronstream.Alert"

    alert_id: str
    kind: AlertKind
    job_id: str
    run_id: str
    scheduled_at: datetime
    deadline_at: datetime
    raised_at: datetime
    late_ms: int
    last_status: str
    tenant: str = "default"
    attempt: int = 0
    worker: str | None = None

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "Alert",
            ("kind", self.kind.value),
            ("job_id", self.job_id),
            ("run_id", self.run_id),
            ("late_ms", str(self.late_ms)),
        )


def deadline_alert_id(run_id: str) -> str:
    """The ``alert_id`` of a run's deadline alerts: one per run, missed and cleared alike
    (whoever raises them: the worker for a job, the flows coordinator for a flow)."""
    return f"{run_id}:deadline"


def deadline_alert(  # noqa: PLR0913 - the Alert record's fields but the two it derives
    kind: AlertKind,
    *,
    job_id: str,
    run_id: str,
    tenant: str,
    scheduled_at: datetime,
    deadline_at: datetime,
    raised_at: datetime,
    last_status: str,
    worker: str,
    attempt: int = 0,
) -> Alert:
    """A run's deadline alert, missed or cleared, raised at ``raised_at``: its run's
    ``alert_id``, late by the time from the deadline to then (0 when not late)."""
    return Alert(
        alert_id=deadline_alert_id(run_id),
        kind=kind,
        job_id=job_id,
        run_id=run_id,
        tenant=tenant,
        scheduled_at=scheduled_at,
        deadline_at=deadline_at,
        raised_at=raised_at,
        late_ms=max(0, to_ms(raised_at) - to_ms(deadline_at)),
        last_status=last_status,
        attempt=attempt,
        worker=worker,
    )
