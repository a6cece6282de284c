"""Monitoring of the local stack: a real Prometheus and Alertmanager (Debian packages).

Prometheus scrapes every cronstream process listed in the file-based targets
(``runtime.scrape``: ``make run`` writes them), evaluates the rules shipped in
``infra/prometheus/rules.yml`` and sends firing alerts to Alertmanager, which routes
them to one webhook (``CRONSTREAM_ALERT_WEBHOOK``; ``make run`` serves it and prints
each alert). Both are ordinary ``Service``s of the stack (``make up`` starts them,
``make down`` stops them), identified by their data directory on the command line.

Configuration (environment): ``CRONSTREAM_PROMETHEUS_PORT`` (9190),
``CRONSTREAM_ALERTMANAGER_PORT`` (9193; Alertmanager's own 9093 is Kafka's controller
port here), ``CRONSTREAM_SCRAPE_INTERVAL_S`` (5), ``CRONSTREAM_ALERT_WEBHOOK``
(http://127.0.0.1:8790/alerts).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import yaml

from infra.service import INFRA_DIR, Service, require_tool
from runtime.scrape import targets_dir
from runtime.settings import Settings, env_int

RULES = INFRA_DIR / "prometheus" / "rules.yml"
DEFAULT_WEBHOOK = "http://127.0.0.1:8790/alerts"


def prometheus_config(
    *, targets: Path, rules: Path, alertmanager_port: int, interval_s: int
) -> dict[str, Any]:
    """prometheus.yml: the file-discovered cronstream targets and the rules."""
    every = f"{interval_s}s"
    return {
        "global": {
            "scrape_interval": every,
            "evaluation_interval": every,
            "scrape_timeout": f"{max(1, interval_s - 1)}s",
        },
        "rule_files": [str(rules)],
        "alerting": {
            "alertmanagers": [
                {"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]},
            ]
        },
        "scrape_configs": [
            {
                "job_name": "cronstream",
                "file_sd_configs": [
                    {"files": [str(targets / "*.json")], "refresh_interval": every}
                ],
            }
        ],
    }


def alertmanager_config(*, webhook: str, group_wait_s: int = 10) -> dict[str, Any]:
    """alertmanager.yml: every alert to one webhook, grouped by alert name and job."""
    return {
        "route": {
            "receiver": "webhook",
            "group_by": ["alertname", "role"],
            "group_wait": f"{group_wait_s}s",
            "group_interval": "1m",
            "repeat_interval": "4h",
        },
        "receivers": [
            {
                "name": "webhook",
                "webhook_configs": [
                    {"url": webhook, "send_resolved": True},
                ],
            }
        ],
    }


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class _Binary(Service):
    """A Debian-packaged Go binary run as a service of the stack."""

    binary: str
    package: str
    default_port: int
    port_env: str

    @property
    def port(self) -> int:
        return env_int(self.port_env, self.default_port, minimum=1)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def marker(self) -> str:  # no -D flag for a Go binary: its data directory marks it
        return f"--storage.{'tsdb.' if self.name == 'prometheus' else ''}path={self.data}"

    def fetch(self) -> None:
        require_tool(self.binary, f"apt-get install -y {self.package} (make deps does)")

    def ready(self) -> bool:
        return _answers(f"{self.endpoint}/-/ready")

    def argv(self, config: str, *more: str) -> list[str]:
        """The command line: the binary, the marker, its config file and address."""
        return [require_tool(self.binary, self.package), self.marker,
                f"--config.file={self.conf / config}",
                f"--web.listen-address=127.0.0.1:{self.port}", *more]  # fmt: skip

    def write(self, name: str, config: dict[str, Any]) -> Path:
        self.conf.mkdir(parents=True, exist_ok=True)
        path = self.conf / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path


class Prometheus(_Binary):
    name = "prometheus"
    binary, package = "prometheus", "prometheus"
    default_port, port_env = 9190, "CRONSTREAM_PROMETHEUS_PORT"
    start_timeout = 60.0

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        targets_dir(self.settings).mkdir(parents=True, exist_ok=True)
        self.write(
            "prometheus.yml",
            prometheus_config(
                targets=targets_dir(self.settings),
                rules=RULES,
                alertmanager_port=Alertmanager(self.settings).port,
                interval_s=env_int("CRONSTREAM_SCRAPE_INTERVAL_S", 5, minimum=1),
            ),
        )

    def command(self) -> list[str]:
        return self.argv("prometheus.yml", "--storage.tsdb.retention.time=15d",
                         "--web.enable-lifecycle")  # fmt: skip


class Alertmanager(_Binary):
    name = "alertmanager"
    binary, package = "prometheus-alertmanager", "prometheus-alertmanager"
    default_port, port_env = 9193, "CRONSTREAM_ALERTMANAGER_PORT"
    start_timeout = 60.0

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        webhook = os.environ.get("CRONSTREAM_ALERT_WEBHOOK") or DEFAULT_WEBHOOK
        self.write("alertmanager.yml", alertmanager_config(webhook=webhook))

    def command(self) -> list[str]:
        return self.argv("alertmanager.yml", "--cluster.listen-address=")  # one: no gossip


def ops_services(settings: Settings) -> list[Service]:
    return [Alertmanager(settings), Prometheus(settings)]
