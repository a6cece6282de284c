"""The dashboard's audit pages: the trail's newest entries (every job's and flow's: the
global feed, from ``sources.AuditTrail``) and one job's or flow's whole trail (what
`cronstream jobs log` prints: ``JobClient.audit_log``, its partition read to the end).
An entry is shown to whom its job is (``pages.shows``, by the tenant it carries and its
job id), with the job named by the viewer's own id."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.clients import KafkaException
from cronstream.schemas.audit import AuditAction, AuditRecord
from cronstream.schemas.tenancy import qualify
from cronstream.ui.pages import Back, Viewer, Who, own_id, render, shows
from cronstream.ui.sources import AuditTrail

router = APIRouter(prefix="/ui")


def _entry(who: Viewer, record: AuditRecord, known: bool) -> dict[str, Any]:
    return {
        "at": record.at.strftime("%Y-%m-%d %H:%M:%S"),
        "action": record.action.value,
        "job": own_id(who, record.job_id),
        "known": known,
        "principal": record.principal,
        "os_user": record.os_user or "",
        "origin": record.origin,
        "detail": record.detail or "",
        "changes": [(c.field, c.before or "(none)", c.after or "(none)") for c in record.changes],
    }


@router.get("/audit", response_class=HTMLResponse)
def audit(
    request: Request,
    who: Who,
    backend: Back,
    job: str = "",
    action: str = "",
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> HTMLResponse:
    """``job``: that job's (or flow's) whole trail, newest first; else the newest
    ``limit`` entries of the trail, those the viewer may see."""
    error = None
    records: list[AuditRecord] = []
    try:
        if job:
            stored = job if who.tenant is None else qualify(who.tenant, job)
            client = JobClient(backend.settings, publisher=backend.publisher)
            records = list(reversed(client.audit_log(stored)))
        else:
            trail: AuditTrail | None = request.app.state.audit
            records = [] if trail is None else trail.last(limit)
    except (KafkaException, RuntimeError) as exc:  # the broker away, the topic missing
        error = f"the audit trail is unavailable ({exc})"
    wanted = action.upper()
    shown = [
        _entry(who, r, r.job_id in backend.view.jobs)
        for r in records
        if shows(who, r.tenant, r.job_id) and (not wanted or r.action.value == wanted)
    ]
    return render(
        request,
        "audit.html",
        who,
        entries=shown,
        f={"job": job, "action": action, "limit": limit},
        error=error,
        actions=[a.value for a in AuditAction],
    )
