"""The dashboard's "late and stuck" list: what the dashboard can know of runs that are
late or stuck, and what it cannot (the page says both).

- **Running past its timeout**, from history: attempts whose STARTED record (a worker
  writes one once an attempt has run ``--started-after``, 1 s by default) has no
  final outcome and no later attempt, and began longer ago than its timeout plus
  ``GRACE_S`` (the worker ends an attempt at its timeout: one still open is a worker
  that died or hangs). Looked for among the STARTED records of the last
  ``WINDOW_H`` hours, at most ``CHECKED`` of them (each one run's records read).
- **Held or waiting**, from Prometheus: fires deferred by a tenant's fire rate (last
  10 minutes), runs the workers hold until their due time (the scheduler's
  lookahead: normal), scheduler partitions no scheduler owns (their fires wait for an
  owner), consumer lag (run requests and outcomes not read yet), the start skew p99
  (how late attempts start), deadlines missed in the last hour.

A tenant sees its own runs and its own deferred fires, and the stack's health figures
as its overview shows them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from cronstream.api.backend import Backend
from cronstream.schemas.events import RunOutcome, to_ms, utc_now
from cronstream.ui.flow_view import node_of
from cronstream.ui.pages import Back, Viewer, Who, mine, own_id, render
from cronstream.ui.prom import STUCK_QUERIES, ask, one
from cronstream.ui.sources import FlowBook

router = APIRouter(prefix="/ui")
WINDOW_H = 6  # hours of STARTED records looked through
CHECKED = 100  # STARTED records whose run is read, at most
GRACE_S = 60.0  # past the timeout before an open attempt is called stuck
UNKNOWN_TIMEOUT_S = 3600.0  # an attempt whose job (and so timeout) is gone
LAG_LATE = 1000  # records behind before a group's lag is flagged


def overdue(
    started: RunOutcome, records: Sequence[RunOutcome], timeout_ms: int | None, now: datetime
) -> float | None:
    """Seconds ``started`` (a STARTED record) is past its timeout and grace, or None:
    not past them, or ended (a final record of the attempt, or a later attempt, among
    ``records``: every record of its run)."""
    for record in records:
        if record.attempt > started.attempt:
            return None
        if record.attempt == started.attempt and record.status.value != "STARTED":
            return None
    began = (
        next(
            (
                r.started_at
                for r in records
                if r.attempt == started.attempt and r.started_at is not None
            ),
            None,
        )
        or started.recorded_at
    )
    limit_s = UNKNOWN_TIMEOUT_S if timeout_ms is None else timeout_ms / 1000 + GRACE_S
    past = (to_ms(now) - to_ms(began)) / 1000 - limit_s
    return past if past > 0 else None


def timeout_of(backend: Backend, book: FlowBook | None, row: RunOutcome) -> int | None:
    """An attempt's timeout: its flow node's, or its job's (None: neither known)."""
    head, _, rest = row.run_id.rpartition("@")  # a node run: FLOW@slot/NODE[~rN]
    slot, node_run, _ = rest.partition("/")
    flow = book.flows.get(head) if book is not None and node_run else None
    found = node_of(f"{head}@{slot}", row.run_id) if flow is not None else None
    if flow is not None and found is not None:
        return {n.name: n.timeout_ms for n in flow.nodes}.get(found[0])
    job = backend.view.jobs.get(row.job_id)
    return None if job is None else job.timeout_ms


def _stuck_runs(
    backend: Backend, book: FlowBook | None, who: Viewer
) -> tuple[list[dict[str, Any]], int, str | None]:
    """The attempts running past their timeout, how many STARTED records were checked,
    and why history could not be read."""
    assert backend.history is not None
    now = utc_now()
    try:
        rows = backend.history.by_status(
            ["STARTED"], now - timedelta(hours=WINDOW_H), now, who.tenant
        )
        started = list(islice(mine(who, rows), CHECKED))
        out = []
        for row in started:
            past = overdue(
                row, backend.history.run(row.run_id), timeout_of(backend, book, row), now
            )
            if past is not None:
                out.append(
                    {
                        "run_id": own_id(who, row.run_id),
                        "job": own_id(who, row.job_id),
                        "attempt": row.attempt,
                        "past": f"{past:.0f} s",
                        "at": row.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
                        "worker": row.worker or "-",
                    }
                )
    except Exception as exc:  # the driver's NoHostAvailable, timeouts: shown
        return [], 0, f"history unavailable ({exc})"
    return out, len(started), None


@router.get("/stuck", response_class=HTMLResponse)
def stuck(request: Request, who: Who, backend: Back) -> HTMLResponse:
    runs, checked, history_error = _stuck_runs(backend, request.app.state.flows, who)
    answers, error = ask(request.app.state.prometheus, STUCK_QUERIES)
    owned, partitions = one(answers, "owned"), one(answers, "partitions")
    unowned = None if partitions is None else int(partitions - (owned or 0))
    deferred = {
        m.get("tenant", "?"): v
        for m, v in answers["deferred"]
        if who.tenant in (None, m.get("tenant"))
    }
    lag = {m.get("role", "?"): v for m, v in answers["lag"]}
    skew = one(answers, "skew")
    return render(
        request,
        "stuck.html",
        who,
        runs=runs,
        checked=checked,
        history_error=history_error,
        error=error,
        unowned=unowned,
        partitions=partitions,
        deferred=deferred,
        lag=lag,
        lag_late=LAG_LATE,
        held=one(answers, "held"),
        skew_ms=None if skew is None else skew * 1000,
        missed=one(answers, "missed"),
        window_h=WINDOW_H,
        limit=CHECKED,
        grace_s=GRACE_S,
        updated=time.strftime("%H:%M:%S"),
    )
