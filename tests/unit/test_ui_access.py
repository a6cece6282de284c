"""Who sees what on the dashboard (``cronstream.ui``), with the backend's reads faked:
sign-in required by default, the session cookie, sign-out, and a tenant's pages that
hold only its own rows, whatever a query returned (the fake history ignores the tenant
and the job it is asked for, so only the pages' own check stands between tenants). The real stack
runs the same in ``tests/integration/test_ui.py``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from cronstream.api.backend import Backend
from cronstream.api.guard import AllowedHosts, Guard
from cronstream.producers.admission.core import JobsView
from cronstream.runtime.tokens import ADMIN, TokenBook, digest
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import DeadLetter, JobDefinition, RunOutcome, RunStatus, utc_now
from cronstream.schemas.output import RunOutput
from cronstream.ui.app import build_ui_app
from cronstream.ui.sources import (
    QUERIES,
    DeadLetters,
    Letter,
    Overview,
    Prometheus,
    Reads,
    tenant_queries,
)
from tests.fakes import FakeHistory

TOKENS = {"tok-acme": "acme", "tok-beta": "beta", "tok-admin": ADMIN}
NOW = utc_now()


def _job(stored: str, tenant: str) -> JobDefinition:
    spec = {"id": "x", "every": "1h", "target": "http", "url": "https://example.com/"}
    return replace(job_from_spec(spec, max_payload_bytes=65536), job_id=stored, tenant=tenant)


def _run(job_id: str, tenant: str, error: str) -> RunOutcome:
    return RunOutcome(
        run_id=f"{job_id}@2026-11-26T10:00:00.000Z",
        job_id=job_id,
        status=RunStatus.FAILED,
        scheduled_at=NOW,
        recorded_at=NOW,
        tenant=tenant,
        error=error,
    )


def _letter(offset: int, job_id: str | None, reason: str) -> Letter:
    return Letter(
        0,
        offset,
        DeadLetter(
            reason=reason,
            stage="worker",
            source_topic="t",
            source_partition=-1,
            source_offset=-1,
            dead_at=NOW,
            job_id=job_id,
        ),
    )


# acme's job, beta's, and an operator's (tenant default) whose id starts "acme/".
JOBS = [_job("acme/report", "acme"), _job("beta/own", "beta"), _job("acme/ops", "default")]
RUNS = [
    _run("acme/report", "acme", "acme-secret-error"),
    _run("beta/own", "beta", "beta-error"),
    _run("acme/ops", "default", "operator-error"),
]
# What each run printed (docs/run-output.md): "<its error>-printed".
OUTPUTS = [
    RunOutput(
        run_id=r.run_id,
        job_id=r.job_id,
        tenant=r.tenant,
        status="FAILED",
        scheduled_at=NOW,
        recorded_at=NOW,
        output=f"{r.error}-printed",
    )
    for r in RUNS
]
LETTERS = [
    _letter(1, "acme/report", "acme-letter"),
    _letter(2, "beta/own", "beta-letter"),
    _letter(3, "acme/ops", "operator-letter"),
    _letter(4, "acme/gone", "deleted-job-letter"),
    Letter(0, 5, None, "unreadable-letter"),
]


@dataclass
class FakeBackend:
    view: JobsView
    history: FakeHistory

    def run_output(self, run_id: str) -> list[RunOutput]:
        return [o for o in OUTPUTS if o.run_id == run_id]


class FakePrometheus:
    url = "http://prometheus.invalid"

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        return []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        return []

    def overview(self, tenant: str | None = None) -> Overview:
        self.asked.append(tenant)
        return Overview()


class FakeLetters:
    def last(self, limit: int) -> list[Letter]:
        return LETTERS[:limit]

    def count(self) -> int:
        return len(LETTERS)


class Browser:
    """A client of the dashboard (behind the guard) that keeps its cookies."""

    def __init__(self, app: Any, base: str = "http://127.0.0.1:8780") -> None:
        guarded = Guard(app, AllowedHosts.of("127.0.0.1"))
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded), base_url=base)

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.client.get(path, **kw))

    def post(self, path: str, data: dict[str, str], **kw: Any) -> httpx.Response:
        return self.loop.run_until_complete(self.client.post(path, data=data, **kw))

    def sign_in(self, token: str) -> httpx.Response:
        reply = self.post("/ui/login", {"token": token})
        assert reply.status_code == 303
        return reply

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture
def book(tmp_path: Path) -> TokenBook:
    path = tmp_path / "api-tokens.json"
    path.write_text(json.dumps({"tokens": {digest(t): h for t, h in TOKENS.items()}}))
    return TokenBook(path)


def dashboard(book: TokenBook, **options: Any) -> tuple[Any, FakePrometheus]:
    view = JobsView()
    for job in JOBS:
        view.observe(job.job_id, job)
    backend = cast(Backend, FakeBackend(view, FakeHistory(RUNS, every_job=True)))
    prometheus = FakePrometheus()
    reads = Reads(cast(Prometheus, prometheus), cast(DeadLetters, FakeLetters()))
    app = build_ui_app(backend, book, reads, **options)
    return app, prometheus


@pytest.fixture
def browser(book: TokenBook) -> Iterator[Browser]:
    b = Browser(dashboard(book)[0])
    yield b
    b.close()


PAGES = [
    "/ui",
    "/ui/jobs",
    "/ui/jobs/acme/report",
    "/ui/runs?status=failed",
    "/ui/dlq",
    "/ui/overview.json",
    "/ui/confirm?action=pause&job=x",
]


@pytest.mark.parametrize("path", PAGES)
def test_without_a_session_every_page_is_the_sign_in_page(browser: Browser, path: str) -> None:
    reply = browser.get(path)
    assert (reply.status_code, reply.headers["location"]) == (303, "/ui/login")
    assert "error" not in reply.text
    assert "acme" not in reply.text
    login = browser.get("/ui/login")
    assert login.status_code == 200
    assert 'id="sign-in"' in login.text
    assert "read-only" not in login.text


def test_anonymous_opens_every_page_read_only(book: TokenBook) -> None:
    b = Browser(dashboard(book, anonymous=True)[0])
    try:
        jobs = b.get("/ui/jobs")
        assert jobs.status_code == 200
        assert "read-only" in jobs.text
        assert "acme/report" in jobs.text
        assert "beta/own" in jobs.text
        assert 'id="act-pause"' not in b.get("/ui/jobs/beta/own").text
        refused = b.post("/ui/act", {"action": "pause", "job": "beta/own"})
        assert "sign+in" in refused.headers["location"]
    finally:
        b.close()


def test_the_cookie_holds_a_session_id_never_the_token(browser: Browser) -> None:
    reply = browser.sign_in("tok-acme")
    cookie = reply.headers["set-cookie"]
    assert cookie.startswith("cronstream_session=")
    assert "tok-acme" not in cookie
    attributes = [a.strip().lower() for a in cookie.split(";")]
    assert {"httponly", "samesite=strict", "path=/ui"} <= set(attributes)
    assert "secure" not in attributes  # plain http
    assert "acme" in browser.get("/ui").text
    bad = browser.post("/ui/login", {"token": "tok-nobody"})
    assert "set-cookie" not in bad.headers
    assert "not+valid" in bad.headers["location"]


@pytest.mark.parametrize(
    ("base", "secure_cookies"), [("https://127.0.0.1", False), ("http://127.0.0.1", True)]
)
def test_the_cookie_is_secure_over_tls_or_when_told(
    book: TokenBook, base: str, secure_cookies: bool
) -> None:
    b = Browser(dashboard(book, secure_cookies=secure_cookies)[0], base)
    try:
        cookie = b.sign_in("tok-acme").headers["set-cookie"]
        assert "secure" in [a.strip().lower() for a in cookie.split(";")]
    finally:
        b.close()


def test_sign_out_revokes_the_session_on_the_server(browser: Browser) -> None:
    browser.sign_in("tok-admin")
    old = browser.client.cookies["cronstream_session"]
    assert browser.get("/ui/jobs").status_code == 200
    out = browser.post("/ui/logout", {})
    assert out.headers["location"].startswith("/ui/login")
    browser.client.cookies.clear()
    replayed = browser.get("/ui/jobs", headers={"cookie": f"cronstream_session={old}"})
    assert (replayed.status_code, replayed.headers["location"]) == (303, "/ui/login")


def test_a_token_removed_from_the_book_ends_its_sessions(browser: Browser, book: TokenBook) -> None:
    browser.sign_in("tok-beta")
    assert browser.get("/ui/jobs").status_code == 200
    book.path.write_text(json.dumps({"tokens": {digest("tok-acme"): "acme"}, "x": 1}))
    assert browser.get("/ui/jobs").status_code == 303


def test_a_tenant_cannot_open_another_tenants_job_runs_or_letters(browser: Browser) -> None:
    browser.sign_in("tok-beta")
    listed = browser.get("/ui/jobs").text
    assert "own" in listed
    assert "report" not in listed
    assert "acme" not in listed
    for path in ("/ui/jobs/report", "/ui/jobs/acme/report", "/ui/jobs/ops"):
        page = browser.get(path)
        assert page.status_code == 404, path
        assert "no job" in page.text, path
    runs = browser.get("/ui/runs?job=report").text
    assert "no job" in runs
    assert "acme-secret-error" not in runs
    for path in (
        "/ui/runs?status=failed",
        "/ui/runs?run_id=report@2026-11-26T10:00:00.000Z",
        "/ui/jobs/own",
    ):
        text = browser.get(path).text
        assert "acme-secret-error" not in text, path
        assert "operator-error" not in text, path
    assert "beta-error" in browser.get("/ui/runs?status=failed").text
    letters = browser.get("/ui/dlq").text
    assert "beta-letter" in letters
    assert not any(w in letters for w in ("acme-letter", "operator-letter", "unreadable"))


def test_an_operators_job_named_under_a_tenant_is_not_that_tenants(browser: Browser) -> None:
    """acme's stored ids start "acme/"; so does the operator's job "acme/ops": acme sees
    neither the job, nor its runs, nor its dead letters, though every query that asked
    by id found them."""
    browser.sign_in("tok-acme")
    assert browser.get("/ui/jobs/ops").status_code == 404
    run = browser.get("/ui/runs?run_id=ops@2026-11-26T10:00:00.000Z").text
    assert "operator-error" not in run  # its record, and what it printed
    own = browser.get("/ui/runs?run_id=report@2026-11-26T10:00:00.000Z").text
    assert "acme-secret-error-printed" in own  # acme's own run: its output shown
    mine = browser.get("/ui/runs?status=failed").text
    assert "acme-secret-error" in mine
    assert "operator-error" not in mine
    assert "operator-error" not in browser.get("/ui/jobs/report").text
    letters = browser.get("/ui/dlq").text
    assert "acme-letter" in letters
    assert "deleted-job-letter" in letters
    assert "operator-letter" not in letters
    assert "beta-letter" not in letters


def test_a_tenants_overview_counts_its_own(book: TokenBook) -> None:
    app, prometheus = dashboard(book)
    b = Browser(app)
    try:
        b.sign_in("tok-beta")
        figures = b.get("/ui/overview.json").json()
        assert (figures["jobs"], figures["dlq_records"]) == (1, None)
        assert "tenant beta's only" in b.get("/ui").text
        b.sign_in("tok-admin")
        figures = b.get("/ui/overview.json").json()
        assert (figures["jobs"], figures["dlq_records"]) == (3, len(LETTERS))
        assert prometheus.asked == ["beta", "beta", None]
    finally:
        b.close()


def test_the_admin_sees_every_tenants_rows(browser: Browser) -> None:
    browser.sign_in("tok-admin")
    assert all(j.job_id in browser.get("/ui/jobs").text for j in JOBS)
    failed = browser.get("/ui/runs?status=failed").text
    assert all(r.error in failed for r in RUNS if r.error)
    letters = browser.get("/ui/dlq").text
    assert all(w in letters for w in ("acme-letter", "operator-letter", "unreadable-letter"))


def test_pages_carry_the_security_headers_and_no_inline_script(browser: Browser) -> None:
    browser.sign_in("tok-admin")
    for path in ("/ui", "/ui/dlq", "/ui/jobs/beta/own", "/ui/login"):
        page = browser.get(path)
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        assert not re.search(r"\son[a-z]+\s*=", page.text, re.IGNORECASE), path
        assert "<script>" not in page.text, path  # scripts only from /ui/static


def test_a_forged_topic_name_stays_text(book: TokenBook) -> None:
    LETTERS.append(
        Letter(
            0,
            9,
            DeadLetter(
                reason="r",
                stage="sink",
                source_topic="x');alert(1);('",
                source_partition=0,
                source_offset=1,
                dead_at=NOW + timedelta(seconds=1),
                source_value=b"v",
            ),
        )
    )
    try:
        b = Browser(dashboard(book)[0])
        b.sign_in("tok-admin")
        page = b.get("/ui/dlq").text
        assert 'data-confirm="Write this record back to x&#39;);alert(1);(&#39;?"' in page
        assert "onsubmit" not in page
        b.close()
    finally:
        LETTERS.pop()


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"origin": "null", "sec-fetch-site": "same-origin"}, True),  # Chrome, no-referrer
        ({"origin": "http://127.0.0.1:8780"}, True),  # a browser without Sec-Fetch-Site
        ({}, True),  # not a browser (no cookie to ride on)
        ({"origin": "null", "sec-fetch-site": "cross-site"}, False),
        ({"origin": "https://evil.example", "sec-fetch-site": "same-site"}, False),
        ({"origin": "https://evil.example"}, False),
        ({"origin": "null"}, False),
    ],
)
def test_forms_are_taken_from_the_dashboards_own_pages_only(
    browser: Browser, headers: dict[str, str], accepted: bool
) -> None:
    reply = browser.post("/ui/login", {"token": "tok-acme"}, headers=headers)
    assert (reply.status_code == 303) is accepted, reply.text
    assert ("set-cookie" in reply.headers) is accepted


def test_a_tenants_live_figures_are_asked_by_its_tenant_label() -> None:
    asked = tenant_queries("beta")
    assert 'tenant="beta"' in asked["runs"]
    assert 'tenant="beta"' in asked["hour"]
    assert "letters" not in asked
    assert asked["fires"] == QUERIES["fires"]


def test_the_api_port_metrics_answer_the_metrics_token_alone_when_one_is_set(
    book: TokenBook,
) -> None:
    app = dashboard(book)[0]
    open_metrics = Browser(app)
    try:
        assert open_metrics.get("/metrics").status_code == 200  # the loopback: no token
    finally:
        open_metrics.close()
    app.state.metrics_token = b"scrape-token"  # serve() sets it beyond the loopback
    b = Browser(app)
    try:
        assert b.get("/metrics").status_code == 401
        wrong = b.get("/metrics", headers={"Authorization": "Bearer tok-admin"})
        assert wrong.status_code == 401
        right = b.get("/metrics", headers={"Authorization": "Bearer scrape-token"})
        assert right.status_code == 200
        assert "cronstream" in right.text
    finally:
        b.close()
