"""The dashboard's tenant pages: the tenants (an operator's list) and one tenant's page:
its jobs and flows, its quotas used, its fires deferred by its fire rate, its failing
jobs. A tenant sees its own page only (another's is "no tenant", 404).

Where each figure comes from: jobs and flows from the jobs and flows topics (as the
admission counts them: the job quota's count); manual runs accepted in the last
minute, commands refused and fires deferred from Prometheus (the admission's and the
schedulers' counters); failing jobs from history (failed, timed-out and dead-lettered
attempts in the last 24 hours) and the workers' failure streaks. The quotas' limits are
the admission's and the scheduler's flags: the dashboard cannot ask them, so it shows
the values their settings (``runtime.options.roles``) have in its own environment (the
defaults unless the deployment sets them for every role alike)."""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from itertools import islice
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from cronstream.api.backend import Backend
from cronstream.runtime.options.roles import (
    TENANT_FIRE_RATES,
    TENANT_FIRES_PER_SECOND,
    TENANT_MAX_EVENT_JOBS,
    TENANT_MAX_JOBS,
    TENANT_TRIGGERS_PER_SECOND,
)
from cronstream.schemas.events import RunOutcome, utc_now
from cronstream.schemas.redact import redact_text
from cronstream.schemas.tenancy import tenant_problems
from cronstream.ui.pages import Back, Viewer, Who, mine, own_id, render
from cronstream.ui.prom import ask, one, tenant_queries
from cronstream.ui.sources import FlowBook

router = APIRouter(prefix="/ui")
FAILURES = ("FAILED", "TIMED_OUT", "DEAD_LETTERED")
FAILURE_ROWS = 1000  # of the last 24 hours read for the failing jobs


def limits(tenant: str) -> dict[str, float]:
    """The tenant's quotas as this process's environment gives them (the tenant limits'
    settings, the admission's and the scheduler's defaults otherwise); rates per second."""
    rate = float(TENANT_FIRES_PER_SECOND.get())
    for item in TENANT_FIRE_RATES.get():
        name, _, value = item.partition("=")
        if name.strip() == tenant:
            rate = float(value)
    return {
        "max_jobs": TENANT_MAX_JOBS.get(),
        "max_event_jobs": TENANT_MAX_EVENT_JOBS.get(),
        "triggers_per_second": TENANT_TRIGGERS_PER_SECOND.get(),
        "fires_per_second": 0.0 if tenant == "default" else rate,
    }


@router.get("/tenants", response_class=HTMLResponse, response_model=None)
def tenants(request: Request, who: Who, backend: Back) -> HTMLResponse | RedirectResponse:
    """Every tenant with jobs (an operator's view); a tenant goes to its own page."""
    if who.tenant is not None:
        return RedirectResponse(f"/ui/tenants/{who.tenant}", status_code=303)
    counts = backend.view.counts
    rows = [{"name": t, "jobs": n} for t, n in sorted(counts.items()) if n > 0]
    return render(request, "tenants.html", who, rows=rows)


def _visible(who: Viewer, name: str) -> None:
    if tenant_problems(name) or who.tenant not in (None, name):
        raise HTTPException(404, f"no tenant {name!r}")


@router.get("/tenants/{name}", response_class=HTMLResponse)
def tenant_page(request: Request, who: Who, backend: Back, name: str) -> HTMLResponse:
    _visible(who, name)
    jobs = sorted(
        (j for j in backend.view.jobs.values() if j.tenant == name), key=lambda j: j.job_id
    )
    book: FlowBook | None = request.app.state.flows
    flows = sorted(
        own_id(who, f.flow_id) for f in (book.flows.values() if book else ()) if f.tenant == name
    )
    answers, error = ask(request.app.state.prometheus, tenant_queries(name))
    figures = {
        key: one(answers, key) for key in ("triggers_1m", "jobs", "deferred_1h", "deferred_rate")
    }
    refused = {m.get("action", "?"): round(v) for m, v in answers["refused_1h"] if v >= 0.5}
    streaks = {m.get("job_id", "?"): int(v) for m, v in answers["streaks"]}
    failing, failures_error = _failing(backend, who, name, streaks)
    return render(
        request,
        "tenant.html",
        who,
        tenant=name,
        limits=limits(name),
        jobs=[{"id": own_id(who, j.job_id), "job": j} for j in jobs],
        flows=flows,
        event_jobs=sum(j.on is not None for j in jobs),
        figures=figures,
        refused=refused,
        failing=failing,
        error=error,
        failures_error=failures_error,
        updated=time.strftime("%H:%M:%S"),
    )


def _failing(
    backend: Backend, who: Viewer, name: str, streaks: dict[str, int]
) -> tuple[list[dict[str, Any]], str | None]:
    """The tenant's jobs with failed attempts in the last 24 hours, most failures first:
    how many, the last one's time and error, the current streak (Prometheus)."""
    assert backend.history is not None
    now = utc_now()
    try:
        rows = backend.history.by_status(FAILURES, now - timedelta(hours=24), now, name)
        found = [r for r in islice(mine(who, rows), FAILURE_ROWS) if r.tenant == name]
    except Exception as exc:  # the driver's NoHostAvailable, OperationTimedOut: shown
        return [], f"history unavailable ({exc})"
    count = Counter(r.job_id for r in found)
    last: dict[str, RunOutcome] = {}
    for r in found:  # newest first: the first row of a job is its last failure
        last.setdefault(r.job_id, r)
    out = []
    for job, n in count.most_common():
        row = last[job]
        out.append(
            {
                "job": own_id(who, job),
                "known": job in backend.view.jobs,
                "failures": n,
                "at": row.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
                "status": row.status.value,
                "streak": streaks.get(job),
                "error": redact_text(row.error) if row.error else "",
            }
        )
    capped = len(found) >= FAILURE_ROWS
    return out, f"the newest {FAILURE_ROWS} failures only" if capped else None
