"""The deployment files in infra/deploy validate offline (part of make lint): Kubernetes
manifests against the API's schemas (kubernetes-validate, strict), systemd units with
systemd-analyze verify; each role runs a command our CLI accepts, with probes on the
port it serves /healthz and /readyz on, resources, and a disruption budget."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cronstream.cli import build_parser
from cronstream.runtime.metrics_server import is_loopback
from cronstream.schemas.catalog import ROLES as CATALOG_ROLES
from cronstream.schemas.catalog import cassandra_role_user

DEPLOY = Path(__file__).resolve().parents[2] / "infra" / "deploy"
KUBERNETES = "1.37.0"
ROLES = {name for name, role in CATALOG_ROLES.items() if role.deployed}
HTTP = ("api", "ui")  # serve on --port; the others on --metrics-port


def _documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in _documents() if d["kind"] == kind]


def test_every_manifest_validates_against_the_kubernetes_schemas() -> None:
    docs = _documents()
    assert len(docs) >= 15
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises on a bad one


def _workloads() -> dict[str, dict[str, Any]]:
    """Each role's Deployment (the scheduler's StatefulSet), by role."""
    return {
        d["metadata"]["labels"]["app.kubernetes.io/component"]: d
        for d in _kind("Deployment") + _kind("StatefulSet")
    }


def test_the_scheduler_keeps_two_tiers_on_a_volume_of_its_own_with_a_stable_identity() -> None:
    """Two tiers by default wherever cronstream is deployed."""
    (scheduler,) = _kind("StatefulSet")
    args = _container(scheduler)["args"]
    state = args[args.index("--state-dir") + 1]
    assert args[args.index("--instance-id") + 1] == "$(POD_NAME)"
    (claim,) = scheduler["spec"]["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in _container(scheduler)["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == state
    unit = (DEPLOY / "systemd" / "cronstream-scheduler.service").read_text()
    assert "--state-dir /var/lib/cronstream/" in unit
    assert "--instance-id %H" in unit


def test_a_broken_manifest_is_refused() -> None:
    deployment = _kind("Deployment")[0]
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES, strict=True)


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_every_role_is_deployed_with_probes_resources_and_a_disruption_budget() -> None:
    deployments = _workloads()
    assert set(deployments) == ROLES
    budgets = {d["metadata"]["name"]: d for d in _kind("PodDisruptionBudget")}
    parser = build_parser()
    for role, deployment in deployments.items():
        container = _container(deployment)
        port = container["ports"][0]["containerPort"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        assert container["resources"]["requests"]
        assert container["resources"]["limits"]["memory"]
        args = container["args"]
        flag = "--port" if role in HTTP else "--metrics-port"
        assert str(port) == args[args.index(flag) + 1]
        parser.parse_args(args)  # a command the CLI accepts (SystemExit otherwise)
        budget = budgets[deployment["metadata"]["name"]]
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert budget["spec"]["selector"]["matchLabels"] == selector
    (hpa,) = _kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "cronstream-worker"


def _units() -> list[Path]:
    return sorted((DEPLOY / "systemd").glob("*.service"))


def test_every_systemd_unit_verifies_and_runs_a_command_the_cli_accepts(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze is missing (Debian package systemd)"
    units = _units()
    assert {u.stem.removeprefix("cronstream-") for u in units} == ROLES
    cronstream = str(Path(sys.executable).with_name("cronstream"))
    parser = build_parser()
    for unit in units:
        text = unit.read_text()
        (command,) = re.findall(r"^ExecStart=(\S+) (.*)$", text, re.MULTILINE)
        assert command[0] == "/opt/cronstream/venv/bin/cronstream"
        parser.parse_args(command[1].split())
        # verify with the executable that exists here (it checks ExecStart's binary)
        local = tmp_path / unit.name
        local.write_text(text.replace(command[0], cronstream))
        verified = subprocess.run(
            [analyze, "verify", str(local)], capture_output=True, text=True, check=False, timeout=60
        )
        problems = [
            line
            for line in verified.stderr.splitlines()
            if unit.name in line or "Failed" in line or "Unknown" in line
        ]
        assert verified.returncode == 0, verified.stderr
        assert not problems, verified.stderr


def test_a_role_with_history_logs_in_to_cassandra_as_its_own_user() -> None:
    """Found by review: a unit set the password file without the user, and an explicit
    password keeps the shared user (``Settings.as_role``)."""
    deployments = _workloads()
    for role in ROLES:
        unit = (DEPLOY / "systemd" / f"cronstream-{role}.service").read_text()
        env = {e["name"]: e.get("value") for e in _container(deployments[role])["env"]}
        if CATALOG_ROLES[role].history:
            want = cassandra_role_user(role)
            assert f"Environment=CRONSTREAM_CASSANDRA_USER={want}" in unit, role
            assert env["CRONSTREAM_CASSANDRA_USER"] == want, role
        else:
            assert "CASSANDRA" not in unit, role
            assert not any("CASSANDRA" in name for name in env), role


def test_systemd_analyze_finds_a_broken_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None
    unit = _units()[0]
    local = tmp_path / unit.name
    local.write_text(unit.read_text().replace("Restart=always", "Restart=sometimes"))
    verified = subprocess.run(
        [analyze, "verify", str(local)], capture_output=True, text=True, check=False, timeout=60
    )
    assert "Failed to parse service restart specifier" in verified.stderr


def test_metrics_beyond_the_loopback_want_a_token_wherever_they_are_deployed() -> None:
    """/metrics names tenants and jobs: a role that listens beyond 127.0.0.1 reads the
    token it wants from a mounted secret (without one it refuses to start), on
    Kubernetes and on systemd hosts alike; the image itself listens on the loopback."""
    exposed = set()
    for role, workload in _workloads().items():
        container = _container(workload)
        env = {e["name"]: e.get("value") for e in container["env"]}
        if is_loopback(env.get("CRONSTREAM_METRICS_HOST") or "127.0.0.1"):
            continue
        exposed.add(role)
        token = Path(env["CRONSTREAM_METRICS_TOKEN_FILE"])
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert volumes[mounts[str(token.parent)]]["secret"]["secretName"] == "cronstream-metrics"
    assert exposed == ROLES - set(HTTP)  # the API and the dashboard serve on --port
    lines = (DEPLOY / "systemd" / "cronstream.env").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    assert not is_loopback(env["CRONSTREAM_METRICS_HOST"])
    assert env["CRONSTREAM_METRICS_TOKEN_FILE"].startswith("/etc/cronstream/credentials/")
    assert "CRONSTREAM_METRICS_HOST" not in (DEPLOY / "Dockerfile").read_text()


def test_the_scrape_job_sends_the_metrics_token_and_prometheus_takes_it(tmp_path: Path) -> None:
    (shipped,) = [d for d in _kind("ConfigMap") if d["metadata"]["name"].endswith("-scrape")]
    (job,) = yaml.safe_load(shipped["data"]["cronstream-scrape.yml"])
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"].endswith("/cronstream-metrics/token")
    token = tmp_path / "token"  # promtool checks that the file is there
    token.write_text("t\n")
    job["authorization"]["credentials_file"] = str(token)
    # Debian's Prometheus is built without Kubernetes discovery: the rest is checked
    assert job.pop("kubernetes_sd_configs") == [
        {"role": "pod", "namespaces": {"names": ["cronstream"]}}
    ]
    job["static_configs"] = [{"targets": ["127.0.0.1:9300"]}]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing (Debian package prometheus)"
    check = subprocess.run(
        [promtool, "check", "config", str(config)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
