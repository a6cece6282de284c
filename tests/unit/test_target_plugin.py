"""A new target type is one module: this one declares ``log`` (its rules, its tenants'
rule, its executor), and one entry point of the group ``cronstream.targets`` registers
it, as a third party's distribution would (docs/targets.md, the worked example). The
``Target`` record needs no new symbol: its ``type`` is a string.

With the plugin installed (a distribution's metadata on ``sys.path``), a job with a
``log`` target passes the spec path (the client's, the admission's), the tenant policy
allows it as ``log`` declares (only by a grant ``log=GLOB`` on the job's own id), and a
worker's ``Attempts`` runs it with the executor ``log``'s factory built.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from cronstream.cli import main
from cronstream.cli.common import EXIT_INVALID
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.producers.admission.core import Admission, Quotas
from cronstream.runtime import metrics
from cronstream.schemas import targets
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import GrantError, SpecError, TargetTypeError
from cronstream.schemas.events import RunRequest, RunStatus, Target
from cronstream.schemas.policy import TenantPolicy
from cronstream.schemas.targets import TargetType
from cronstream.schemas.tenancy import TenantAction, TenantCommand
from tests.processors import RUNS, WorkerHarness

NOW = datetime(2026, 11, 28, tzinfo=UTC)


# -- the plugin: everything a `log` target type is --------------------------------------------
def log_problems(target: Target) -> list[str]:
    """A log target writes the payload to the worker's log: it takes no other field."""
    given = [name for name in ("url", "topic", "callable", "command") if getattr(target, name)]
    return [f"target log takes no {', '.join(given)}"] if given else []


def log_why_not(_tenant: str, job_id: str, _target: Target, grants: tuple[str, ...]) -> str | None:
    """A tenant's job may log only when a grant ``log=GLOB`` matches its own id."""
    own = job_id.partition("/")[2] or job_id
    if any(fnmatchcase(own, pattern) for pattern in grants):
        return None
    return "log targets are not granted to the tenant"


class LogExecutor:
    kind = "log"

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.lines: list[str] = []

    def execute(self, target: Target, context: RunContext) -> str:
        line = f"{context.run_id} attempt {context.attempt}: {context.payload or ''}"
        self.logger.info("%s", line)
        self.lines.append(line)
        return f"logged {len(context.payload or '')} characters"


def log_executor(setup: ExecutorSetup) -> LogExecutor:
    return LogExecutor(logging.getLogger(f"cronstream.{setup.settings.topic_prefix}.log"))


TARGET = TargetType(
    name="log", problems=log_problems, policy=log_why_not, executor=f"{__name__}:log_executor"
)


# -- installing it ------------------------------------------------------------------------------
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *entries: str) -> None:
    """A distribution declaring ``entries`` (``NAME = module:attribute``) in the group,
    found on ``sys.path`` as an installed one is (importlib.metadata)."""
    info = tmp_path / "cronstream_log_target-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: cronstream-log-target\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text("[cronstream.targets]\n" + "\n".join(entries) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    targets.reload()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ``log`` plugin installed for the test, forgotten after it."""
    install(tmp_path, monkeypatch, f"log = {__name__}:TARGET")
    yield
    monkeypatch.undo()
    targets.reload()


def spec(**fields: object) -> dict[str, object]:
    return {"id": "reports-daily", "every": "1m", "target": "log", **fields}


def test_without_the_plugin_log_is_no_target_type() -> None:
    targets.reload()
    assert targets.names() == ("http", "kafka", "python", "shell", "flow")
    with pytest.raises(
        SpecError, match="target type 'log' is not one of http, kafka, python, shell, flow"
    ):
        job_from_spec(spec(), max_payload_bytes=1000)
    with pytest.raises(GrantError, match="kind 'log' is not one of"):
        TenantPolicy(["acme:log=*"])


@pytest.mark.usefixtures("installed")
def test_the_plugin_registers_after_the_built_ins_with_its_metrics_label() -> None:
    assert targets.names() == ("http", "kafka", "python", "shell", "flow", "log")
    assert targets.target_type("log") is TARGET
    metrics.zero_counters("worker")
    sample = {"status": "SUCCEEDED", "target": "log"}
    assert metrics.REGISTRY.get_sample_value("cronstream_worker_runs_finished_total", sample) == 0


@pytest.mark.usefixtures("installed")
def test_a_log_job_is_validated_by_the_rules_log_declares() -> None:
    job = job_from_spec(spec(payload={"note": "hi"}), max_payload_bytes=1000)
    assert job.target == Target(type="log")
    with pytest.raises(SpecError, match="target log takes no url, command"):
        job_from_spec(spec(url="https://example.com/", command="true"), max_payload_bytes=1000)


def _put(job_id: str, target: Target) -> TenantCommand:
    job = job_from_spec(
        {"id": job_id, "every": "1m", "target": target.type}, max_payload_bytes=1000
    )
    return TenantCommand(
        command_id=f"c-{job_id}", action=TenantAction.PUT, job_id=job_id, issued_at=NOW, job=job
    )


@pytest.mark.usefixtures("installed")
def test_the_admission_applies_the_policy_log_declares() -> None:
    admission = Admission(Quotas(), max_payload_bytes=10_000)
    admission.policy = TenantPolicy(["acme:log=reports-*"])
    granted = admission.decide("acme", _put("reports-daily", Target(type="log")), offset=0, now=NOW)
    assert granted.result.accepted, granted.result.reason
    other = admission.decide("acme", _put("cleanup", Target(type="log")), offset=1, now=NOW)
    assert not other.result.accepted
    assert "log targets are not granted to the tenant" in (other.result.reason or "")
    assert "grants of tenant 'acme': log=reports-*" in (other.result.reason or "")
    beta = admission.decide("beta", _put("reports-daily", Target(type="log")), offset=2, now=NOW)
    assert not beta.result.accepted
    assert TenantPolicy().problems("default", "reports-daily", Target(type="log")) == []


def _run(run_id: str, tenant: str, payload: str) -> RunRequest:
    return RunRequest(
        run_id=run_id,
        job_id=run_id.split("@", maxsplit=1)[0],
        tenant=tenant,
        scheduled_at=NOW,
        fired_at=NOW,
        target=Target(type="log"),
        payload=payload,
    )


@pytest.mark.usefixtures("installed")
def test_a_worker_runs_a_log_target_with_the_executor_its_factory_built() -> None:
    config = WorkerConfig(group="g", concurrency=2, grants=("acme:log=reports-*",))
    h = WorkerHarness(config, fake_executors=False)
    try:
        executor = h.attempts.executors["log"]
        assert isinstance(executor, LogExecutor)
        h.read(h.codec.encode(RUNS, _run("acme/reports-daily@1", "acme", '{"n": 1}')))
        h.read(h.codec.encode(RUNS, _run("acme/cleanup@1", "acme", "{}")))
        h.run_all()
    finally:
        h.close()
    finished = {o.run_id: o for o in h.outcomes() if o.status is not RunStatus.STARTED}
    assert finished["acme/reports-daily@1"].status is RunStatus.SUCCEEDED
    assert finished["acme/reports-daily@1"].target_type == "log"
    assert executor.lines == ['acme/reports-daily@1 attempt 1: {"n": 1}']
    refused = finished["acme/cleanup@1"]  # the worker applies the policy again
    assert refused.status is RunStatus.FAILED
    assert "log targets are not granted to the tenant" in (refused.error or "")


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("log = tests.unit.no_such_module:TARGET", "cannot be loaded: ModuleNotFoundError"),
        (f"log = {__name__}:log_executor", "is not the TargetType named 'log'"),
        (f"logger = {__name__}:TARGET", "is not the TargetType named 'logger'"),
        ("http = cronstream.schemas.targets.kafka:TARGET", "is not the TargetType named 'http'"),
        (f"http = {__name__}:AN_HTTP", "target type 'http' is declared twice"),
    ],
)
def test_a_plugin_that_cannot_be_registered_stops_every_command_at_start(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    entry: str,
    why: str,
) -> None:
    install(tmp_path, monkeypatch, entry)
    try:
        with pytest.raises(TargetTypeError, match=why):
            targets.names()
        assert main(["jobs", "preview", "--every", "1m"]) == EXIT_INVALID
        assert why in capsys.readouterr().err
    finally:
        monkeypatch.undo()
        targets.reload()


AN_HTTP = TargetType(name="http", problems=log_problems, executor=f"{__name__}:log_executor")
