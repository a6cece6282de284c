"""A secret value a worker resolved for a run never leaves the worker: not in the run's
outcome (history), its dead letter, nor a log line, however the target echoes it back;
and a tenant's run never resolves the operators' secrets."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

import pytest

from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.secrets import Secrets
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.runtime import metrics
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import DeadLetter, RetryPolicy, RunStatus, Target
from tests.echo import echo_target
from tests.unit.test_worker_parts import TOPICS, Parts, outcomes_of, run

# Plaintext: the worker's target producer needs no password (it never connects here).
SETTINGS = Settings.from_env(
    {"CRONSTREAM_PARTITIONS": "1", "CRONSTREAM_KAFKA_SECURITY": "plaintext"}
)

SECRET = "Bearer op3rators-t0ken/+="


@pytest.fixture
def echo() -> Iterator[tuple[str, list[str]]]:
    """An echoing target: its answer holds the header as is and URL-encoded."""
    with echo_target(
        lambda auth: f"rejected {auth!r} (as a query: auth={quote(auth, safe='')})"
    ) as served:
        yield served


class LeakyBug:
    """An executor with a bug whose exception text holds the secret it resolved."""

    kind = "python"

    def __init__(self, secrets: Secrets) -> None:
        self.secrets = secrets

    def execute(self, target: Target, context: RunContext) -> str:
        headers = self.secrets.headers(target.headers, context)
        raise TypeError(f"cannot send {headers}")


def settle_all(parts: Parts, secrets_dir: Path, *runs: tuple[str, str, Target]) -> list[str]:
    """Run ``(run_id, tenant, target)`` through a worker's attempts; the texts it
    published (final outcomes' errors and dead letters' reasons)."""
    parts.own()
    config = WorkerConfig(
        group="g",
        concurrency=2,
        http_allow=("127.0.0.0/8",),
        grants=("acme:http=127.0.0.0/8",),
        secrets_dir=str(secrets_dir),
    )
    attempts = Attempts(
        SETTINGS, config, outbox=parts.outbox, dedup=parts.dedup, cancels={}, tally=metrics.Tally()
    )
    attempts.executors["python"] = LeakyBug(Secrets(secrets_dir, env={}))
    requests = [
        replace(run(run_id), tenant=tenant, target=target, retry=RetryPolicy(max_attempts=1))
        for run_id, tenant, target in runs
    ]
    outcomes = outcomes_of(attempts, parts, *requests)
    letters = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(TOPICS.dlq)]
    ended = [o for o in outcomes if o.status is not RunStatus.STARTED]
    assert len(ended) == len(letters) == len(runs)
    return [o.error or "" for o in ended] + [letter.reason for letter in letters]


def test_an_echoed_secret_reaches_neither_history_nor_the_dlq_nor_the_log(
    echo: tuple[str, list[str]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by probing: a target echoing the Authorization header put the
    resolved value into the history outcome and the DLQ reason."""
    url, calls = echo
    (tmp_path / "hook-token").write_text(SECRET + "\n")
    headers = {"Authorization": "secret:hook-token"}
    http = Target(type="http", url=url, headers=headers)
    bug = Target(type="python", callable="m:f", headers=headers)
    with caplog.at_level(logging.ERROR, logger="cronstream.worker"):
        texts = settle_all(
            Parts(), tmp_path, ("j@echo", "default", http), ("j@bug", "default", bug)
        )
    assert calls == [SECRET]  # the target did get it
    assert any("HTTP 401" in text and "rejected '***'" in text for text in texts), texts
    assert any("auth=***" in text for text in texts), texts
    assert any("cannot send {'Authorization': '***'}" in text for text in texts), texts
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "cannot send {'Authorization': '***'}" in logged  # the bug's trace is logged
    for text in [*texts, logged]:
        assert "op3rators" not in text
        assert "t0ken" not in text


def test_a_tenants_run_naming_an_operators_secret_fails_without_reaching_it(
    echo: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, calls = echo
    (tmp_path / "hook-token").write_text(SECRET + "\n")
    target = Target(type="http", url=url, headers={"Authorization": "secret:hook-token"})
    texts = settle_all(Parts(), tmp_path, ("acme/j@1", "acme", target))
    assert calls == []
    for text in texts:
        assert "secret 'hook-token' is not configured for tenant 'acme'" in text
        assert "not retried" in text
        assert "op3rators" not in text
