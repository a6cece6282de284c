"""The audit trail on the real stack: every change made with the CLI is in `jobs log`, in
order, with who, from where and the field-level diff; a deleted job keeps its trail."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from cronstream.runtime.settings import Settings
from tests.integration.helpers import cronstream

pytestmark = pytest.mark.integration


def _ok(ns: Settings, *args: str) -> None:
    result = cronstream(ns, *args)
    assert result.returncode == 0, result.stderr


def test_every_cli_change_is_in_the_jobs_log_with_who_and_the_diff(
    ns: Settings, tmp_path: Path
) -> None:
    http = ["--target", "http", "--url", "https://example.com/hook?token=t0psecret"]
    _ok(ns, "jobs", "put", "audited", "--every", "1h", *http)
    _ok(ns, "jobs", "put", "audited", "--every", "2h", *http, "--max-attempts", "5")
    _ok(ns, "jobs", "pause", "audited")
    _ok(ns, "jobs", "resume", "audited")
    _ok(ns, "runs", "trigger", "audited", "--idempotency-key", "k1")
    _ok(ns, "runs", "cancel", "audited@manual:k1", "--reason", "wrong day")
    _ok(ns, "jobs", "delete", "audited")
    shown = cronstream(ns, "jobs", "log", "audited", "--json")
    assert shown.returncode == 0, shown.stderr
    entries = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [e["action"] for e in entries] == [
        "PUT",
        "PUT",
        "PAUSE",
        "RESUME",
        "TRIGGER",
        "CANCEL",
        "DELETE",
    ]
    assert {e["principal"] for e in entries} == {ns.kafka_user}
    assert {e["os_user"] for e in entries} == {getpass.getuser()}
    assert all(" pid " in e["origin"] for e in entries)
    changes = {c["field"]: (c["before"], c["after"]) for c in entries[1]["changes"]}
    assert changes == {
        "schedule.every_ms": ("3600000", "7200000"),
        "retry.max_attempts": ("3", "5"),
    }
    assert entries[2]["changes"] == [{"field": "paused", "before": "false", "after": "true"}]
    assert entries[4]["detail"] == "audited@manual:k1"
    assert entries[5]["detail"] == "audited@manual:k1 (wrong day)"
    assert "t0psecret" not in shown.stdout  # the URL's token is redacted
    text = cronstream(ns, "jobs", "log", "audited", "--limit", "2").stdout.splitlines()
    assert "CANCEL" in text[0] and "DELETE" in text[2]  # noqa: PT018
    none = cronstream(ns, "jobs", "log", "never-existed")
    assert (none.returncode, none.stdout) == (0, "")
    assert "no audit entries for 'never-existed'" in none.stderr
