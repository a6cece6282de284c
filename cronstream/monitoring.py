"""`make run`'s side of monitoring: each process's metrics port, the targets file the
stack's Prometheus discovers them by (``runtime.scrape``), and the webhook Alertmanager
delivers alerts to, printed on the console; and the PromQL of figures a dashboard shares
with the alert rules.

Ports (environment): ``r.METRICS_BASE_PORT`` (9301: scheduler, then worker, sink,
admission, the flows coordinator, the archiver, the dependency processor and the trigger
processor; the API serves /metrics on its own port) and ``r.ALERT_RECEIVER_PORT`` (8790,
the port of Alertmanager's default webhook); docs/configuration.md.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cronstream.runtime.options import roles as r
from cronstream.runtime.scrape import targets_dir, write_targets
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import ROLES as CATALOG_ROLES

# Each role with a metrics port of its own under ``make run``: its slot after the base
# port, in port order (``schemas.catalog.ROLES``: its ``metrics_slot``).
SLOTS: dict[str, int] = {
    name: slot
    for slot, name in sorted(
        (role.metrics_slot, name)
        for name, role in CATALOG_ROLES.items()
        if role.metrics_slot is not None
    )
}
ROLES = tuple(SLOTS)
API_PORT = 8780

# Due-to-start p99 per priority over 5 minutes, in seconds, one series per `priority` label
# (HIGH, NORMAL, LOW): how late runs start, what the precision alert reads. The recording
# rule cronstream:start_skew_seconds:p99_5m (infra/prometheus/rules.yml) is this very text
# (tests/unit/test_prometheus_rules.py); a dashboard queries it raw, to have figures
# before the rules' first evaluation.
DUE_TO_START_P99_BY_PRIORITY = (
    "histogram_quantile(0.99, sum by (le, priority) "
    "(rate(cronstream_worker_start_skew_seconds_bucket[5m])))"
)


def metrics_ports() -> dict[str, int]:
    base: int = r.METRICS_BASE_PORT.get()
    return {role: base + slot for role, slot in SLOTS.items()}


def publish_targets(settings: Settings, ports: dict[str, int]) -> None:
    """The targets of ``make run``'s processes, for the stack's Prometheus."""
    processes = {f"make-run-{role}": (role, port) for role, port in ports.items()}
    processes["make-run-api"] = ("api", API_PORT)
    write_targets(targets_dir(settings), "make-run", processes)


def withdraw_targets(settings: Settings) -> None:
    (targets_dir(settings) / "make-run.json").unlink(missing_ok=True)


def alert_lines(payload: dict[str, Any]) -> list[str]:
    """One line per alert of an Alertmanager webhook payload."""
    lines = []
    for alert in payload.get("alerts", []):
        labels, notes = alert.get("labels", {}), alert.get("annotations", {})
        status = str(alert.get("status", "?")).upper()
        where = ", ".join(
            f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("alertname", "severity")
        )
        name, severity = labels.get("alertname", "?"), labels.get("severity", "-")
        lines.append(
            f"{status} {name} [{severity}] {notes.get('summary', '')} ({where})"
            f" -> {notes.get('action', '')}"
        )
    return lines


def serve_posts(port: int, handle: Callable[[str, Any, bytes], None]) -> ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port`` answering every POST 200 after
    ``handle(path, headers, body)``, in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            handle(self.path, self.headers, body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve_alert_receiver(say: Callable[[str], None], port: int) -> ThreadingHTTPServer:
    """Alertmanager's webhook: each alert it delivers becomes a console line."""

    def handle(_path: str, _headers: Any, body: bytes) -> None:
        try:
            lines = alert_lines(json.loads(body))
        except (ValueError, AttributeError) as exc:
            lines = [f"unreadable webhook payload: {exc}"]
        for line in lines:
            say(line)

    return serve_posts(port, handle)
