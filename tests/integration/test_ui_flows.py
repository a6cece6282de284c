"""The dashboard's flow, audit, tenant, late-and-stuck pages and overview charts
in a real headless Chromium on the real stack (``test_ui``'s browser and pages): a
scheduler firing a job every second, a worker, a sink, a flows coordinator and the
stack's Prometheus. A diamond flow run (a -> b, a -> c, b & c -> d; b's target
answers 500) is drawn with its four nodes in their colours (checked on the SVG in the
DOM), a node clicked through to its run, the failed part rerun; the audit feed shows
it all; a tenant's page its quota used. A tenant cannot open another's flow run,
flow or tenant page. Screenshots: .stack/screenshots/ui/."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.common.by import By

from cronstream.producers.client import JobClient
from cronstream.producers.flows import flow_from_spec, flow_schedule
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import ADMIN, token_path
from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import RunOutcome, RunStatus, utc_now
from cronstream.ui.dag import NODE_COLOURS
from tests.integration.helpers import (
    CronstreamProcess,
    Target,
    cronstream,
    put_ui_job,
    signed_in,
    ui_process,
)
from tests.integration.history_runs import write_history
from tests.integration.tenants import AdmissionThread
from tests.integration.test_ui import Page, browser, scraped, scraped_roles

pytestmark = pytest.mark.integration
_ = (browser, scraped)  # fixtures
QUOTAS = {"CRONSTREAM_TENANT_MAX_JOBS": "3", "CRONSTREAM_TENANT_TRIGGERS_PER_SECOND": "0.5"}


def _diamond(url: str, flow_id: str = "diamond", tenant: str | None = None) -> dict[str, object]:
    def node(name: str, path: str, *after: str) -> dict[str, object]:
        return {
            "name": name,
            "after": list(after),
            "target": "http",
            "max_attempts": 1,
            "url": f"{url}/{path}/{name}",
        }

    spec: dict[str, object] = {
        "id": flow_id,
        "nodes": [
            node("a", "ok"),
            node("b", "fail", "a"),
            node("c", "ok", "a"),
            node("d", "ok", "b", "c"),
        ],
    }
    return spec if tenant is None else {**spec, "tenant": tenant}


def _stack(
    settings: Settings, procs: list[CronstreamProcess], tmp: Path, scraped: Path, target: Target
) -> str:
    """Every role a flow run and the charts need, a job firing every second, the diamond
    flow put as an operator; the dashboard's URL."""
    tick = {"id": "tick", "every": "1s", "target": "http", "url": f"{target.url}/ok/tick"}
    flows = tmp / "flows.yaml"
    flows.write_text(yaml.safe_dump({"flows": [_diamond(target.url)]}))
    put = cronstream(settings, "flows", "put", "-f", str(flows))
    assert put.returncode == 0, put.stderr
    with JobClient(settings) as client:
        client.put(job_from_spec(tick, max_payload_bytes=settings.max_payload_bytes))
    scraped_roles(settings, procs, tmp, scraped, ("--http-allow", "127.0.0.0/8"))
    coordinator = CronstreamProcess(
        settings, tmp, "flows", "--log-level", "INFO", command="flows-coordinator"
    )
    procs.append(coordinator)
    url = ui_process(settings, procs, tmp, env=QUOTAS, timeout=90)
    coordinator.wait_live(1, text="Ready", timeout=120)
    return url


def test_a_diamond_flow_run_is_drawn_in_its_colours_rerun_and_audited_in_a_browser(
    history_ns: Settings,
    two: tuple[str, str],
    admission: AdmissionThread,
    procs: list[CronstreamProcess],
    browser: webdriver.Chrome,
    tmp_path: Path,
    scraped: Path,
    target: Target,
) -> None:
    """(Screenshots: their paths in the test's output with ``-s``.)"""
    assert admission is not None  # the tenant's job is put through it
    url = _stack(history_ns, procs, tmp_path, scraped, target)
    page = Page(browser, url)
    page.sign_in(token_path(history_ns, ADMIN).read_text().strip())
    flow_run = _trigger(page)
    _diamond_drawn(page, browser, flow_run)
    _rerun(page, flow_run)
    _audit(page)
    _overview_and_stuck(page)
    _tenant_page(page, url, token_path(history_ns, two[0]).read_text().strip())
    print("\nscreenshots:", *(str(p) for p in page.shots), sep="\n  ")


def _trigger(page: Page) -> str:
    """The flows page lists the diamond; its page draws it; a trigger from there (after
    the confirmation page) starts a flow run: its id."""
    page.until("/ui/flows", lambda: "diamond" in page.text("#flows"))
    page.shot("flows")
    page.open("/ui/flows/diamond")
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "svg.dag g.node")) == 4
    page.shot("flow")
    page.click("#act-trigger")
    assert "Confirm: trigger diamond" in page.text("h1")
    page.click("#confirm")
    flash = page.text("#flash")
    assert flash.startswith("triggered diamond@manual:"), flash
    return flash.split()[-1]


def _fills(browser: webdriver.Chrome) -> dict[str, str]:
    """Node -> the fill of its box, as the DOM has the drawn SVG."""
    return {
        g.get_attribute("data-node") or "": g.find_element(By.CSS_SELECTOR, "rect").get_attribute(
            "fill"
        )
        or ""
        for g in browser.find_elements(By.CSS_SELECTOR, "svg.dag g.node")
    }


def _diamond_drawn(page: Page, browser: webdriver.Chrome, flow_run: str) -> None:
    """Once the run ended: a and c succeeded (green), b failed for good (its one attempt
    failed: dead-lettered, purple), d was not run (its upstream failed); the nodes'
    boxes in those colours; b clicked through to its run."""
    path = f"/ui/flow-runs/{quote(flow_run)}"
    # "no flow run" (404, no #flow-status) until history has the run's first record
    page.until(path, lambda: page.text("h1").endswith(" FAILED"), timeout=120)
    expected = {"a": "SUCCEEDED", "b": "DEAD_LETTERED", "c": "SUCCEEDED", "d": "UPSTREAM_FAILED"}
    assert _fills(browser) == {n: NODE_COLOURS[s] for n, s in expected.items()}
    assert len(set(_fills(browser).values())) == 3  # green, red, and d's own
    assert "1 attempt" in page.text("svg.dag")
    assert "500" in page.text("#node-runs")  # b's error: the target's answer
    page.shot("flow-run-diamond")
    page.click('svg.dag g.node[data-node="b"]')
    assert f"{flow_run}/b" in page.text("#results")
    assert "DEAD_LETTERED" in page.text("#results")
    page.shot("flow-node-run")


def _rerun(page: Page, flow_run: str) -> None:
    """Rerun from failed as the admin: b and d run again as ``~r1`` (b fails again)."""
    path = f"/ui/flow-runs/{quote(flow_run)}"
    page.open(path)
    page.click("#act-rerun")
    assert "Confirm: rerun diamond" in page.text("h1")
    page.click("#confirm")
    assert "rerun of the failed part" in page.text("#flash"), page.text()
    page.until(
        path,
        lambda: "b~r1" in page.text("#node-runs") and "rerun 1" in page.text("svg.dag"),
        timeout=120,
    )
    page.shot("flow-run-rerun")


def _audit(page: Page) -> None:
    """The global feed has the flow's put (the CLI), the trigger and the rerun (the
    dashboard's admin token); the flow's own trail the same."""
    page.open("/ui/audit")
    feed = page.text("#audit")
    for action in ("FLOW_PUT", "TRIGGER", "FLOW_RERUN"):
        assert action in feed, feed
    assert "ui admin token from 127.0.0.1" in feed
    page.shot("audit")
    page.open("/ui/audit?job=diamond")
    assert "FLOW_RERUN" in page.text("#audit")
    assert "tick" not in page.text("#audit")


def _overview_and_stuck(page: Page) -> None:
    """Five charts of the last hour on the overview, drawn from Prometheus once it has
    the job's fires and runs; the late-and-stuck list says what it covers."""
    page.until(
        "/ui",
        lambda: bool(page.driver.find_elements(By.CSS_SELECTOR, "#chart-runs polyline")),
        timeout=120,
    )
    assert len(page.driver.find_elements(By.CSS_SELECTOR, "#charts figure.chart-box")) == 5
    assert page.driver.find_elements(By.CSS_SELECTOR, "#chart-fires polyline")
    page.shot("overview-charts")
    page.open("/ui/stuck")
    assert "What this page covers" in page.text("#covers")
    assert "none" in page.text("#stuck-runs")
    page.shot("stuck")


def _tenant_page(page: Page, url: str, token: str) -> None:
    """A tenant's job put through the API; its page: its job, its quota used."""
    put_ui_job(url, token)
    page.sign_in(token)
    page.until("/ui/tenants", lambda: "report" in page.text("#tenant-jobs"))
    assert page.text("#quota-jobs") == "1 / 3"
    assert page.text("#quota-triggers").endswith("/ 0.5")
    assert "diamond" not in page.text()
    page.shot("tenant")


def _flow_run_rows(settings: Settings, tenant: str) -> None:
    """A FAILED diamond run of ``tenant``'s flow ``etl`` in history, as the coordinator
    and the worker write it."""
    now = utc_now()
    run = f"{tenant}/etl@manual:k"
    statuses = {
        "": "FAILED",
        "/a": "SUCCEEDED",
        "/b": "FAILED",
        "/c": "SUCCEEDED",
        "/d": "UPSTREAM_FAILED",
    }
    write_history(
        settings,
        (
            RunOutcome(
                run_id=run + node,
                job_id=f"{tenant}/etl",
                tenant=tenant,
                status=RunStatus(status),
                scheduled_at=now - timedelta(minutes=1),
                recorded_at=now,
                worker=FLOWS_APP if not node else "w",
                error=f"flow-error-of-{tenant}" if not node else None,
            )
            for node, status in statuses.items()
        ),
    )


def test_a_tenant_cannot_open_another_tenants_flow_run_flow_or_tenant_page(
    history_ns: Settings, two: tuple[str, str], procs: list[CronstreamProcess], tmp_path: Path
) -> None:
    a, b = two
    with JobClient(history_ns) as client:
        for t in two:
            spec = _diamond("https://example.com", f"{t}/etl", t)
            client.put_flow(
                flow_from_spec(spec, max_payload_bytes=65536),
                flow_schedule(spec, max_payload_bytes=65536),
            )
    for t in two:
        _flow_run_rows(history_ns, t)
    url = ui_process(history_ns, procs, tmp_path)
    with signed_in(url, token_path(history_ns, b).read_text().strip()) as cb:
        deadline = time.monotonic() + 60
        while ">etl<" not in (flows := cb.get("/ui/flows").text):
            assert time.monotonic() < deadline, flows
            time.sleep(1)
        assert a not in flows
        own = cb.get("/ui/flow-runs/etl@manual:k")
        assert own.status_code == 200, own.text
        assert own.text.count('class="node"') == 4
        assert f"flow-error-of-{b}" in own.text
        for path in (
            f"/ui/flow-runs/{a}/etl@manual:k",
            f"/ui/flows/{a}/etl",
            f"/ui/tenants/{a}",
            f"/ui/flow-confirm?action=trigger&flow={a}/etl",
        ):
            other = cb.get(path)
            assert other.status_code == 404, path
            assert f"flow-error-of-{a}" not in other.text, path
        feed = cb.get("/ui/audit").text
        assert f"{a}/etl" not in feed
        assert "FLOW_PUT" in feed  # its own flow's entry, by its own id
        assert cb.get("/ui/tenants").headers["location"] == f"/ui/tenants/{b}"
    with signed_in(url, token_path(history_ns, ADMIN).read_text().strip()) as admin:
        for t in two:
            page = admin.get(f"/ui/flow-runs/{t}/etl@manual:k")
            assert f"flow-error-of-{t}" in page.text
            assert admin.get(f"/ui/tenants/{t}").status_code == 200
