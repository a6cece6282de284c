"""The monitoring shipped in infra/: the alert rules pass their promtool unit tests, name
only metrics cronstream exports, and the generated Prometheus and Alertmanager configs and
the Grafana dashboard's queries are valid for the real tools (Debian's prometheus and
prometheus-alertmanager, installed by make deps: a missing tool fails, never skips)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import bcrypt
import pytest
import yaml

from cronstream.infra.ops import (
    RULES,
    alertmanager_config,
    prometheus_config,
    scrape_interval_s,
    web_config,
)
from cronstream.monitoring import DUE_TO_START_P99_BY_PRIORITY
from cronstream.runtime import metrics
from cronstream.runtime.consoles import CONSOLE_USER, console_secret_path
from cronstream.runtime.errors import SettingsError
from cronstream.runtime.settings import Settings

GRAFANA = Path(__file__).resolve().parents[2] / "infra" / "grafana" / "cronstream-dashboard.json"
SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is missing: make deps installs it (Debian package)"
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)


def test_the_rules_pass_promtools_checks_and_unit_tests() -> None:
    check = _run(_tool("promtool"), "check", "rules", str(RULES))
    assert check.returncode == 0, check.stdout + check.stderr
    tested = _run(_tool("promtool"), "test", "rules", str(RULES.with_name("rules_test.yml")))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def _exported() -> set[str]:
    return {m.name for m in metrics.REGISTRY.collect()}


def _named(expr: str) -> set[str]:
    names = set()
    for found in re.findall(r"\bcronstream_[a-z_]+", expr):
        name = found
        for suffix in SUFFIXES:
            name = name.removesuffix(suffix)
        names.add(name)
    return names


def _rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    panels = json.loads(GRAFANA.read_text())["panels"]
    return [t["expr"] for p in panels for t in p["targets"]]


@pytest.mark.parametrize("source", ["rules", "dashboard"])
def test_every_metric_named_is_one_cronstream_exports(source: str) -> None:
    exprs = _rule_exprs() if source == "rules" else _dashboard_exprs()
    named = set().union(*(_named(e) for e in exprs))
    assert named, "no cronstream metric named at all"
    assert named <= _exported(), f"not exported: {sorted(named - _exported())}"


def test_the_dashboards_due_to_start_query_is_the_one_the_precision_alert_reads() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {r["record"]: r["expr"] for g in groups for r in g["rules"] if "record" in r}
    assert recorded["cronstream:start_skew_seconds:p99_5m"] == DUE_TO_START_P99_BY_PRIORITY


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    recorded = [
        {"record": f"dashboard:panel{i}", "expr": e} for i, e in enumerate(_dashboard_exprs())
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": recorded}]}))
    check = _run(_tool("promtool"), "check", "rules", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(recorded)} rules found" in check.stdout


def test_the_scrape_interval_is_whole_seconds() -> None:
    assert scrape_interval_s({}) == 5
    assert scrape_interval_s({"CRONSTREAM_SCRAPE_INTERVAL": "1s"}) == 1
    assert scrape_interval_s({"CRONSTREAM_SCRAPE_INTERVAL": "1m"}) == 60
    assert scrape_interval_s({"CRONSTREAM_SCRAPE_INTERVAL_S": "2"}) == 2  # the older name
    with pytest.raises(SettingsError, match="CRONSTREAM_SCRAPE_INTERVAL: at least 1s"):
        scrape_interval_s({"CRONSTREAM_SCRAPE_INTERVAL": "500ms"})


def test_the_generated_configs_are_valid_for_prometheus_and_alertmanager(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path / "home")})
    (tmp_path / "targets").mkdir()
    prometheus = tmp_path / "prometheus.yml"
    config = prometheus_config(
        targets=tmp_path / "targets",
        rules=RULES,
        alertmanager_port=9193,
        interval_s=5,
        settings=settings,
    )
    (alertmanager,) = config["alerting"]["alertmanagers"]
    assert alertmanager["scheme"] == "https"
    assert alertmanager["basic_auth"]["username"] == CONSOLE_USER
    assert "password" not in alertmanager["basic_auth"]  # its file, never the password
    web = {console: tmp_path / f"{console}-web.yml" for console in ("prometheus", "alertmanager")}
    for console, path in web.items():
        path.write_text(yaml.safe_dump(web_config(settings, console)))
    assert Path(alertmanager["basic_auth"]["password_file"]).exists()
    prometheus.write_text(yaml.safe_dump(config))
    check = _run(_tool("promtool"), "check", "config", str(prometheus))
    assert check.returncode == 0, check.stdout + check.stderr
    manager = tmp_path / "alertmanager.yml"
    manager.write_text(yaml.safe_dump(alertmanager_config(webhook="http://127.0.0.1:1/alerts")))
    check = _run(_tool("amtool"), "check-config", str(manager))
    assert check.returncode == 0, check.stdout + check.stderr
    check = _run(_tool("promtool"), "check", "web-config", *map(str, web.values()))
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_consoles_web_config_wants_the_operators_bcrypt_login_over_tls(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    config = web_config(settings, "prometheus")
    password = console_secret_path(settings, "prometheus").read_text().strip()
    assert len(password) >= 32
    assert console_secret_path(settings, "prometheus").stat().st_mode & 0o077 == 0
    (hashed,) = config["basic_auth_users"].values()
    assert hashed.startswith("$2b$")
    assert password not in hashed
    assert bcrypt.checkpw(password.encode(), hashed.encode())
    assert Path(config["tls_server_config"]["cert_file"]).exists()
    again = web_config(settings, "prometheus")["basic_auth_users"][CONSOLE_USER]
    assert bcrypt.checkpw(password.encode(), again.encode())  # the same password each start


def test_grafanas_data_source_logs_in_over_tls() -> None:
    provisioned = yaml.safe_load(GRAFANA.with_name("datasource.yaml").read_text())
    (source,) = provisioned["datasources"]
    assert (source["type"], source["basicAuth"], source["basicAuthUser"]) == (
        "prometheus",
        True,
        CONSOLE_USER,
    )
    assert source["jsonData"]["tlsAuthWithCACert"] is True
    secure = source["secureJsonData"]
    assert secure["basicAuthPassword"].startswith("$__file{")  # never the password itself
    assert secure["tlsCACert"].startswith("$__file{")
