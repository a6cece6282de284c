"""Monitoring end to end on the real stack: a worker's /healthz, /readyz and /metrics; a
dead-lettered job seen by a real Prometheus (Debian's, with the rules shipped in
infra/prometheus) and delivered by a real Alertmanager to a webhook. Both run here with
their own ports and a 1 s scrape and evaluation interval (the stack's run with 5 s)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from cronstream.infra.ops import ops_services
from cronstream.infra.service import log_tail
from cronstream.runtime.consoles import ConsoleAccess, stack_console
from cronstream.runtime.metrics_server import serve as serve_metrics
from cronstream.runtime.scrape import targets_dir, write_targets
from cronstream.runtime.settings import Settings
from cronstream.ui.sources import Prometheus
from tests.integration.helpers import (
    CronstreamProcess,
    Target,
    cronstream,
    free_port,
    wait_http_up,
)

pytestmark = pytest.mark.integration


class Receiver:
    """A webhook that keeps every alert Alertmanager delivers."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        alerts = self.alerts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                alerts.extend(json.loads(body)["alerts"])
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@dataclass(frozen=True)
class Monitoring:
    """The stack's Prometheus and Alertmanager, started by their own ``Service`` code
    under a home of the test's (its CA, certificates and logins), on ports of its own,
    scraping and evaluating every second."""

    receiver: Receiver
    settings: Settings  # the home they run under
    targets: Path  # Prometheus's targets directory

    def access(self, console: str) -> ConsoleAccess:
        return stack_console(self.settings, console)


@pytest.fixture
def monitoring(
    base_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Monitoring]:
    receiver = Receiver()
    monkeypatch.setenv("CRONSTREAM_PROMETHEUS_PORT", str(free_port()))
    monkeypatch.setenv("CRONSTREAM_ALERTMANAGER_PORT", str(free_port()))
    monkeypatch.setenv("CRONSTREAM_SCRAPE_INTERVAL", "1s")
    monkeypatch.setenv("CRONSTREAM_ALERT_WEBHOOK", receiver.url)
    home = replace(base_settings, home=tmp_path / "home")  # none of the stack's services
    services = ops_services(home)
    try:
        for svc in services:
            svc.start()
            deadline = time.monotonic() + svc.start_timeout
            while not svc.ready():
                assert svc.running(), f"{svc.name} died: {log_tail(svc.log)}"
                assert time.monotonic() < deadline, f"{svc.name}: {log_tail(svc.log)}"
                time.sleep(0.2)
        yield Monitoring(receiver=receiver, settings=home, targets=targets_dir(home))
    finally:
        for svc in services:
            svc.stop()
        receiver.server.shutdown()
        receiver.server.server_close()


def test_a_dead_lettered_job_reaches_the_webhook_through_prometheus_and_alertmanager(  # long: one story
    ns: Settings,
    tmp_path: Path,
    target: Target,
    procs: list[CronstreamProcess],
    monitoring: Monitoring,
) -> None:
    """Prometheus scrapes the worker and logs in to Alertmanager over TLS (its config's
    basic_auth and tls_config): the alert reaches the webhook."""
    receiver, targets, prometheus = monitoring.receiver, monitoring.targets, monitoring
    port = free_port()
    worker = CronstreamProcess(
        ns,
        tmp_path,
        "w",
        "--http-allow",
        "127.0.0.0/8",
        "--metrics-port",
        str(port),
        command="worker",
    )
    procs.append(worker)
    worker.wait_live(1, text="assigned")
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/healthz").status_code == 200
    assert httpx.get(f"{base}/readyz").status_code == 200
    assert 'cronstream_dead_letters_total{stage="worker"} 0.0' in httpx.get(f"{base}/metrics").text
    write_targets(targets, "test", {"w": ("worker", port)})
    put = cronstream(
        ns,
        "jobs",
        "put",
        "doomed",
        "--every",
        "1h",
        "--target",
        "http",
        "--url",
        f"{target.url}/fail/doomed",
        "--max-attempts",
        "1",
    )
    assert put.returncode == 0, put.stderr
    # Prometheus has seen the counter at 0 before the letter (increase needs both).
    deadline = time.monotonic() + 60
    while not _query(prometheus, 'cronstream_dead_letters_total{stage="worker"}'):
        assert time.monotonic() < deadline, "Prometheus never scraped the worker"
        time.sleep(0.5)
    assert cronstream(ns, "runs", "trigger", "doomed").returncode == 0
    deadline = time.monotonic() + 90
    while not any(a["labels"]["alertname"] == "CronstreamDeadLetters" for a in receiver.alerts):
        assert time.monotonic() < deadline, f"no alert delivered: {receiver.alerts}"
        time.sleep(0.5)
    alert = next(a for a in receiver.alerts if a["labels"]["alertname"] == "CronstreamDeadLetters")
    assert alert["status"] == "firing"
    assert alert["labels"]["stage"] == "worker"
    assert alert["labels"]["severity"] == "ticket"
    assert alert["annotations"]["summary"].endswith("dead-lettered by the worker in 5 minutes")
    assert target.keys("/fail/doomed")  # the run really ran, and failed
    # The precision alert's input reaches Prometheus per priority: the worker serves the
    # due-to-start histogram of each priority from its start, which the rule records
    # (NaN while no scheduled run started; rules_test.yml has the alert's own cases).
    recorded = _query(prometheus, "cronstream:start_skew_seconds:p99_5m")
    assert {r["metric"]["priority"] for r in recorded} == {"HIGH", "NORMAL", "LOW"}

    # Two more runs of it fail: three in a row, an alert naming the job.
    for _ in range(2):
        assert cronstream(ns, "runs", "trigger", "doomed").returncode == 0
    deadline = time.monotonic() + 90
    while not (
        streak := [
            a
            for a in receiver.alerts
            if a["labels"]["alertname"] == "CronstreamJobFailingRepeatedly"
        ]
    ):
        assert time.monotonic() < deadline, f"no streak alert: {receiver.alerts}"
        time.sleep(0.5)
    assert streak[0]["labels"]["job_id"] == "doomed"
    assert streak[0]["annotations"]["summary"] == "job doomed: 3 attempts failed in a row"


def _query(monitoring: Monitoring, expr: str) -> list[Any]:
    with monitoring.access("prometheus").client() as client:
        answer = client.get("/api/v1/query", params={"query": expr}).json()
    return list(answer["data"]["result"])


def test_every_role_answers_healthz_readyz_and_metrics(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    roles = {
        "scheduler": "scheduler",
        "worker": "worker",
        "sink": "sink",
        "admission": "admission",
        "flows-coordinator": "flows-coordinator",
        "api": "api",
    }
    started = {}
    for role, command in roles.items():
        port = free_port()
        flag = "--port" if role == "api" else "--metrics-port"
        proc = CronstreamProcess(history_ns, tmp_path, role, flag, str(port), command=command)
        procs.append(proc)
        started[role] = (proc, f"http://127.0.0.1:{port}")
    for role, (proc, base) in started.items():
        for path in ("/healthz", "/readyz"):
            wait_http_up(
                base,
                120,
                lambda proc=proc: proc.log()[-3000:],
                path=path,
                alive=lambda proc=proc: proc.proc.poll() is None,
                every=0.3,
            )
        text = httpx.get(f"{base}/metrics").text
        assert "cronstream_" in text if role != "api" else "# HELP" in text, role
    assert httpx.get(f"{started['worker'][1]}/nothing").status_code == 404


def test_prometheus_and_alertmanager_answer_the_operator_alone_over_tls(
    monitoring: Monitoring,
) -> None:
    """Anonymous, with a wrong password or over plain HTTP: refused. Prometheus's
    /-/quit is off even for the operator (no --web.enable-lifecycle), and the stack
    keeps working: Prometheus scrapes a process and knows its Alertmanager."""
    paths = {"prometheus": "/api/v1/status/config", "alertmanager": "/api/v2/status"}
    for console, path in paths.items():
        access = monitoring.access(console)
        with httpx.Client(base_url=access.url, verify=access.verify) as anonymous:
            assert anonymous.get(path).status_code == 401, console
            assert anonymous.get("/-/ready").status_code == 401, console
            assert anonymous.post("/-/reload").status_code == 401, console
            assert anonymous.get(path, auth=(access.user, "wrong")).status_code == 401
        plain = httpx.get(access.url.replace("https://", "http://") + path)
        assert plain.status_code == 400, console  # "client sent HTTP to an HTTPS server"
        with access.client() as operator:
            assert operator.get(path).status_code == 200, console
    prometheus = monitoring.access("prometheus")
    with httpx.Client(base_url=prometheus.url, verify=prometheus.verify) as anonymous:
        assert anonymous.post("/-/quit").status_code == 401
    with prometheus.client() as operator:
        refused = operator.post("/-/quit")
        assert refused.status_code == 403, refused.text  # "Lifecycle API is not enabled."
        time.sleep(1)
        assert operator.get("/-/ready").status_code == 200  # still running
        deadline = time.monotonic() + 30
        while not (
            found := operator.get("/api/v1/alertmanagers").json()["data"]["activeAlertmanagers"]
        ):
            assert time.monotonic() < deadline, "Prometheus never found its Alertmanager"
            time.sleep(0.5)
        assert found[0]["url"].startswith(monitoring.access("alertmanager").url)

    server = serve_metrics(free_port())
    assert server is not None
    try:
        write_targets(monitoring.targets, "test", {"p": ("worker", server.server_address[1])})
        deadline = time.monotonic() + 60
        while [r["value"][1] for r in _query(monitoring, 'up{process="p"}')] != ["1"]:
            assert time.monotonic() < deadline, "Prometheus never scraped the process"
            time.sleep(0.5)
        # the dashboard's client (its charts and figures) logs in the same way
        dashboard = Prometheus(monitoring.access("prometheus"))
        try:
            (labels, value), *_ = dashboard.query('up{process="p"}')
            assert (labels["role"], value) == ("worker", 1.0)
            assert dashboard.overview().error is None
        finally:
            dashboard.close()
    finally:
        server.shutdown()
        server.server_close()
