"""The dashboard's pages (GET): overview, jobs, a job, runs, dead letters.

Who is looking (``Viewer``): the holder of the token that opened the session named by
the cookie (``sessions``): a tenant sees only its own jobs, runs and dead letters, by its
own ids, exactly as the API shows them (``Caller``); the admin sees everything. Without
a session every page is the sign-in page, unless the dashboard runs with
``--anonymous`` (every page read-only, as the admin sees it). Every row a page shows is
checked against the viewer's tenant (``shows``), whatever query found it. Jobs come from
the API backend's view of the jobs topic, runs from history (Cassandra), the overview
from the stack's Prometheus."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates

from cronstream.api.app import Caller, job_of, statuses_of, window_of
from cronstream.api.backend import Backend
from cronstream.runtime.kafka.clients import KafkaException
from cronstream.runtime.tokens import ADMIN, TokenBook
from cronstream.schemas.definition.zones import load_zone
from cronstream.schemas.events import (
    DeadLetter,
    JobDefinition,
    RunOutcome,
    from_ms,
    to_jsonable,
    to_ms,
    utc_now,
)
from cronstream.schemas.output import RunOutput
from cronstream.schemas.redact import redact_jsonable, redact_text
from cronstream.schemas.targets import names as target_names
from cronstream.schemas.tenancy import qualify
from cronstream.streams.scheduler.definitions import preview_slots
from cronstream.ui import prom
from cronstream.ui.charts import duration_chart
from cronstream.ui.sessions import Sessions
from cronstream.ui.sources import replayable

COOKIE = "cronstream_session"
PAGE = 50  # jobs per page
FINAL = {"SUCCEEDED", "FAILED", "TIMED_OUT", "DEAD_LETTERED", "CANCELED", "DUPLICATE"}
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
    """The session's holder; 401 (the sign-in page) without a live session, unless the
    dashboard is open read-only (``--anonymous``)."""
    book: TokenBook = request.app.state.book
    sessions: Sessions = request.app.state.sessions
    session_id = request.cookies.get(COOKIE)
    session = sessions.get(session_id, time.time()) if session_id else None
    if session is not None and book.holder(session.token) != session.holder:
        sessions.close(session_id or "")  # its token left the book (revoked, rotated)
        session = None
    address = request.client.host if request.client else "?"
    if session is None and not request.app.state.anonymous:
        raise HTTPException(401, "sign in with an API token: /ui/login")
    return Viewer(session.holder if session else None, address)


def shows(who: Viewer, tenant: str, job_id: str) -> bool:
    """Whether a row of ``tenant``'s job ``job_id`` (a job, a run, a dead letter) may be
    shown to ``who``: the API's rule (``Caller.sees``); nobody signed in (``--anonymous``)
    reads as the admin."""
    return who.caller().sees(tenant, job_id)


def visible_job(backend: Backend, who: Viewer, job_id: str) -> JobDefinition:
    """``who``'s job ``job_id`` (by its own name); 404 "no job" as the API answers, for
    one that does not exist and for another tenant's alike."""
    job = job_of(backend, who.caller(), job_id)
    if not shows(who, job.tenant, job.job_id):
        raise HTTPException(404, f"no job {job_id!r}")
    return job


def mine(who: Viewer, rows: Iterable[RunOutcome]) -> Iterator[RunOutcome]:
    """The rows ``who`` may see (``shows``); the others dropped, whatever query found
    them."""
    return (r for r in rows if shows(who, r.tenant, r.job_id))


def backend_of(request: Request) -> Backend:
    backend: Backend = request.app.state.backend
    return backend


Who = Annotated[Viewer, Depends(viewer)]
Back = Annotated[Backend, Depends(backend_of)]


def render(request: Request, name: str, who: Viewer, **context: Any) -> HTMLResponse:
    context.update(
        who=who,
        flash=request.query_params.get("done"),
        failure=request.query_params.get("error"),
        anonymous=request.app.state.anonymous,
    )
    return templates.TemplateResponse(request, name, context)


def own_id(who: Viewer, stored: str) -> str:
    return who.caller().own(stored)


def visible_jobs(backend: Backend, who: Viewer) -> list[JobDefinition]:
    return [j for j in backend.view.jobs.values() if shows(who, j.tenant, j.job_id)]


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
    """The stack's figures; a tenant's: its own jobs and runs, no dead-letter count (the
    topic's is every tenant's)."""
    got = request.app.state.prometheus.overview(who.tenant)
    if who.tenant is None:
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
    """The live figures (refreshed by the page's script) and the last hour's charts
    (drawn once, with the page)."""
    charts, chart_error = prom.charts(request.app.state.prometheus, who.tenant, time.time())
    return render(
        request,
        "overview.html",
        who,
        o=overview_data(request, backend, who),
        charts=charts,
        chart_error=chart_error,
    )


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
        return (
            (not self.q or self.q.lower() in job.job_id.lower())
            and (not self.tenant or job.tenant == self.tenant)
            and (not self.status or (self.status == "paused") == job.paused)
            and (not self.target or job.target.type == self.target)
        )


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
        rows.append(
            {
                "id": own_id(who, job.job_id),
                "job": job,
                "next": local_time(n, job.timezone),
                "schedule": job.describe_schedule(),
            }
        )
    return render(
        request,
        "jobs.html",
        who,
        rows=rows,
        total=len(found),
        page=f.page,
        pages=max(1, -(-len(found) // PAGE)),
        f=f,
        targets=target_names(),
        tenants=sorted(
            t for t, n in backend.view.counts.items() if n > 0 and who.tenant in (None, t)
        ),
    )


@router.get("/jobs/{job_id:path}", response_class=HTMLResponse)
def job_page(
    request: Request, who: Who, backend: Back, job_id: str, since: str = "7d"
) -> HTMLResponse:
    job = visible_job(backend, who, job_id)
    now_ms = to_ms(utc_now())
    upcoming = [] if job.paused else preview_slots(job, now_ms, 10)
    fires = [
        {"local": local_time(ms, job.timezone), "utc": local_time(ms, "UTC")} for ms in upcoming
    ]
    start, end = window_of(since)
    assert backend.history is not None
    runs = list(mine(who, backend.history.job_runs(job.job_id, start, end, [], limit=200)))
    finals = [r for r in runs if r.status.value in FINAL]
    failures = [r for r in finals if r.status.value not in ("SUCCEEDED", "DUPLICATE")][:20]
    chart = duration_chart(
        [(r.run_id, (r.duration_ms or 0) / 1000, r.status.value) for r in reversed(finals[:60])]
    )
    definition = json.dumps(redact_jsonable(to_jsonable(job)), indent=2, sort_keys=True)
    triggers = None  # cronstream.api.triggers: the lag and last match, the upstream's day
    if job.on is not None or job.after:
        triggers = backend.triggers(job, utc_now()).as_json(lambda s: own_id(who, s))
    return render(
        request,
        "job.html",
        who,
        job=job,
        id=own_id(who, job.job_id),
        definition=definition,
        fires=fires,
        chart=chart,
        since=since,
        triggers=triggers,
        runs=[_run_row(who, r) for r in runs[:50]],
        failures=[_run_row(who, r) for r in failures],
    )


def _run_row(who: Viewer, r: RunOutcome) -> dict[str, Any]:
    return {
        "run_id": own_id(who, r.run_id),
        "job_id": own_id(who, r.job_id),
        "status": r.status.value,
        "attempt": r.attempt,
        "at": r.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
        "scheduled": r.scheduled_at.strftime("%Y-%m-%d %H:%M:%S"),
        "duration": "-" if r.duration_ms is None else f"{r.duration_ms} ms",
        "error": redact_text(r.error) if r.error else "",
    }


# -- runs -------------------------------------------------------------------------------
@router.get("/runs", response_class=HTMLResponse)
def runs(
    request: Request,
    who: Who,
    backend: Back,
    run_id: str = "",
    job: str = "",
    status: str = "",
    since: str = "1h",
) -> HTMLResponse:
    """One run's records by id (and what its attempts printed: ``outputs``), a job's
    runs, or runs by status in a window."""
    assert backend.history is not None
    rows: list[RunOutcome] = []
    outputs: list[dict[str, Any]] = []
    error = None
    try:
        start, end = window_of(since)
        statuses = statuses_of(status)
        if run_id:
            stored = run_id if who.tenant is None else qualify(who.tenant, run_id)
            rows = list(mine(who, backend.history.run(stored)))
            outputs = [
                _output_view(o)
                for o in backend.run_output(stored)
                if shows(who, o.tenant, o.job_id)
            ]
        elif job:
            found = visible_job(backend, who, job)
            found_rows = backend.history.job_runs(found.job_id, start, end, statuses, limit=200)
            rows = list(mine(who, found_rows))
        elif statuses:
            found_rows = backend.history.by_status(statuses, start, end, who.tenant)
            rows = list(islice(mine(who, found_rows), 200))
    except HTTPException as exc:
        error = str(exc.detail)
    return render(
        request,
        "runs.html",
        who,
        rows=[_run_row(who, r) for r in rows],
        error=error,
        outputs=outputs,
        f={"run_id": run_id, "job": job, "status": status, "since": since},
    )


def _output_view(o: RunOutput) -> dict[str, Any]:
    """An attempt's output on the run page (the template escapes it)."""
    return {
        "attempt": o.attempt,
        "status": o.status,
        "text": redact_text(o.output),
        "at": o.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
        "note": o.cut_note(),
    }


# -- dead letters -----------------------------------------------------------------------
@router.get("/dlq", response_class=HTMLResponse)
def dlq(
    request: Request, who: Who, backend: Back, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> HTMLResponse:
    """The newest dead letters (every tenant's: the admin's page; a tenant sees its own)."""
    letters = request.app.state.letters.last(limit)
    shown = []
    for item in letters:
        letter = item.letter
        if who.tenant is not None and (letter is None or not letter_shows(backend, who, letter)):
            continue  # another tenant's, or unreadable (whose, nobody knows)
        shown.append(
            {
                "partition": item.partition,
                "offset": item.offset,
                "problem": item.problem,
                "letter": letter,
                "job": own_id(who, letter.job_id) if letter and letter.job_id else "",
                "replayable": letter is not None and replayable(letter),
            }
        )
    return render(request, "dlq.html", who, letters=shown, admin=who.holder == ADMIN)


def letter_shows(backend: Backend, who: Viewer, letter: DeadLetter) -> bool:
    """Whether a tenant may see ``letter``: a DLQ record names its job (``job_id``, the
    stored id: ``tenant/id`` for a tenant's) but no tenant, so the tenant is the job's
    as the jobs topic has it, or, for a job deleted since, the id's head."""
    job_id = letter.job_id or ""
    job = backend.view.jobs.get(job_id)
    return shows(who, job.tenant if job is not None else job_id.partition("/")[0], job_id)
