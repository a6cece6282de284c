"""Monitoring end to end on the real stack: a worker's /healthz, /readyz and /metrics; a
dead-lettered job seen by a real Prometheus (Debian's, with the rules shipped in
infra/prometheus) and delivered by a real Alertmanager to a webhook. Both run here with
their own ports and a 1 s scrape and evaluation interval (the stack's run with 5 s)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from infra.ops import RULES, alertmanager_config, prometheus_config
from runtime.scrape import write_targets
from runtime.settings import Settings
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


@pytest.fixture
def monitoring(tmp_path: Path) -> Iterator[tuple[Receiver, Path, int]]:
    """(the webhook, Prometheus's targets directory, Prometheus's port)."""
    receiver = Receiver()
    targets = tmp_path / "targets"
    targets.mkdir()
    am_port, prom_port = free_port(), free_port()
    am_conf, prom_conf = tmp_path / "alertmanager.yml", tmp_path / "prometheus.yml"
    am_conf.write_text(yaml.safe_dump(alertmanager_config(webhook=receiver.url, group_wait_s=1)))
    prom_conf.write_text(yaml.safe_dump(prometheus_config(
        targets=targets, rules=RULES, alertmanager_port=am_port, interval_s=1)))  # fmt: skip
    commands = {
        "alertmanager": ["prometheus-alertmanager", f"--config.file={am_conf}",
                         f"--storage.path={tmp_path / 'am'}", "--cluster.listen-address=",
                         f"--web.listen-address=127.0.0.1:{am_port}"],
        "prometheus": ["prometheus", f"--config.file={prom_conf}",
                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                       f"--web.listen-address=127.0.0.1:{prom_port}"],
    }  # fmt: skip
    procs = []
    try:
        for name, command in commands.items():
            log = tmp_path / f"{name}.log"
            with log.open("wb") as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
            procs.append(proc)
            port = am_port if name == "alertmanager" else prom_port
            wait_http_up(f"http://127.0.0.1:{port}", 60, lambda log=log: log.read_text()[-3000:],
                         path="/-/ready", alive=lambda proc=proc: proc.poll() is None,
                         every=0.2)  # fmt: skip
        yield receiver, targets, prom_port
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)
        receiver.server.shutdown()
        receiver.server.server_close()


def test_a_dead_lettered_job_reaches_the_webhook_through_prometheus_and_alertmanager(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess],
    monitoring: tuple[Receiver, Path, int],
) -> None:  # fmt: skip
    receiver, targets, prom_port = monitoring
    port = free_port()
    worker = CronstreamProcess(ns, tmp_path, "w", "--http-allow", "127.0.0.0/8",
                               "--metrics-port", str(port), command="worker")  # fmt: skip
    procs.append(worker)
    worker.wait_live(1, text="assigned")
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/healthz").status_code == 200
    assert httpx.get(f"{base}/readyz").status_code == 200
    assert 'cronstream_dead_letters_total{stage="worker"} 0.0' in httpx.get(f"{base}/metrics").text
    write_targets(targets, "test", {"w": ("worker", port)})
    put = cronstream(ns, "jobs", "put", "doomed", "--every", "1h", "--target", "http",
                     "--url", f"{target.url}/fail/doomed", "--max-attempts", "1")  # fmt: skip
    assert put.returncode == 0, put.stderr
    # Prometheus has seen the counter at 0 before the letter (increase needs both).
    deadline = time.monotonic() + 60
    while not _query(prom_port, 'cronstream_dead_letters_total{stage="worker"}'):
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
    recorded = _query(prom_port, "cronstream:start_skew_seconds:p99_5m")
    assert {r["metric"]["priority"] for r in recorded} == {"HIGH", "NORMAL", "LOW"}

    # Two more runs of it fail: three in a row, an alert naming the job.
    for _ in range(2):
        assert cronstream(ns, "runs", "trigger", "doomed").returncode == 0
    deadline = time.monotonic() + 90
    while not (streak := [a for a in receiver.alerts
                          if a["labels"]["alertname"] == "CronstreamJobFailingRepeatedly"]):  # fmt: skip
        assert time.monotonic() < deadline, f"no streak alert: {receiver.alerts}"
        time.sleep(0.5)
    assert streak[0]["labels"]["job_id"] == "doomed"
    assert streak[0]["annotations"]["summary"] == "job doomed: 3 attempts failed in a row"


def _query(port: int, expr: str) -> list[Any]:
    answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": expr}).json()
    return list(answer["data"]["result"])


def test_every_role_answers_healthz_readyz_and_metrics(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    roles = {"scheduler": "scheduler", "worker": "worker", "sink": "sink",
             "admission": "admission", "flows": "flows-coordinator", "api": "api"}  # fmt: skip
    started = {}
    for role, command in roles.items():
        port = free_port()
        flag = "--port" if role == "api" else "--metrics-port"
        proc = CronstreamProcess(history_ns, tmp_path, role, flag, str(port), command=command)
        procs.append(proc)
        started[role] = (proc, f"http://127.0.0.1:{port}")
    for role, (proc, base) in started.items():
        for path in ("/healthz", "/readyz"):
            wait_http_up(base, 120, lambda proc=proc: proc.log()[-3000:], path=path,
                         alive=lambda proc=proc: proc.proc.poll() is None, every=0.3)  # fmt: skip
        text = httpx.get(f"{base}/metrics").text
        assert "cronstream_" in text if role != "api" else "# HELP" in text, role
    assert httpx.get(f"{started['worker'][1]}/nothing").status_code == 404
