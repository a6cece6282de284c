"""The dashboard's application: the HTTP API with the pages beside it (one process,
one backend, the same tokens)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from cronstream.api.app import build_app, error_response
from cronstream.api.backend import Backend
from cronstream.api.serve import AppFactory
from cronstream.runtime.consoles import ConsoleAccess, console_access
from cronstream.runtime.tokens import TokenBook
from cronstream.ui import actions, audit_pages, flow_pages, pages, stuck_pages, tenant_pages
from cronstream.ui.sessions import Sessions
from cronstream.ui.sources import AuditTrail, DeadLetters, FlowBook, Prometheus, Reads

STATIC = Path(__file__).parent / "static"
log = logging.getLogger("cronstream.ui")


def build_ui_app(
    backend: Backend,
    book: TokenBook,
    reads: Reads,
    *,
    anonymous: bool = False,
    secure_cookies: bool = False,
    sessions: Sessions | None = None,
) -> FastAPI:
    app = build_app(backend, book)
    app.state.prometheus, app.state.letters = reads.prometheus, reads.letters
    app.state.flows, app.state.audit, app.state.anonymous = reads.flows, reads.audit, anonymous
    app.state.secure_cookies = secure_cookies  # Secure even on plain http (a TLS proxy)
    app.state.sessions = sessions or Sessions()
    for module in (pages, actions, flow_pages, audit_pages, tenant_pages, stuck_pages):
        app.include_router(module.router)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="static")

    async def html_error(request: Request, exc: Exception) -> Response:
        """A page's error as a page (401: the sign-in form); the API's stay JSON."""
        assert isinstance(exc, HTTPException)
        if not request.url.path.startswith("/ui"):
            return error_response(exc)
        if exc.status_code == 401:
            return RedirectResponse("/ui/login", status_code=303)
        who = pages.Viewer(None, "?")
        page = pages.render(
            request, "error.html", who, status=exc.status_code, message=str(exc.detail)
        )
        page.status_code = exc.status_code
        return page

    app.add_exception_handler(HTTPException, html_error)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=303)

    _ = root
    return app


@dataclass(frozen=True)
class UiOptions:
    prometheus_url: str  # where the overview's live figures come from
    anonymous: bool = False  # pages readable without signing in (read-only)
    secure_cookies: bool = False  # the session cookie Secure on plain http too


def prometheus_access(backend: Backend, options: UiOptions) -> ConsoleAccess:
    """``--prometheus`` with its login and CA (the console settings, ``runtime.consoles``)."""
    access = console_access(backend.settings, "prometheus")
    return replace(access, url=options.prometheus_url.rstrip("/"))


def ui_factory(options: UiOptions) -> AppFactory:
    """``cronstream.api.serve.serve``'s factory for the dashboard."""

    def build(backend: Backend, book: TokenBook) -> tuple[FastAPI, list[Any]]:
        reads = Reads(
            Prometheus(prometheus_access(backend, options)),
            DeadLetters(backend.settings, backend.codec, backend.publisher),
            FlowBook(backend.settings, backend.codec),
            AuditTrail(backend.settings, backend.codec),
        )
        app = build_ui_app(
            backend, book, reads, anonymous=options.anonymous, secure_cookies=options.secure_cookies
        )
        log.info(
            "dashboard at /ui (%s without signing in; live figures from %s)",
            "every page read-only" if options.anonymous else "nothing",
            options.prometheus_url,
        )
        return app, reads.parts()

    return build
