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

import pytest
import yaml

from cronstream.monitoring import DUE_TO_START_P99_BY_PRIORITY
from infra.ops import RULES, alertmanager_config, prometheus_config
from runtime import metrics

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
    recorded = [{"record": f"dashboard:panel{i}", "expr": e}
                for i, e in enumerate(_dashboard_exprs())]  # fmt: skip
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": recorded}]}))
    check = _run(_tool("promtool"), "check", "rules", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(recorded)} rules found" in check.stdout


def test_the_generated_configs_are_valid_for_prometheus_and_alertmanager(tmp_path: Path) -> None:
    (tmp_path / "targets").mkdir()
    prometheus = tmp_path / "prometheus.yml"
    prometheus.write_text(yaml.safe_dump(prometheus_config(
        targets=tmp_path / "targets", rules=RULES, alertmanager_port=9193, interval_s=5)))  # fmt: skip
    check = _run(_tool("promtool"), "check", "config", str(prometheus))
    assert check.returncode == 0, check.stdout + check.stderr
    manager = tmp_path / "alertmanager.yml"
    manager.write_text(yaml.safe_dump(alertmanager_config(webhook="http://127.0.0.1:1/alerts")))
    check = _run(_tool("amtool"), "check-config", str(manager))
    assert check.returncode == 0, check.stdout + check.stderr
