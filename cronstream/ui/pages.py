"""The dashboard's pages (GET): overview, jobs, a job, runs, dead letters.

Who is looking (``Viewer``): the holder of the token in the sign-in cookie (a tenant:
only its own jobs, by its own ids; the admin: every job), or nobody (every job, read
only; ``--no-anonymous`` turns that off). Jobs come from the API backend's view of the
jobs topic, runs from history (Cassandra), the overview from the stack's Prometheus."""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

from confluent_kafka import KafkaException
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates

from cronstream.api.app import Caller, job_of, statuses_of, window_of
from cronstream.api.backend import Backend
from cronstream.ui.charts import duration_chart
from cronstream.ui.sources import replayable
from runtime.tokens import ADMIN, TokenBook
from schemas.events import JobDefinition, RunOutcome, from_ms, to_jsonable, to_ms, utc_now
from schemas.redact import redact_jsonable, redact_text
from schemas.tenancy import qualify, unqualify
from streams.core.zones import load_zone
from streams.definitions import preview_slots

COOKIE = "cronstream_token"
PAGE = 50  # jobs per page
FINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "DEAD_LETTERED", "CANCELLED", "DUPLICATE"}
templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
router = APIRouter(prefix="/ui")


@dataclass(frozen=True)
class Viewer:
    holder: str | None  # a tenant, ADMIN, or None (nobody signed in)
    address: str

    @property
    def tenant(self) -> str | None:
        """The tenant whose jobs are shown (None: all)."""
        return None if self.holder in (None, ADMIN) else self.holder

    @property
    def can_act(self) -> bool:
        return self.holder is not None

    def caller(self, tenant: str | None = None) -> Caller:
        """The API's caller for a read (or, with ``tenant``, an admin's act for it)."""
        if self.holder is None or self.holder == ADMIN:
            return Caller(ADMIN, tenant, self.address)
        return Caller(self.holder, None, self.address)


def viewer(request: Request) -> Viewer:
    book: TokenBook = request.app.state.book
    token = request.cookies.get(COOKIE)
    holder = book.holder(token) if token else None
    address = request.client.host if request.client else "?"
    if holder is None and not request.app.state.anonymous:
        raise HTTPException(401, "sign in with an API token: /ui/login")
    return Viewer(holder, address)


def backend_of(request: Request) -> Backend:
    backend: Backend = request.app.state.backend
    return backend


Who = Annotated[Viewer, Depends(viewer)]
Back = Annotated[Backend, Depends(backend_of)]


def render(request: Request, name: str, who: Viewer, **context: Any) -> HTMLResponse:
    context.update(who=who, flash=request.query_params.get("done"),
                   failure=request.query_params.get("error"))  # fmt: skip
    return templates.TemplateResponse(request, name, context)


def own_id(who: Viewer, stored: str) -> str:
    return who.caller().own(stored)


def visible_jobs(backend: Backend, who: Viewer) -> list[JobDefinition]:
    jobs = backend.view.jobs.values()
    tenant = who.tenant
    return [j for j in jobs if tenant is None or j.tenant == tenant]


def next_fire_ms(job: JobDefinition, now_ms: int) -> int | None:
    if job.paused or job.schedule is None:
        return None
    slots = preview_slots(job, now_ms, 1)
    return slots[0] if slots else None


def local_time(ms: int | None, zone_name: str) -> str:
    if ms is None:
        return "-"
    return from_ms(ms).astimezone(load_zone(zone_name)).strftime("%Y-%m-%d %H:%M:%S %Z")


# -- overview ---------------------------------------------------------------------------
def overview_data(request: Request, backend: Backend, who: Viewer) -> dict[str, Any]:
    got = request.app.state.prometheus.overview()
    try:
        got.dlq_records = request.app.state.letters.count()
    except KafkaException as exc:  # the broker away: shown, not a failed page
        got.error = (got.error or "") + f" dead-letter count unavailable ({exc})"
    data: dict[str, Any] = got.as_json()
    counts = backend.view.counts  # jobs per tenant, kept by the view
    data["jobs"] = sum(counts.values()) if who.tenant is None else counts[who.tenant]
    return data


@router.get("", response_class=HTMLResponse)
def overview(request: Request, who: Who, backend: Back) -> HTMLResponse:
    return render(request, "overview.html", who, o=overview_data(request, backend, who))


@router.get("/overview.json")
def overview_json(request: Request, who: Who, backend: Back) -> JSONResponse:
    return JSONResponse(overview_data(request, backend, who))


# -- jobs -------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobFilters:
    """The jobs page's search and filters (query parameters)."""

    q: str = ""  # a part of the job id
    tenant: str = ""
    status: str = ""  # active | paused
    target: str = ""  # a target type
    due: Annotated[int | None, Query(ge=1, le=525_600)] = None  # next fire within, minutes
    page: Annotated[int, Query(ge=1)] = 1

    def keeps(self, job: JobDefinition) -> bool:
        return ((not self.q or self.q.lower() in job.job_id.lower())
                and (not self.tenant or job.tenant == self.tenant)
                and (not self.status or (self.status == "paused") == job.paused)
                and (not self.target or job.target.type == self.target))  # fmt: skip


@router.get("/jobs", response_class=HTMLResponse)
def jobs(
    request: Request, who: Who, backend: Back, f: Annotated[JobFilters, Depends()]
) -> HTMLResponse:
    """50 per page in id order; next fires computed for the page (and for every
    candidate only when ``due`` filters by them)."""
    now_ms = to_ms(utc_now())
    found = [j for j in visible_jobs(backend, who) if f.keeps(j)]
    nexts: dict[str, int | None] = {}
    if f.due is not None:
        horizon = now_ms + f.due * 60_000
        nexts = {j.job_id: next_fire_ms(j, now_ms) for j in found}
        found = [j for j in found if (n := nexts[j.job_id]) is not None and n <= horizon]
    found.sort(key=lambda j: j.job_id)
    rows = []
    for job in found[(f.page - 1) * PAGE : f.page * PAGE]:
        n = nexts[job.job_id] if job.job_id in nexts else next_fire_ms(job, now_ms)
        rows.append({"id": own_id(who, job.job_id), "job": job, "next": local_time(n, job.timezone),
                     "schedule": job.describe_schedule()})  # fmt: skip
    return render(request, "jobs.html", who, rows=rows, total=len(found), page=f.page,
                  pages=max(1, -(-len(found) // PAGE)), f=f,
                  tenants=sorted(t for t, n in backend.view.counts.items()
                                 if n > 0 and who.tenant in (None, t)))  # fmt: skip


@router.get("/jobs/{job_id:path}", response_class=HTMLResponse)
def job_page(
    request: Request, who: Who, backend: Back, job_id: str, since: str = "7d"
) -> HTMLResponse:
    job = job_of(backend, who.caller(), job_id)
    now_ms = to_ms(utc_now())
    upcoming = [] if job.paused else preview_slots(job, now_ms, 10)
    fires = [{"local": local_time(ms, job.timezone), "utc": local_time(ms, "UTC")}
             for ms in upcoming]  # fmt: skip
    start, end = window_of(since)
    runs = list(backend.job_runs(job.job_id, start, end, [], limit=200))
    finals = [r for r in runs if r.status.value in FINAL]
    failures = [r for r in finals if r.status.value not in ("SUCCEEDED", "DUPLICATE")][:20]
    chart = duration_chart([
        (r.run_id, (r.duration_ms or 0) / 1000, r.status.value) for r in reversed(finals[:60])
    ])  # fmt: skip
    definition = json.dumps(redact_jsonable(to_jsonable(job)), indent=2, sort_keys=True)
    return render(request, "job.html", who, job=job, id=own_id(who, job.job_id),
                  definition=definition, fires=fires, chart=chart, since=since,
                  runs=[_run_row(who, r) for r in runs[:50]],
                  failures=[_run_row(who, r) for r in failures])  # fmt: skip


def _run_row(who: Viewer, r: RunOutcome) -> dict[str, Any]:
    return {"run_id": own_id(who, r.run_id), "job_id": own_id(who, r.job_id),
            "status": r.status.value, "attempt": r.attempt,
            "at": r.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
            "scheduled": r.scheduled_at.strftime("%Y-%m-%d %H:%M:%S"),
            "duration": "-" if r.duration_ms is None else f"{r.duration_ms} ms",
            "error": redact_text(r.error) if r.error else ""}  # fmt: skip


# -- runs -------------------------------------------------------------------------------
@router.get("/runs", response_class=HTMLResponse)
def runs(
    request: Request, who: Who, backend: Back, run_id: str = "", job: str = "",
    status: str = "", since: str = "1h",
) -> HTMLResponse:  # fmt: skip
    """One run's records by id, a job's runs, or runs by status in a window."""
    assert backend.history is not None
    rows: list[RunOutcome] = []
    error = None
    try:
        start, end = window_of(since)
        statuses = statuses_of(status)
        if run_id:
            stored = run_id if who.tenant is None else qualify(who.tenant, run_id)
            rows = backend.history.run(stored)
        elif job:
            found = job_of(backend, who.caller(), job)
            rows = list(backend.job_runs(found.job_id, start, end, statuses, limit=200))
        elif statuses:
            rows = list(islice(backend.history.by_status(statuses, start, end, who.tenant), 200))
    except HTTPException as exc:
        error = str(exc.detail)
    return render(request, "runs.html", who, rows=[_run_row(who, r) for r in rows], error=error,
                  f={"run_id": run_id, "job": job, "status": status, "since": since})  # fmt: skip


# -- dead letters -----------------------------------------------------------------------
@router.get("/dlq", response_class=HTMLResponse)
def dlq(request: Request, who: Who, limit: Annotated[int, Query(ge=1, le=500)] = 100
        ) -> HTMLResponse:  # fmt: skip
    """The newest dead letters (every tenant's: the admin's page; a tenant sees its own)."""
    letters = request.app.state.letters.last(limit)
    shown = []
    for item in letters:
        letter = item.letter
        if (
            letter is not None
            and who.tenant is not None
            and (unqualify(who.tenant, letter.job_id or "") is None)
        ):
            continue  # another tenant's
        shown.append({
            "partition": item.partition, "offset": item.offset, "problem": item.problem,
            "letter": letter, "job": own_id(who, letter.job_id) if letter and letter.job_id else "",
            "replayable": letter is not None and replayable(letter),
        })  # fmt: skip
    return render(request, "dlq.html", who, letters=shown, admin=who.holder == ADMIN)
