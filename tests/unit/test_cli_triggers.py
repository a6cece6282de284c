"""A job's triggers from the CLI: ``jobs put --on-topic ...`` builds the spec's
``on:`` and ``after:`` and the definition rules judge them; ``tenant --api put`` sends a
jobs file's ``on:`` as the trigger, not as YAML 1.1's ``true``."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cronstream.cli import build_parser
from cronstream.cli.api import _requests
from cronstream.cli.jobs import _spec_from_args
from cronstream.runtime.settings import Settings
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import EventTrigger, JobDefinition

HTTP = ["--target", "http", "--url", "https://example.com/hook"]


def put(*flags: str) -> JobDefinition:
    args = build_parser().parse_args(["jobs", "put", "j", *HTTP, *flags])
    return job_from_spec(_spec_from_args(args), max_payload_bytes=65536)


def test_on_flags_build_the_event_trigger() -> None:
    job = put(
        "--on-topic",
        "acme.orders",
        "--filter",
        'value.amount >= 100 and key == "x"',
        "--batch",
        "10",
        "--on-key",
        "value.customer.id",
        "--on-field",
        "order=value.id",
        "--on-field",
        " who = value.customer.id ",
    )
    assert job.on == EventTrigger(
        topic="acme.orders",
        filter='value.amount >= 100 and key == "x"',
        batch=10,
        key="value.customer.id",
        payload_fields={"order": "value.id", "who": "value.customer.id"},
    )
    assert job.schedule is None
    assert put("--on-topic", "t", "--debounce", "5m").on == EventTrigger(
        topic="t", debounce_ms=300_000
    )
    beside = put("--cron", "0 3 * * *", "--on-topic", "orders")
    assert beside.describe_schedule() == "cron 0 3 * * * + on orders"
    assert put("--after", "extract", "--after", "load").after == ("extract", "load")
    assert put().on is None


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--filter", "value.x > 1"], "on: a topic is required"),
        (["--on-topic", "t", "--filter", "value.x >"], "on.filter: "),
        (["--on-topic", "t", "--on-key", "value.k"], "on.key groups records for debounce or batch"),
        (["--on-topic", "t", "--after", "x"], "give it no schedule (cron, every, at) and no on:"),
        (["--on-topic", "t", "--on-field", "no-path"], "--on-field 'no-path' is not NAME=PATH"),
        (["--on-topic", "t", "--debounce", "soon"], "on.debounce: "),
    ],
)
def test_a_bad_trigger_from_flags_is_refused_with_its_reason(
    flags: list[str], problem: str
) -> None:
    with pytest.raises(SpecError) as caught:
        put(*flags)
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_debounce_and_batch_are_one_or_the_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        put("--on-topic", "t", "--debounce", "1m", "--batch", "3")
    assert "not allowed with argument --debounce" in capsys.readouterr().err


def test_a_jobs_file_through_the_api_sends_its_trigger(tmp_path: Path) -> None:
    """Found while building: the file was read again with yaml.safe_load, which reads a
    bare ``on`` key as true, and the API was sent ``{"true": ...}`` (refused)."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- id: big-orders\n  target: http\n  url: https://example.com/h\n"
        "  on:\n    topic: acme.orders\n    debounce: 5m\n"
        "- id: report\n  target: http\n  url: https://example.com/h\n"
        "  after: [big-orders]\n  paused: on\n"
    )
    args = argparse.Namespace(tenant_command="put", file=str(path))
    sent = _requests(Settings.from_env(), args)
    assert [(m, p) for m, p, _ in sent] == [
        ("PUT", "/v1/jobs/big-orders"),
        ("PUT", "/v1/jobs/report"),
    ]
    assert sent[0][2]["on"] == {"topic": "acme.orders", "debounce": "5m"}
    assert sent[1][2] == {
        "target": "http",
        "url": "https://example.com/h",
        "after": ["big-orders"],
        "paused": True,
    }
