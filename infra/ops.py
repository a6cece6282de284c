"""Monitoring of the local stack: a real Prometheus and Alertmanager (Debian packages).

Prometheus scrapes every cronstream process listed in the file-based targets
(``runtime.scrape``: ``make run`` writes them), evaluates the rules shipped in
``infra/prometheus/rules.yml`` and sends firing alerts to Alertmanager, which routes
them to one webhook (``o.ALERT_WEBHOOK``; ``make run`` serves it and prints
each alert). Both are ordinary ``Service``s of the stack (``make up`` starts them,
``make down`` stops them), identified by their data directory on the command line.

Both are consoles anyone on the host could drive (Prometheus's ``/-/quit``, silences,
every tenant's figures), so each answers HTTPS only, with the stack's server
certificate, and only the operator's login (``runtime.consoles``: basic auth, the
password in the stack's credentials, bcrypt-hashed in ``--web.config.file``).
Prometheus runs without ``--web.enable-lifecycle`` (no ``/-/quit``, no ``/-/reload``:
a changed config is a restart); Alertmanager's ``/-/reload`` wants the login.
Prometheus logs in to Alertmanager the same way (``alerting``: basic auth and the
stack's CA).

Configuration (environment): ``o.PROMETHEUS_PORT`` (9190), ``o.ALERTMANAGER_PORT``
(9193; Alertmanager's own 9093 is Kafka's controller port here), ``o.SCRAPE_INTERVAL``
(5s; whole seconds, at least one), ``o.ALERT_WEBHOOK`` (http://127.0.0.1:8790/alerts);
docs/configuration.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import yaml

from cronstream.infra.security import ensure_secret_file, ensure_tls, write_private
from cronstream.infra.service import INFRA_DIR, Service, require_tool
from cronstream.runtime.consoles import (
    CONSOLE_USER,
    console_port,
    console_secret_path,
    stack_console,
)
from cronstream.runtime.credentials import stack_ca
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options import services as o
from cronstream.runtime.scrape import targets_dir
from cronstream.runtime.settings import Settings

RULES = INFRA_DIR / "prometheus" / "rules.yml"
DEFAULT_WEBHOOK = "http://127.0.0.1:8790/alerts"


BCRYPT_COST = 10  # Prometheus checks the hash once per login and caches it


def web_config(settings: Settings, console: str) -> dict[str, Any]:
    """``--web.config.file`` of ``console`` (prometheus, alertmanager): HTTPS with the
    stack's server certificate, and the operator's login, its password made at first
    use and stored bcrypt-hashed here."""
    tls = ensure_tls(settings)
    password = ensure_secret_file(settings, console_secret_path(settings, console))
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()
    return {
        "tls_server_config": {
            "cert_file": str(tls / "server-cert.pem"),
            "key_file": str(tls / "server-key.pem"),
        },
        "basic_auth_users": {CONSOLE_USER: hashed},
    }


def scrape_interval_s(env: Mapping[str, str] | None = None) -> int:
    """``o.SCRAPE_INTERVAL`` in whole seconds (rounded down), what the scrape and rule
    evaluation intervals are written in (the scrape timeout a second less); SettingsError
    below one second."""
    ms: int = o.SCRAPE_INTERVAL.get(env)
    if ms < 1000:
        raise SettingsError(f"{o.SCRAPE_INTERVAL.env}: at least 1s")
    return ms // 1000


def prometheus_config(
    *, targets: Path, rules: Path, alertmanager_port: int, interval_s: int, settings: Settings
) -> dict[str, Any]:
    """prometheus.yml: the file-discovered cronstream targets, the rules, and
    Alertmanager over HTTPS with the operator's login (its password file, never the
    password)."""
    every = f"{interval_s}s"
    alertmanager = {
        "scheme": "https",
        "basic_auth": {
            "username": CONSOLE_USER,
            "password_file": str(console_secret_path(settings, "alertmanager")),
        },
        "tls_config": {"ca_file": str(stack_ca(settings))},
        "static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}],
    }
    return {
        "global": {
            "scrape_interval": every,
            "evaluation_interval": every,
            "scrape_timeout": f"{max(1, interval_s - 1)}s",
        },
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [alertmanager]},
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


class _Binary(Service):
    """A Debian-packaged Go binary run as a service of the stack, one of its consoles."""

    binary: str
    package: str
    start_timeout = 60.0

    @property
    def port(self) -> int:
        return console_port(self.name)

    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def marker(self) -> str:  # no -D flag for a Go binary: its data directory marks it
        return f"--storage.{'tsdb.' if self.name == 'prometheus' else ''}path={self.data}"

    def fetch(self) -> None:
        require_tool(self.binary, f"apt-get install -y {self.package} (make deps does)")

    def ready(self) -> bool:
        """It answers ``/-/ready`` to the operator's login, over HTTPS."""
        try:
            with stack_console(self.settings, self.name).client(timeout=2) as client:
                return client.get("/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def argv(self, config: str, *more: str) -> list[str]:
        """The command line: the binary, the marker, its config files and address."""
        return [
            require_tool(self.binary, self.package),
            self.marker,
            f"--config.file={self.conf / config}",
            f"--web.config.file={self.conf / f'{self.name}-web.yml'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            *more,
        ]

    def write(self, name: str, config: dict[str, Any]) -> Path:
        self.conf.mkdir(parents=True, exist_ok=True)
        path = self.conf / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def write_web_config(self) -> None:
        """Its ``--web.config.file`` (owner-only: it holds the login's hash)."""
        text = yaml.safe_dump(web_config(self.settings, self.name), sort_keys=False)
        write_private(self.conf / f"{self.name}-web.yml", text.encode())

    def prepare(self) -> None:
        """Its data folder and its web config, then its own configuration."""
        self.data.mkdir(parents=True, exist_ok=True)
        self.write_web_config()
        self.configure()

    def configure(self) -> None:
        """Write its config file (``write``) and what that file names."""
        raise NotImplementedError


class Prometheus(_Binary):
    name = "prometheus"
    binary, package = "prometheus", "prometheus"

    def configure(self) -> None:
        targets_dir(self.settings).mkdir(parents=True, exist_ok=True)
        ensure_secret_file(self.settings, console_secret_path(self.settings, "alertmanager"))
        self.write(
            "prometheus.yml",
            prometheus_config(
                targets=targets_dir(self.settings),
                rules=RULES,
                alertmanager_port=Alertmanager(self.settings).port,
                interval_s=scrape_interval_s(),
                settings=self.settings,
            ),
        )

    def command(self) -> list[str]:
        # no --web.enable-lifecycle: /-/quit and /-/reload stay off (a restart reloads)
        return self.argv("prometheus.yml", "--storage.tsdb.retention.time=15d")


class Alertmanager(_Binary):
    name = "alertmanager"
    binary, package = "prometheus-alertmanager", "prometheus-alertmanager"

    def configure(self) -> None:
        webhook = o.ALERT_WEBHOOK.get(default=DEFAULT_WEBHOOK)
        self.write("alertmanager.yml", alertmanager_config(webhook=webhook))

    def command(self) -> list[str]:
        return self.argv("alertmanager.yml", "--cluster.listen-address=")  # one: no gossip


def ops_services(settings: Settings) -> list[Service]:
    return [Alertmanager(settings), Prometheus(settings)]
