"""The dashboard's flow, audit, tenant and late-and-stuck pages with the
backend's reads faked as in ``test_ui_access``: a flow run drawn in its nodes' colours,
and a tenant that sees its own flows, flow runs, audit entries and tenant page only,
whatever the fakes answered (they ignore who asks). The real stack runs them in
``tests/integration/test_ui_flows.py``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

import httpx
import pytest

from cronstream.api.backend import Backend
from cronstream.producers.admission.core import JobsView
from cronstream.producers.flows import flow_from_spec, flow_schedule
from cronstream.runtime.tokens import TokenBook
from cronstream.schemas.audit import AuditAction, AuditRecord
from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.events import RunOutcome, RunStatus, utc_now
from cronstream.schemas.flows import FlowDefinition
from cronstream.ui.app import build_ui_app
from cronstream.ui.charts import COLOURS
from cronstream.ui.dag import NODE_COLOURS
from cronstream.ui.sources import AuditTrail, DeadLetters, FlowBook, Prometheus, Reads
from cronstream.ui.stuck_pages import GRACE_S, overdue
from tests.fakes import FakeHistory
from tests.unit.test_ui_access import Browser, FakeLetters, FakePrometheus, book
from tests.unit.test_ui_drawing import node_fills

NOW = utc_now()
SPEC = {
    "nodes": [
        {"name": n, "after": after, "target": "http", "url": f"https://example.com/{n}"}
        for n, after in (("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"]))
    ]
}
STATUSES = {"a": "SUCCEEDED", "b": "FAILED", "c": "SUCCEEDED", "d": "UPSTREAM_FAILED"}
_ = book  # the token book fixture


def _flow(stored: str, tenant: str) -> tuple[FlowDefinition, Any]:
    spec = {**SPEC, "id": stored, "tenant": tenant}
    return (
        flow_from_spec(spec, max_payload_bytes=65536),
        flow_schedule(spec, max_payload_bytes=65536),
    )


# acme's flow, beta's, and an operator's (tenant default) whose id starts "acme/".
PAIRS = [
    _flow(s, t) for s, t in (("acme/etl", "acme"), ("beta/etl", "beta"), ("acme/ops", "default"))
]
FLOWS = [flow for flow, _ in PAIRS]


def _rows(flow_run: str, tenant: str) -> list[RunOutcome]:
    def row(run_id: str, status: str, **kw: Any) -> RunOutcome:
        return RunOutcome(
            run_id=run_id,
            job_id=flow_run.rpartition("@")[0],
            tenant=tenant,
            status=RunStatus(status),
            scheduled_at=NOW,
            recorded_at=NOW,
            **kw,
        )

    return [
        row(flow_run, "FAILED", worker=FLOWS_APP, error=f"flow-error-of-{tenant}"),
        *(row(f"{flow_run}/{n}", s, duration_ms=1200, worker="w") for n, s in STATUSES.items()),
    ]


ROWS = [r for f in FLOWS for r in _rows(f"{f.flow_id}@manual:k", f.tenant)]


class FlowHistory(FakeHistory):
    """Every flow's runs, whoever's they are; a flow run asked for by an id that ends as
    acme's does (``etl@manual:k``) answers acme's: only the pages' own check stands
    between tenants."""

    def flow_run(self, flow_run_id: str) -> list[RunOutcome]:
        found = super().flow_run(flow_run_id)
        if not found and flow_run_id.endswith("etl@manual:k"):
            return super().flow_run(f"{FLOWS[0].flow_id}@manual:k")  # must not be shown
        return found


@dataclass
class FakeBackend:
    view: JobsView
    history: FlowHistory


@dataclass
class FakeBook:
    flows: dict[str, FlowDefinition]
    ready: bool = True


class FakeAudit:
    def last(self, limit: int) -> list[AuditRecord]:
        return [
            AuditRecord(
                audit_id=str(i),
                action=AuditAction.FLOW_PUT,
                job_id=f.flow_id,
                at=NOW,
                principal="ops",
                origin="here",
                tenant=f.tenant,
                detail=f"entry-of-{f.flow_id}",
            )
            for i, f in enumerate(FLOWS)
        ][:limit]


class DeadPrometheus(FakePrometheus):
    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        raise httpx.ConnectError("refused")

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Any]:
        raise httpx.ConnectError("refused")


@pytest.fixture
def browser(book: TokenBook) -> Iterator[Browser]:
    view = JobsView()
    for _, job in PAIRS:
        view.observe(job.job_id, job)
    backend = cast(Backend, FakeBackend(view, FlowHistory(ROWS, every_job=True)))
    reads = Reads(
        cast(Prometheus, DeadPrometheus()),
        cast(DeadLetters, FakeLetters()),
        cast(FlowBook, FakeBook({f.flow_id: f for f in FLOWS})),
        cast(AuditTrail, FakeAudit()),
    )
    b = Browser(build_ui_app(backend, book, reads))
    yield b
    b.close()


def test_a_flow_run_is_drawn_in_its_nodes_status_colours_each_linked_to_its_run(
    browser: Browser,
) -> None:
    browser.sign_in("tok-acme")
    page = browser.get("/ui/flow-runs/etl@manual:k")
    assert page.status_code == 200, page.text
    assert node_fills(page.text) == {n: NODE_COLOURS[s] for n, s in STATUSES.items()}
    assert (NODE_COLOURS["SUCCEEDED"], NODE_COLOURS["FAILED"]) == (
        COLOURS["SUCCEEDED"],
        COLOURS["FAILED"],
    )
    assert '<a href="/ui/runs?run_id=etl%40manual%3Ak%2Fb">' in page.text
    assert "1.2 s · 1 attempt" in page.text
    assert "acme/" not in page.text  # the tenant's own ids
    assert 'id="act-rerun"' not in page.text  # the admin's only
    assert 'id="act-trigger"' in page.text


def test_a_tenant_sees_its_own_flows_and_flow_runs_only(browser: Browser) -> None:
    browser.sign_in("tok-beta")
    listed = browser.get("/ui/flows").text
    assert ">etl<" in listed
    assert "acme" not in listed
    for path in (
        "/ui/flows/acme/etl",
        "/ui/flows/ops",
        "/ui/flow-runs/acme/etl@manual:k",
        "/ui/flow-runs/ops@manual:k",
        "/ui/flow-confirm?action=trigger&flow=acme/etl",
    ):
        page = browser.get(path)
        assert page.status_code == 404, path
        assert "flow-error-of-acme" not in page.text, path
    own = browser.get("/ui/flow-runs/etl@manual:k")
    assert "flow-error-of-beta" in own.text
    refused = browser.post("/ui/flow-act", {"action": "rerun", "job": "etl", "run": "etl@manual:k"})
    assert "needs+the+admin+token" in refused.headers["location"]
    other = browser.post("/ui/flow-act", {"action": "trigger", "job": "acme/etl"})
    assert "no+flow" in other.headers["location"]


def test_the_admin_sees_every_flow_and_may_rerun_a_failed_one(browser: Browser) -> None:
    browser.sign_in("tok-admin")
    listed = browser.get("/ui/flows").text
    assert all(f.flow_id in listed for f in FLOWS)
    page = browser.get("/ui/flow-runs/acme/ops@manual:k").text
    assert "flow-error-of-default" in page
    assert 'id="act-rerun"' in page
    confirm = browser.get("/ui/flow-confirm?action=rerun&flow=acme/ops&run=acme/ops@manual:k")
    assert 'action="/ui/flow-act"' in confirm.text


def test_a_tenant_sees_its_own_audit_entries_and_tenant_page_only(browser: Browser) -> None:
    browser.sign_in("tok-beta")
    feed = browser.get("/ui/audit").text
    assert "entry-of-beta/etl" in feed
    assert "entry-of-acme" not in feed
    assert browser.get("/ui/tenants/acme").status_code == 404
    assert browser.get("/ui/tenants/default").status_code == 404
    assert browser.get("/ui/tenants").headers["location"] == "/ui/tenants/beta"
    own = browser.get("/ui/tenants/beta")
    assert own.status_code == 200
    assert 'id="quota-jobs">1 / 1000<' in own.text
    assert "flow-error-of-beta" in own.text  # its failing job
    assert "flow-error-of-acme" not in own.text
    browser.sign_in("tok-admin")
    assert all(f"entry-of-{f.flow_id}" in browser.get("/ui/audit").text for f in FLOWS)
    assert "/ui/tenants/acme" in browser.get("/ui/tenants").text


def test_the_pages_render_without_prometheus_saying_no_data(browser: Browser) -> None:
    browser.sign_in("tok-admin")
    overview = browser.get("/ui")
    assert overview.status_code == 200
    assert overview.text.count('class="chart-box"') == 5
    assert overview.text.count("no data") == 5
    assert "did not answer" in overview.text
    for path in ("/ui/stuck", "/ui/tenants/acme"):
        page = browser.get(path)
        assert page.status_code == 200, path
        assert "did not answer" in page.text, path


def _started(attempt: int = 1, **kw: Any) -> RunOutcome:
    return RunOutcome(
        run_id="j@1",
        job_id="j",
        status=RunStatus.STARTED,
        attempt=attempt,
        scheduled_at=NOW,
        recorded_at=NOW - timedelta(minutes=10),
        **kw,
    )


def test_an_attempt_open_past_its_timeout_and_grace_is_stuck() -> None:
    start = _started(started_at=NOW - timedelta(minutes=10))
    assert overdue(start, [start], 30_000, NOW) == pytest.approx(600 - 30 - GRACE_S)
    assert overdue(start, [start], 600_000, NOW) is None  # within its timeout
    assert overdue(start, [start, replace(start, status=RunStatus.SUCCEEDED)], 30_000, NOW) is None
    assert overdue(start, [start, _started(attempt=2)], 30_000, NOW) is None  # retried
    assert overdue(start, [start], None, NOW) is None  # unknown timeout: an hour
