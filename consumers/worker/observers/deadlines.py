"""A job's deadline checks answered on the worker (the decisions: ``consumers.core.
deadlines``): a DEADLINE_MISSED alert on ``cronstream.alerts`` when the run has not
succeeded, a DEADLINE_CLEARED alert when it succeeds later on this worker. A flow's
checks are the coordinator's (``flows.FlowNodes``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from cronstream.consumers.core.deadlines import Deadlines
from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.worker.observers import Record
from cronstream.runtime import metrics
from cronstream.schemas.alerts import Alert
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import RunRequest, RunStatus
from cronstream.schemas.tenancy import AnyEvent

log = logging.getLogger("cronstream.worker")


class DeadlineAlerts:
    """The ``OutcomeObserver`` of deadlines: reads how each run ended from ``dedup``
    (which the outbox updates before it asks)."""

    def __init__(self, topics: Topics, dedup: Dedup, *, name: str) -> None:
        self.topic = topics.alerts
        self.deadlines = Deadlines(dedup, name=name)

    def written(self) -> Sequence[tuple[str, type[AnyEvent]]]:
        return [(self.topic, Alert)]

    def settled(
        self,
        run: RunRequest,
        status: RunStatus,
        error: str | None,
        *,
        retrying: bool,
        now_ms: int,
    ) -> Sequence[Record]:
        """A late success: its DEADLINE_MISSED alert, if this worker raised one, cleared."""
        if status is not RunStatus.SUCCEEDED or not self.deadlines.alerted:
            return ()
        cleared = self.deadlines.succeeded(run.run_id, run.attempt, now_ms)
        if cleared is None:
            return ()
        metrics.deadline_alerts.labels(cleared.kind.value).inc()
        return [(self.topic, cleared)]

    def checked(self, check: RunRequest, *, running: bool, now_ms: int) -> Sequence[Record]:
        """A job's deadline check: an alert unless its run succeeded (or was alerted)."""
        if check.target.type == "flow":
            return ()
        alert = self.deadlines.check(check, now_ms, running=running)
        if alert is None:
            return ()
        log.warning(
            "run %s missed its deadline by %d ms (%s)",
            alert.run_id,
            alert.late_ms,
            alert.last_status,
        )
        metrics.deadline_alerts.labels(alert.kind.value).inc()
        return [(self.topic, alert)]

    def forget(self, before: datetime) -> None:
        self.deadlines.forget(before)
