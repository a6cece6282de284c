"""A secret value a worker resolved for a run never leaves the worker: not in the run's
outcome (history), its dead letter, nor a log line, however the target echoes it back;
and a tenant's run never resolves the operators' secrets (issue 31)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest

from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.executors.secrets import Secrets
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.runtime import metrics
from cronstream.runtime.settings import Settings
from cronstream.schemas.events import DeadLetter, RetryPolicy, RunOutcome, RunStatus, Target
from tests.unit.test_worker_parts import TOPICS, Parts, run, run_taken

# Plaintext: the worker's target producer needs no password (it never connects here).
SETTINGS = Settings.from_env(
    {"CRONSTREAM_PARTITIONS": "1", "CRONSTREAM_KAFKA_SECURITY": "plaintext"}
)

SECRET = "Bearer op3rators-t0ken/+="
CALLS: list[str] = []


class Echo(BaseHTTPRequestHandler):
    """Answers 401 with the Authorization header it got, as is and URL-encoded."""

    def do_POST(self) -> None:
        auth = self.headers.get("Authorization", "")
        CALLS.append(auth)
        body = f"rejected {auth!r} (as a query: auth={quote(auth, safe='')})".encode()
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[str]:
    CALLS.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/hook"
    httpd.shutdown()
    httpd.server_close()


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
    attempts.executors["python"] = LeakyBug(Secrets(secrets_dir, env={}))  # type: ignore[assignment]
    try:
        for offset, (run_id, tenant, target) in enumerate(runs):
            request = replace(
                run(run_id), tenant=tenant, target=target, retry=RetryPolicy(max_attempts=1)
            )
            parts.intake.accept(parts.record(request, offset))
        run_taken(attempts, parts, len(runs))
    finally:
        attempts.close()
    outcomes = [parts.codec.decode(r.value, RunOutcome) for r in parts.producer.on(TOPICS.history)]
    letters = [parts.codec.decode(r.value, DeadLetter) for r in parts.producer.on(TOPICS.dlq)]
    ended = [o for o in outcomes if o.status is not RunStatus.STARTED]
    assert len(ended) == len(letters) == len(runs)
    return [o.error or "" for o in ended] + [letter.reason for letter in letters]


def test_an_echoed_secret_reaches_neither_history_nor_the_dlq_nor_the_log(
    echo: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by probing (issue 31): a target echoing the Authorization header put the
    resolved value into the history outcome and the DLQ reason."""
    (tmp_path / "hook-token").write_text(SECRET + "\n")
    headers = {"Authorization": "secret:hook-token"}
    http = Target(type="http", url=echo, headers=headers)
    bug = Target(type="python", callable="m:f", headers=headers)
    with caplog.at_level(logging.ERROR, logger="cronstream.worker"):
        texts = settle_all(
            Parts(), tmp_path, ("j@echo", "default", http), ("j@bug", "default", bug)
        )
    assert CALLS == [SECRET]  # the target did get it
    assert any("HTTP 401" in text and "rejected '***'" in text for text in texts), texts
    assert any("auth=***" in text for text in texts), texts
    assert any("cannot send {'Authorization': '***'}" in text for text in texts), texts
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "cannot send {'Authorization': '***'}" in logged  # the bug's trace is logged
    for text in [*texts, logged]:
        assert "op3rators" not in text
        assert "t0ken" not in text


def test_a_tenants_run_naming_an_operators_secret_fails_without_reaching_it(
    echo: str, tmp_path: Path
) -> None:
    (tmp_path / "hook-token").write_text(SECRET + "\n")
    target = Target(type="http", url=echo, headers={"Authorization": "secret:hook-token"})
    texts = settle_all(Parts(), tmp_path, ("acme/j@1", "acme", target))
    assert CALLS == []
    for text in texts:
        assert "secret 'hook-token' is not configured for tenant 'acme'" in text
        assert "not retried" in text
        assert "op3rators" not in text
