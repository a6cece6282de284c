"""`cronstream api`: the tenant-facing HTTP API (FastAPI; the OpenAPI document at
``/openapi.json``).

Every call carries ``Authorization: Bearer <token>``; the token names a tenant (or an
admin, ``runtime.tokens``). A tenant sees and changes only its own jobs, by its own ids;
another tenant's job is "no job" (404), exactly as a job that does not exist. An admin
sees every job by its stored id (``tenant/id``), and acts for a tenant with
``?tenant=NAME``. Writes go through the admission (validation, tenant stamp, quotas,
target policy): refused with its reason, the status by the refusal's code
(``STATUS_OF``): 404 no job, 429 a quota, 403 the target policy, 422 invalid. Errors
are ``{"error": reason}`` (and ``"problems"`` when there are several).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.exceptions import HTTPException as StarletteHTTPException

from cronstream.api.backend import Backend, UnknownTenant
from cronstream.api.document import BEARER, ERRORS, PUT_BODY, CancelBody, TriggerBody
from cronstream.consumers.errors import ArchiveUnavailable
from cronstream.producers.errors import NoAnswer
from cronstream.producers.tenant import issue
from cronstream.runtime.metrics import exposition
from cronstream.runtime.metrics_server import authorized
from cronstream.runtime.tokens import ADMIN, TokenBook
from cronstream.schemas.definition import job_from_spec, parse_duration
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import JobDefinition, RunOutcome, RunStatus, to_jsonable, utc_now
from cronstream.schemas.limits import carried
from cronstream.schemas.redact import redact_jsonable
from cronstream.schemas.tenancy import (
    RefusalCode,
    TenantAction,
    TenantResult,
    qualify,
    tenant_problems,
    unqualify,
)

MAX_ROWS = 1000

# The HTTP status of each refusal of the admission (README, "The HTTP API").
STATUS_OF: dict[RefusalCode, int] = {
    RefusalCode.NOT_FOUND: 404,  # another tenant's job too: indistinguishable on purpose
    RefusalCode.QUOTA: 429,
    RefusalCode.POLICY: 403,  # well-formed, but not this tenant's to call
    RefusalCode.INVALID: 422,
    RefusalCode.UNREADABLE: 422,  # a record that is no command (the API writes readable ones)
    # A bug of ours this one command reached (runtime.faults), yet 422, not 500: the
    # admission answered, refused this command only and went on (no outage: retrying
    # the same request fails the same way, so nothing should retry it as a 5xx
    # invites), and the inputs that reach such bugs are unusual ones, which the API
    # answers with a 422 and the reason, never a 500. Operators see it in
    # cronstream_record_faults_total and the CronstreamRecordFaults alert.
    RefusalCode.INTERNAL: 422,
}
UNCODED = 422  # an answer without a code: written by an admission older than the codes


class Caller:
    """Who is calling: a tenant, or an admin acting for ``tenant`` (or for all)."""

    def __init__(self, holder: str, tenant: str | None, address: str = "?") -> None:
        self.admin = holder == ADMIN
        self.tenant = tenant if self.admin else holder
        self.by = f"api token of {holder} from {address}"  # the audit trail's who

    def acting(self) -> str:
        """The tenant a write acts for."""
        if self.tenant is None:
            raise HTTPException(400, "an admin token acts for a tenant: add ?tenant=NAME")
        return self.tenant

    def sees(self, tenant: str, job_id: str) -> bool:
        """Whether a row (a job, a run, a dead letter) of ``tenant``'s job ``job_id`` (its
        stored id) may be shown to this caller: any to an admin acting for all; else only
        its tenant's, by the tenant the row carries and by its id both (an operator's job
        may be named like a tenant's, ``acme/x`` of tenant ``default``: an id prefix
        proves nothing alone)."""
        mine = self.tenant
        return mine is None or (tenant == mine and unqualify(mine, job_id) is not None)

    def own(self, stored: str) -> str:
        """A stored job or run id as this caller names it."""
        if self.admin and self.tenant is None:
            return stored
        return unqualify(self.tenant or "", stored) or stored


def _error(status: int, reason: str, problems: list[str] | None = None) -> JSONResponse:
    """An error as the API answers it; its text may quote what the caller sent, so a
    lone surrogate in it is written out (``carried``), never a failed answer (500)."""
    body: dict[str, Any] = {"error": carried(reason)}
    if problems:
        body["problems"] = [carried(problem) for problem in problems]
    return JSONResponse(body, status_code=status)


def _job_json(caller: Caller, job: JobDefinition) -> dict[str, Any]:
    out: dict[str, Any] = redact_jsonable(to_jsonable(job))
    out["job_id"] = caller.own(job.job_id)
    out["after"] = [caller.own(upstream) for upstream in job.after]
    return out


def _outcomes_json(caller: Caller, rows: Iterable[RunOutcome], limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` rows as the caller sees them, each checked (``Caller.sees``)
    whatever query found it."""
    out = []
    for row in rows:
        if not caller.sees(row.tenant, row.job_id):
            continue
        item: dict[str, Any] = redact_jsonable(to_jsonable(row))
        item["job_id"], item["run_id"] = caller.own(row.job_id), caller.own(row.run_id)
        out.append(item)
        if len(out) >= limit:
            break
    return out


def _answered(result: TenantResult) -> dict[str, Any]:
    """The admission's answer as the response, or its refusal as an HTTP error."""
    if result.accepted:
        return {
            "accepted": True,
            "job_id": result.job_id,
            "run_id": result.run_id,
            "action": result.action.value if result.action else None,
        }
    status = UNCODED if result.code is None else STATUS_OF[result.code]
    raise HTTPException(status, result.reason or "refused")


def caller(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
    tenant: Annotated[str | None, Query(description="admin tokens: act for this tenant")] = None,
) -> Caller:
    book: TokenBook = request.app.state.book
    holder = book.holder(bearer.credentials.strip()) if bearer is not None else None
    if holder is None:
        raise HTTPException(401, "a valid API token is required (Authorization: Bearer)")
    if tenant is not None and (holder != ADMIN or tenant_problems(tenant)):
        raise HTTPException(400, "?tenant= is for admin tokens, with a tenant's name")
    return Caller(holder, tenant, request.client.host if request.client else "?")


def backend_of(request: Request) -> Backend:
    backend: Backend = request.app.state.backend
    return backend


Who = Annotated[Caller, Depends(caller)]
Back = Annotated[Backend, Depends(backend_of)]
Limit = Annotated[int, Query(ge=1, le=MAX_ROWS)]
router = APIRouter(responses=ERRORS)


def job_of(backend: Backend, who: Caller, job_id: str) -> JobDefinition:
    if who.tenant is not None:
        job = backend.view.of_tenant(who.tenant, job_id)
    else:
        job = backend.view.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no job {job_id!r}")
    return job


def send(
    backend: Backend, who: Caller, action: TenantAction, job_id: str, **kw: Any
) -> dict[str, Any]:
    try:
        command = issue(action, job_id, issued_by=who.by, **kw)
        return _answered(backend.command(who.acting(), command))
    except NoAnswer as exc:
        raise HTTPException(503, str(exc)) from None
    except UnknownTenant as exc:  # an admin's ?tenant= naming none onboarded here
        raise HTTPException(404, str(exc)) from None
    except SpecError as exc:  # what no topic can carry (``Backend.command``)
        raise HTTPException(422, "; ".join(exc.problems)) from None


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(backend: Back) -> JSONResponse:
    """Ready while the threads that follow the jobs and the admission's answers run."""
    stopped = backend.stopped_threads()
    if stopped:
        return JSONResponse({"status": "not ready", "stopped": stopped}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", response_class=PlainTextResponse)
def metrics_text(request: Request) -> PlainTextResponse:
    """Behind the metrics token when the API listens beyond the loopback (``serve``)."""
    token = getattr(request.app.state, "metrics_token", None)
    if not authorized(request.headers.get("Authorization"), token):
        raise HTTPException(401, "a bearer token is needed")
    body, kind = exposition()
    return PlainTextResponse(body, media_type=kind)


@router.get("/v1/jobs")
def list_jobs(who: Who, backend: Back) -> list[dict[str, Any]]:
    jobs = sorted(backend.view.jobs.values(), key=lambda j: j.job_id)
    return [_job_json(who, j) for j in jobs if who.sees(j.tenant, j.job_id)]


@router.get("/v1/jobs/{job_id:path}/history")
def job_history(
    who: Who,
    backend: Back,
    job_id: str,
    since: str = "24h",
    status: str | None = None,
    limit: Limit = 100,
) -> list[dict[str, Any]]:
    job = job_of(backend, who, job_id)
    start, end = window_of(since)
    assert backend.history is not None
    rows = backend.history.job_runs(
        job.job_id, start, end, statuses_of(status), limit=limit, tenant=job.tenant
    )
    return _outcomes_json(who, rows, limit)


@router.get("/v1/jobs/{job_id:path}/triggers")
def job_triggers(who: Who, backend: Back, job_id: str) -> dict[str, Any]:
    """What the job's triggers are doing (docs/event-triggers.md, "Watching a trigger"):
    for ``on:`` the last record matched and the lag per source partition, for ``after:``
    the upstream jobs and which succeeded today (UTC)."""
    job = job_of(backend, who, job_id)
    return backend.triggers(job, utc_now()).as_json(who.own)


@router.post("/v1/jobs/{job_id:path}/pause")
def pause(who: Who, backend: Back, job_id: str) -> dict[str, Any]:
    return send(backend, who, TenantAction.PAUSE, job_id)


@router.post("/v1/jobs/{job_id:path}/resume")
def resume(who: Who, backend: Back, job_id: str) -> dict[str, Any]:
    return send(backend, who, TenantAction.RESUME, job_id)


@router.post("/v1/jobs/{job_id:path}/trigger")
def trigger(
    who: Who,
    backend: Back,
    job_id: str,
    body: Annotated[TriggerBody | None, Body()] = None,
    idempotency_key: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    key = (body.idempotency_key if body else None) or idempotency_key
    return send(backend, who, TenantAction.TRIGGER, job_id, idempotency_key=key)


@router.post("/v1/jobs/{job_id:path}/{action}", include_in_schema=False)
def no_action(action: str) -> None:
    raise HTTPException(404, f"no action {action!r} (pause, resume, trigger)")


@router.get("/v1/jobs/{job_id:path}")
def get_job(who: Who, backend: Back, job_id: str) -> dict[str, Any]:
    return _job_json(who, job_of(backend, who, job_id))


@router.put("/v1/jobs/{job_id:path}", openapi_extra=PUT_BODY)
def put_job(
    who: Who, backend: Back, job_id: str, spec: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    try:
        job = job_from_spec(
            {**spec, "id": job_id}, max_payload_bytes=backend.settings.max_payload_bytes
        )
    except SpecError as exc:
        raise HTTPException(422, "; ".join(exc.problems)) from None
    return send(backend, who, TenantAction.PUT, job_id, job=job)


@router.delete("/v1/jobs/{job_id:path}")
def delete_job(who: Who, backend: Back, job_id: str) -> dict[str, Any]:
    return send(backend, who, TenantAction.DELETE, job_id)


@router.post("/v1/runs/{run_id:path}/cancel")
def cancel(
    who: Who, backend: Back, run_id: str, body: Annotated[CancelBody | None, Body()] = None
) -> dict[str, Any]:
    job_id = run_id.rpartition("@")[0] or run_id
    reason = body.reason if body else None
    result: dict[str, Any] = send(
        backend, who, TenantAction.CANCEL, job_id, run_id=run_id, reason=reason
    )
    return result


@router.get("/v1/runs/{run_id:path}/output")
def run_output(who: Who, backend: Back, run_id: str) -> list[dict[str, Any]]:
    """What each attempt of the run printed or returned (docs/run-output.md), oldest
    first; 404 when none is kept (nothing printed, past the output TTL setting, or
    another tenant's run: indistinguishable, as for its records)."""
    stored = run_id if who.tenant is None else qualify(who.tenant, run_id)
    found = []
    for output in backend.run_output(stored):
        if who.sees(output.tenant, output.job_id):
            item: dict[str, Any] = redact_jsonable(to_jsonable(output))
            item["job_id"], item["run_id"] = who.own(output.job_id), who.own(output.run_id)
            found.append(item)
    if not found:
        raise HTTPException(404, f"no output kept of run {run_id!r}")
    return found


@router.get("/v1/runs/{run_id:path}")
def run(who: Who, backend: Back, run_id: str) -> list[dict[str, Any]]:
    stored = run_id if who.tenant is None else qualify(who.tenant, run_id)
    assert backend.history is not None
    found = _outcomes_json(who, backend.history.run(stored), MAX_ROWS)
    if not found:
        raise HTTPException(404, f"no records of run {run_id!r}")
    return found


@router.get("/v1/history")
def by_status(
    who: Who, backend: Back, status: str, since: str = "1h", limit: Limit = 100
) -> list[dict[str, Any]]:
    start, end = window_of(since)
    assert backend.history is not None
    rows = backend.history.by_status(statuses_of(status), start, end, who.tenant)
    return _outcomes_json(who, rows, limit)


def build_app(backend: Backend, book: TokenBook) -> FastAPI:
    app = FastAPI(
        title="cronstream", version="1", docs_url=None, redoc_url=None, description=__doc__
    )
    app.state.backend, app.state.book = backend, book
    app.include_router(router)

    # Starlette's own too (no route for a path, a method not allowed): as ours, so that
    # every refusal has the one documented body.
    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return _error(422, "invalid request", problems)

    @app.exception_handler(ArchiveUnavailable)
    async def archive_away(request: Request, exc: ArchiveUnavailable) -> Any:
        """A history query that needed the archive table while it did not answer: 503,
        as the page or the JSON an HTTPException of this app gets."""
        handlers = app.exception_handlers
        handler = handlers.get(HTTPException) or handlers[StarletteHTTPException]
        answer = handler(request, HTTPException(503, str(exc)))
        return await answer if inspect.isawaitable(answer) else answer

    _ = (http_error, invalid, archive_away)
    return app


def error_response(exc: StarletteHTTPException) -> JSONResponse:
    """An HTTPException as the API answers it."""
    response = _error(exc.status_code, str(exc.detail))
    response.headers.update(exc.headers or {})  # a 405's Allow
    if exc.status_code == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def window_of(since: str) -> tuple[datetime, datetime]:
    try:
        span = timedelta(milliseconds=parse_duration(since))
    except ValueError as exc:
        raise HTTPException(422, f"since: {exc}") from None
    if span > timedelta(days=366):
        raise HTTPException(422, "since: at most 366 days")
    now = utc_now()
    return now - span, now


def statuses_of(text: str | None) -> list[str]:
    names = [s.strip().upper() for s in (text or "").split(",") if s.strip()]
    unknown = [n for n in names if n not in RunStatus.__members__]
    if unknown:
        raise HTTPException(422, f"unknown status {', '.join(unknown)}")
    return names
