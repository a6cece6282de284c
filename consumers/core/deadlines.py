"""Deadline checks on the worker (pure: it takes ``now``).

A job with a ``deadline`` makes the scheduler write, with each run it fires, a timer due
at slot + deadline. Due, the timer fires a run request with trigger DEADLINE: not a run,
the check. It lands on the job's partition after the run itself, so the worker owning
that partition, which knows from dedup (its own outcomes, and history replayed after an
assignment) how each run of it ended, answers it:

- the run SUCCEEDED: nothing;
- otherwise: a DEADLINE_MISSED alert (how late, the run's last status: NOT_STARTED,
  RUNNING, FAILED (retrying), DEAD_LETTERED or CANCELED), once per run id;
- that run succeeding later on this worker: a DEADLINE_CLEARED alert with the same
  ``alert_id``.

A check fires at its deadline and is answered when read (the partition's earlier
records first); a run that succeeds in between counts as succeeded. The check's
``fired_at`` is its deadline (the scheduler keeps it so).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from cronstream.consumers.core.dedup import Dedup
from cronstream.schemas.alerts import Alert, AlertKind, deadline_alert
from cronstream.schemas.events import RunRequest, from_ms, to_ms


class Deadlines:
    def __init__(self, dedup: Dedup, *, name: str) -> None:
        self.dedup = dedup
        self.name = name
        self.alerted: dict[str, Alert] = {}  # run id -> its DEADLINE_MISSED, until cleared

    def check(self, check: RunRequest, now_ms: int, *, running: bool) -> Alert | None:
        """The alert a deadline check raises (None: the run succeeded, or its alert was
        raised already)."""
        run_id = check.run_id
        if run_id in self.alerted:
            return None  # a check fired again (the scheduler's failover): one alert
        final, attempt = self.dedup.status(run_id)
        if final == "SUCCEEDED":
            return None
        if final:
            last = final
        elif running:
            last = "RUNNING"
        else:
            last = "FAILED (retrying)" if attempt else "NOT_STARTED"
        alert = deadline_alert(
            AlertKind.DEADLINE_MISSED,
            job_id=check.job_id,
            run_id=run_id,
            tenant=check.tenant,
            scheduled_at=check.scheduled_at,
            deadline_at=check.fired_at,
            raised_at=from_ms(now_ms),
            last_status=last,
            attempt=attempt,
            worker=self.name,
        )
        self.alerted[run_id] = alert
        return alert

    def succeeded(self, run_id: str, attempt: int, now_ms: int) -> Alert | None:
        """``run_id`` succeeded: the clearing of its alert, if this worker raised one."""
        alert = self.alerted.pop(run_id, None)
        if alert is None:
            return None
        late = max(0, now_ms - to_ms(alert.deadline_at))
        return replace(
            alert,
            kind=AlertKind.DEADLINE_CLEARED,
            raised_at=from_ms(now_ms),
            late_ms=late,
            last_status="SUCCEEDED",
            attempt=attempt,
        )

    def forget(self, before: datetime) -> None:
        """Drop alerts raised before ``before`` (the worker's dedup lookback)."""
        self.alerted = {k: a for k, a in self.alerted.items() if a.raised_at >= before}
