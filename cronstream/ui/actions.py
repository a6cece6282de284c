"""The dashboard's writes (POST, each after a confirmation page): sign in and out,
trigger / pause / resume a job, cancel a run, replay a dead letter.

A tenant's job is changed through the admission exactly as the API changes it (the
same ``Caller``, so the same checks, quotas and audit entry); an operator's job (one
not owned by a tenant, put with `cronstream jobs put`) only with the admin token,
through ``JobClient``, audited with the token's holder and the browser's address.
Forms are accepted only from the dashboard's own origin (the session cookie is also
``SameSite=Strict``). Signing in opens a session on the server (``sessions``): the
cookie holds its random id, never the token, and is ``Secure`` when the page came over
https (or with ``--secure-cookies``); signing out ends the session on the server."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from cronstream.api.app import send
from cronstream.api.backend import Backend
from cronstream.producers.audit import Auditor
from cronstream.producers.client import JobClient
from cronstream.producers.errors import UnknownJob
from cronstream.runtime.tokens import ADMIN, TokenBook
from cronstream.schemas.tenancy import TenantAction, unqualify
from cronstream.ui.pages import COOKIE, Back, Viewer, Who, render, visible_job
from cronstream.ui.sessions import Sessions

router = APIRouter(prefix="/ui")
ACTIONS = {
    "trigger": TenantAction.TRIGGER,
    "pause": TenantAction.PAUSE,
    "resume": TenantAction.RESUME,
    "cancel": TenantAction.CANCEL,
}
Field = Annotated[str, Form()]


def same_origin(request: Request) -> None:
    """403 for a form sent from another site. Browsers say where a request comes from in
    ``Sec-Fetch-Site`` (no page can set it); under our ``Referrer-Policy: no-referrer``
    they send ``Origin: null`` with our own forms, so ``Origin`` is only the fallback of
    browsers without it (and then must be ours)."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if site is not None:
        if site not in ("same-origin", "none"):  # none: the user's own navigation
            raise HTTPException(403, "a form of another site")
    elif origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        raise HTTPException(403, "a form of another site")


def back_to(path: str, **query: str) -> RedirectResponse:
    return RedirectResponse(f"{path}?{urlencode(query)}" if query else path, status_code=303)


def carried_out(
    request: Request,
    who: Viewer,
    page: str,
    action: str,
    do: Callable[[], str],
    *,
    known: bool = True,
) -> RedirectResponse:
    """A form's action as every action form is answered: from our own origin only
    (``same_origin``), signed in with a token, an action the form has (``known``), then
    ``do()``; back to ``page`` with what was done (its words) or why it was refused."""
    same_origin(request)
    if not who.can_act:
        return back_to(page, error="sign in with a token to act")
    if not known:
        return back_to(page, error=f"no action {action!r}")
    try:
        done = do()
    except (HTTPException, UnknownJob, LookupError, ValueError) as exc:
        detail = exc.detail if isinstance(exc, HTTPException) else str(exc)
        return back_to(page, error=f"{action} refused: {detail}")
    return back_to(page, done=done)


def admin_client(backend: Backend, viewer: Viewer) -> JobClient:
    """A ``JobClient`` for the admin token's holder: its changes audited with the
    browser's address."""
    client = JobClient(backend.settings)
    client.auditor = Auditor(f"ui admin token from {viewer.address}", local=False)
    return client


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return render(request, "login.html", Viewer(None, "?"))


@router.post("/login")
def login(request: Request, token: Field) -> RedirectResponse:
    same_origin(request)
    book: TokenBook = request.app.state.book
    sessions: Sessions = request.app.state.sessions
    holder = book.holder(token.strip())
    if holder is None:
        return back_to("/ui/login", error="that token is not valid")
    session_id = sessions.open(holder, token.strip(), time.time())
    response = back_to("/ui", done="signed in")
    secure = request.app.state.secure_cookies or request.url.scheme == "https"
    response.set_cookie(
        COOKIE, session_id, httponly=True, samesite="strict", path="/ui", secure=secure
    )
    return response


@router.post("/logout")
def logout(request: Request) -> RedirectResponse:
    same_origin(request)
    sessions: Sessions = request.app.state.sessions
    sessions.close(request.cookies.get(COOKIE) or "")
    response = back_to("/ui/login", done="signed out")
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/confirm", response_class=HTMLResponse)
def confirm(request: Request, who: Who, action: str, job: str, run: str = "") -> HTMLResponse:
    """What is about to happen, and the button that does it."""
    if action not in ACTIONS:
        raise HTTPException(404, f"no action {action!r}")
    return render(request, "confirm.html", who, action=action, job=job, run=run)


@router.post("/act")
def act(
    request: Request,
    who: Who,
    backend: Back,
    action: Field,
    job: Field,
    run: Annotated[str, Form()] = "",
    reason: Annotated[str, Form()] = "",
) -> RedirectResponse:
    return carried_out(
        request,
        who,
        f"/ui/jobs/{quote(job)}",
        action,
        lambda: perform(backend, who, action, job, run, reason),
        known=action in ACTIONS,
    )


def perform(backend: Backend, viewer: Viewer, action: str, job: str, run: str, reason: str) -> str:
    """Carry ``action`` out as ``viewer`` (signed in); what was done, in words."""
    definition = visible_job(backend, viewer, job)  # HTTPException 404: no such job
    own = unqualify(definition.tenant, definition.job_id)
    if own is not None:  # a tenant's job: through the admission, as the API
        who = viewer.caller(definition.tenant)
        run_id = None
        if action == "cancel":  # the tenant's own name of the run
            run_id = run if viewer.tenant else unqualify(definition.tenant, run) or run
        result = send(backend, who, ACTIONS[action], own, run_id=run_id, reason=reason or None)
        return f"{action}: accepted ({result.get('run_id') or own})"
    if viewer.holder != ADMIN:
        raise LookupError("an operator's job is changed with the admin token only")
    with admin_client(backend, viewer) as client:
        if action == "trigger":
            return f"triggered {client.trigger(job).run_id}"
        if action == "pause":
            client.pause(job)
            return f"paused {job}"
        if action == "resume":
            client.resume(job)
            return f"resumed {job}"
        if not run:
            raise ValueError("cancel needs the run id")
        client.cancel(run, reason=reason or None)
        return f"asked every worker to cancel {run}"


@router.post("/dlq/replay")
def replay(
    request: Request, who: Who, partition: Annotated[int, Form()], offset: Annotated[int, Form()]
) -> RedirectResponse:
    """Write a dead letter's source record back to its topic (admin token only)."""
    same_origin(request)
    if who.holder != ADMIN:
        return back_to("/ui/dlq", error="replay needs the admin token")
    letters = request.app.state.letters
    try:
        letter = letters.find(partition, offset)
        letters.replay(letter)
    except LookupError as exc:
        return back_to("/ui/dlq", error=str(exc))
    return back_to("/ui/dlq", done=f"replayed {partition}@{offset} to {letter.source_topic}")
