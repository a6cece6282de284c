"""The dashboard's flow pages: the flows, a flow (its graph, schedule and recent runs), a
flow run (its graph in its nodes' colours, each node's attempts), and their actions
(trigger a flow run; rerun the failed part of one), each after a confirmation page.

Definitions come from the flows topic (``sources.FlowBook``), runs from history
(``History.flow_run``, as ``cronstream history --flow-run``). Scoping is the other
pages' (``pages.shows``): a tenant sees a flow whose definition is its own (stored as
``tenant/flow``, tenant stamped) and the runs whose rows are, by its own ids; another
tenant's is "no flow" (404), as one that does not exist. A trigger is the flow's
job's trigger (``actions.perform``: a tenant's through the admission, an operator's
with the admin token, as `cronstream flows trigger`); a rerun is the admin token's
only (``JobClient.rerun_flow``, as `cronstream flows rerun --from-failed`): the
admission takes no rerun from a tenant."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from cronstream.api.backend import Backend
from cronstream.runtime.tokens import ADMIN
from cronstream.schemas.events import RunOutcome, utc_now
from cronstream.schemas.flows import FlowDefinition
from cronstream.schemas.redact import redact_text
from cronstream.schemas.tenancy import qualify
from cronstream.ui import actions
from cronstream.ui.dag import DagNode, dag_legend, dag_svg
from cronstream.ui.flow_view import dag_nodes, flow_run_rows, flow_status, latest_runs
from cronstream.ui.pages import Back, Viewer, Who, mine, own_id, render, shows
from cronstream.ui.sources import FlowBook

router = APIRouter(prefix="/ui")
FLOW_ACTIONS = ("trigger", "rerun")
Field = Annotated[str, Form()]


def book_of(request: Request) -> FlowBook | None:
    book: FlowBook | None = request.app.state.flows
    return book


def stored(who: Viewer, own: str) -> str:
    """A flow or flow run id as stored, from the viewer's own name of it."""
    return own if who.tenant is None else qualify(who.tenant, own)


def visible_flow(request: Request, who: Viewer, flow_id: str) -> FlowDefinition:
    """``who``'s flow ``flow_id`` (its own name); 404 "no flow" for one that does not
    exist and another tenant's alike."""
    book = book_of(request)
    flow = None if book is None else book.flows.get(stored(who, flow_id))
    if flow is None or not shows(who, flow.tenant, flow.flow_id):
        raise HTTPException(404, f"no flow {flow_id!r}")
    return flow


def _row(who: Viewer, r: RunOutcome, flow_run_id: str = "") -> dict[str, Any]:
    when = "%Y-%m-%d %H:%M:%S"
    node = r.run_id[len(flow_run_id) + 1 :] if flow_run_id else ""
    return {
        "run_id": own_id(who, r.run_id),
        "node": node or "(flow)",
        "attempt": r.attempt,
        "status": r.status.value,
        "worker": r.worker or "-",
        "scheduled": r.scheduled_at.strftime(when),
        "recorded": r.recorded_at.strftime(when),
        "started": r.started_at.strftime(when) if r.started_at else "-",
        "finished": r.finished_at.strftime(when) if r.finished_at else "-",
        "duration": "-" if r.duration_ms is None else f"{r.duration_ms} ms",
        "error": redact_text(r.error) if r.error else "",
    }


@router.get("/flows", response_class=HTMLResponse)
def flows(request: Request, who: Who, backend: Back) -> HTMLResponse:
    book = book_of(request)
    found = (
        []
        if book is None
        else sorted(
            (f for f in book.flows.values() if shows(who, f.tenant, f.flow_id)),
            key=lambda f: f.flow_id,
        )
    )
    rows = []
    for flow in found:
        job = backend.view.jobs.get(flow.flow_id)
        rows.append(
            {
                "id": own_id(who, flow.flow_id),
                "flow": flow,
                "nodes": len(flow.nodes),
                "schedule": job.describe_schedule() if job else "no schedule",
                "paused": bool(job and job.paused),
            }
        )
    return render(request, "flows.html", who, rows=rows, ready=book is not None and book.ready)


@router.get("/flows/{flow_id:path}", response_class=HTMLResponse)
def flow_page(request: Request, who: Who, backend: Back, flow_id: str) -> HTMLResponse:
    """A flow: its graph (as defined now), its schedule, its runs of the last 7 days."""
    flow = visible_flow(request, who, flow_id)
    job = backend.view.jobs.get(flow.flow_id)
    now = utc_now()
    assert backend.history is not None
    rows = backend.history.job_runs(flow.flow_id, now - timedelta(days=7), now, limit=2000)
    runs = [_row(who, r) for r in flow_run_rows(flow.flow_id, list(mine(who, rows)))[:50]]
    graph = dag_svg([DagNode(n.name, n.after, "PENDING", n.target.type) for n in flow.nodes])
    return render(
        request,
        "flow.html",
        who,
        flow=flow,
        id=own_id(who, flow.flow_id),
        job=job,
        graph=graph,
        runs=runs,
    )


@router.get("/flow-runs/{flow_run_id:path}", response_class=HTMLResponse)
def flow_run_page(request: Request, who: Who, backend: Back, flow_run_id: str) -> HTMLResponse:
    """A flow run: its status, its graph in its nodes' states (each linked to its node
    run's page), every node attempt."""
    assert backend.history is not None
    run_id = stored(who, flow_run_id)
    rows = list(mine(who, backend.history.flow_run(run_id)))
    if not rows:
        raise HTTPException(404, f"no flow run {flow_run_id!r}")
    flow_id = rows[0].job_id
    book = book_of(request)
    flow = None if book is None else book.flows.get(flow_id)
    if flow is not None and not shows(who, flow.tenant, flow.flow_id):
        flow = None

    def link(node_run: str) -> str:
        return f"/ui/runs?run_id={quote(own_id(who, node_run), safe='')}"

    nodes = dag_nodes(run_id, rows, flow, link)
    status = flow_status(run_id, rows)
    reruns = max((r.rerun for r in latest_runs(run_id, rows).values()), default=0)
    return render(
        request,
        "flow_run.html",
        who,
        id=own_id(who, run_id),
        flow_id=own_id(who, flow_id),
        status=status,
        graph=dag_svg(nodes),
        rows=[_row(who, r, run_id) for r in rows if r.run_id != run_id],
        own=[_row(who, r) for r in rows if r.run_id == run_id],
        defined=flow is not None,
        can_rerun=who.holder == ADMIN and status == "FAILED",
        reruns=reruns,
        legend=dag_legend(),
    )


# -- actions ----------------------------------------------------------------------------
@router.get("/flow-confirm", response_class=HTMLResponse)
def confirm(request: Request, who: Who, action: str, flow: str, run: str = "") -> HTMLResponse:
    if action not in FLOW_ACTIONS:
        raise HTTPException(404, f"no action {action!r}")
    visible_flow(request, who, flow)
    back = f"/ui/flow-runs/{quote(run)}" if run else f"/ui/flows/{quote(flow)}"
    return render(
        request,
        "confirm.html",
        who,
        action=action,
        job=flow,
        run=run,
        post="/ui/flow-act",
        back=back,
        what="flow",
    )


@router.post("/flow-act")
def act(
    request: Request,
    who: Who,
    backend: Back,
    action: Field,
    job: Field,
    run: Annotated[str, Form()] = "",
) -> RedirectResponse:
    """Trigger ``job`` (a flow, the viewer's own id), or rerun the failed part of its
    run ``run``; back to the page it was asked from."""
    page = f"/ui/flow-runs/{quote(run)}" if run else f"/ui/flows/{quote(job)}"

    def do() -> str:
        flow = visible_flow(request, who, job)
        if action == "trigger":
            return actions.perform(backend, who, "trigger", job, "", "")
        if action == "rerun":
            return _rerun(backend, who, flow, run)
        raise LookupError(f"no action {action!r}")

    return actions.carried_out(request, who, page, action, do)


def _rerun(backend: Backend, who: Viewer, flow: FlowDefinition, run: str) -> str:
    """Ask the coordinator to run the failed part of ``run`` again (admin token only)."""
    if who.holder != ADMIN:
        raise LookupError(
            "a rerun needs the admin token (the admission takes none from a "
            "tenant): ask an operator"
        )
    run_id = stored(who, run)
    if not run_id.startswith(flow.flow_id + "@") or "/" in run_id[len(flow.flow_id) + 1 :]:
        raise ValueError(f"{run!r} is no run of flow {flow.flow_id!r}")
    with actions.admin_client(backend, who) as client:
        event = client.rerun_flow(run_id)
    return f"rerun of the failed part of {event.flow_run_id} requested"
