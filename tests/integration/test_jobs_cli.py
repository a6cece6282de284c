"""The CLI writes what it says to the real broker, readable by kcat, and refuses bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from cronstream.producers.client import JobClient
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.integration.helpers import cronstream, kcat, record_count

pytestmark = pytest.mark.integration

HTTP = ["--target", "http", "--url", "https://example.com/hook"]


def put(ns: Settings, job_id: str, *args: str) -> None:
    result = cronstream(ns, "jobs", "put", job_id, *args)
    assert result.returncode == 0, result.stderr


def test_put_lands_on_the_jobs_topic_with_a_readable_key_and_headers(ns: Settings) -> None:
    put(ns, "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Paris", *HTTP)
    (line,) = kcat(ns, Topics(ns).jobs, "%k|%h\n")
    key, headers = line.split("|", 1)
    assert key == "nightly"
    assert "job_id=nightly" in headers
    assert "op=put" in headers
    assert "schedule=cron 0 2 * * *" in headers


def test_tail_decodes_records_as_json_lines(ns: Settings) -> None:
    put(
        ns,
        "report",
        "--every",
        "15m",
        *HTTP,
        "--payload",
        '{"kind": "daily"}',
        "--priority",
        "high",
    )
    result = cronstream(ns, "tail", "jobs", "--from-beginning", "-n", "1", "--timeout", "20")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout.splitlines()[0])
    assert record["key"] == "report"
    assert record["type"] == "JobDefinition"
    assert record["value"]["schedule"] == {
        "kind": "interval",
        "every_ms": 900_000,
        "anchor": "1970-01-01T00:00:00.000Z",
    }
    assert record["value"]["payload"] == '{"kind":"daily"}'
    assert record["value"]["priority"] == "HIGH"
    assert record["headers"]["job_id"] == "report"


def test_delete_writes_a_tombstone_and_the_job_is_gone(ns: Settings) -> None:
    put(ns, "temp", "--at", "2030-01-01T00:00:00Z", *HTTP)
    assert cronstream(ns, "jobs", "delete", "temp").returncode == 0
    lines = kcat(ns, Topics(ns).jobs, "%k|%S|%h\n")  # %S: value size, -1 for NULL
    assert len(lines) == 2
    key, size, headers = lines[-1].split("|", 2)
    assert (key, size) == ("temp", "-1")
    assert "op=delete" in headers
    gone = cronstream(ns, "jobs", "get", "temp")
    assert gone.returncode == 4
    assert "no job 'temp'" in gone.stderr


def test_get_list_pause_and_resume(ns: Settings) -> None:
    put(ns, "a-job", "--cron", "*/5 * * * *", *HTTP)
    put(ns, "b-job", "--every", "1h", "--target", "kafka", "--topic", "out")
    assert cronstream(ns, "jobs", "pause", "a-job").returncode == 0
    listed = cronstream(ns, "jobs", "list", "--json")
    jobs = {j["job_id"]: j for j in map(json.loads, listed.stdout.splitlines())}
    assert set(jobs) == {"a-job", "b-job"}
    assert jobs["a-job"]["paused"] is True
    assert jobs["b-job"]["paused"] is False
    assert cronstream(ns, "jobs", "resume", "a-job").returncode == 0
    got = json.loads(cronstream(ns, "jobs", "get", "a-job").stdout)
    assert got["paused"] is False
    assert got["schedule"]["expression"] == "*/5 * * * *"


def test_put_with_an_event_trigger_and_after_and_list_and_get_show_them(ns: Settings) -> None:
    """Event triggers: --on-topic and its companions, --after (docs/event-triggers.md)."""
    put(
        ns,
        "big-orders",
        *HTTP,
        "--on-topic",
        "acme.orders",
        "--filter",
        "value.amount >= 100",
        "--debounce",
        "5m",
        "--on-key",
        "value.customer",
        "--on-field",
        "order=value.id",
    )
    put(ns, "report", *HTTP, "--after", "big-orders", "--after", "extract")
    lines = cronstream(ns, "jobs", "list").stdout.splitlines()
    shown = {line.split()[0]: line for line in lines}
    assert (
        "on acme.orders if value.amount >= 100 debounce 300000ms per value.customer"
        in shown["big-orders"]
    ), shown
    assert "after big-orders, extract" in shown["report"], shown
    got = json.loads(cronstream(ns, "jobs", "get", "big-orders").stdout)
    assert got["on"] == {
        "topic": "acme.orders",
        "filter": "value.amount >= 100",
        "debounce_ms": 300_000,
        "batch": None,
        "key": "value.customer",
        "payload_fields": {"order": "value.id"},
    }
    assert got["schedule"] is None
    assert json.loads(cronstream(ns, "jobs", "get", "report").stdout)["after"] == [
        "big-orders",
        "extract",
    ]
    refused = cronstream(ns, "jobs", "put", "bad", *HTTP, "--filter", "value.x > 1")
    assert refused.returncode != 0
    assert "on: a topic is required" in refused.stderr


def test_apply_writes_every_job_of_a_file(ns: Settings, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {id: one, cron: '0 * * * *', target: http, url: 'https://example.com/1'}\n"
        "  - {id: two, every: 30s, target: python, callable: 'mymod:run', payload: {x: 1}}\n"
    )
    result = cronstream(ns, "jobs", "apply", "-f", str(path))
    assert result.returncode == 0, result.stderr
    assert sorted(line.split("|")[0] for line in kcat(ns, Topics(ns).jobs, "%k|\n")) == [
        "one",
        "two",
    ]


BAD_INPUT = {
    "bad cron": (["jobs", "put", "x", "--cron", "61 * * * *", *HTTP], 2, "not a valid cron"),
    "unknown zone": (
        ["jobs", "put", "x", "--cron", "* * * * *", "--tz", "Mars/Base", *HTTP],
        2,
        "unknown time zone",
    ),
    "bad duration": (["jobs", "put", "x", "--every", "often", *HTTP], 2, "not a duration"),
    "bad timeout": (
        ["jobs", "put", "x", "--every", "1m", "--timeout", "5 parsecs", *HTTP],
        2,
        "not a duration",
    ),
    "missing url": (
        ["jobs", "put", "x", "--every", "1m", "--target", "http"],
        2,
        "target http needs a url",
    ),
    "missing topic": (
        ["jobs", "put", "x", "--every", "1m", "--target", "kafka"],
        2,
        "target kafka needs a topic",
    ),
    "unknown target": (
        ["jobs", "put", "x", "--every", "1m", "--target", "ftp"],
        2,
        "target type 'ftp'",
    ),
    "payload too big": (
        ["jobs", "put", "x", "--every", "1m", *HTTP, "--payload", json.dumps({"blob": "x" * 300})],
        2,
        "over the 256-byte limit",
    ),
    "payload not json": (
        ["jobs", "put", "x", "--every", "1m", *HTTP, "--payload", "{oops"],
        2,
        "--payload is not JSON",
    ),
    "pause unknown": (["jobs", "pause", "ghost"], 4, "no job 'ghost'"),
    "resume unknown": (["jobs", "resume", "ghost"], 4, "no job 'ghost'"),
    "delete unknown": (["jobs", "delete", "ghost"], 4, "no job 'ghost'"),
    "trigger unknown": (["runs", "trigger", "ghost"], 4, "no job 'ghost'"),
    "cancel bad run id": (["runs", "cancel", "no-at-sign"], 2, "not a cronstream run id"),
}


@pytest.mark.parametrize("case", BAD_INPUT, ids=list(BAD_INPUT))
def test_bad_input_is_refused_clearly_and_nothing_is_written(ns: Settings, case: str) -> None:
    args, code, message = BAD_INPUT[case]
    result = cronstream(ns, *args, env={"CRONSTREAM_MAX_PAYLOAD_BYTES": "256"})
    assert result.returncode == code, (result.stdout, result.stderr)
    assert message in result.stderr
    topics = Topics(ns)
    for topic in (topics.jobs, topics.control, *(topics.runs(p) for p in Priority)):
        assert record_count(ns, topic) == 0, topic


def test_a_bad_jobs_file_writes_none_of_its_jobs(ns: Settings, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- {id: fine, every: 1m, target: http, url: 'https://example.com'}\n"
        "- {id: broken, cron: 'every day', target: http, url: 'https://example.com'}\n"
    )
    result = cronstream(ns, "jobs", "apply", "-f", str(path))
    assert result.returncode == 2
    assert "entry 2 (job broken)" in result.stderr
    assert record_count(ns, Topics(ns).jobs) == 0


def test_trigger_goes_straight_to_the_priority_topic_and_a_key_names_one_run(ns: Settings) -> None:
    put(ns, "urgent", *HTTP, "--priority", "high")
    for _ in range(2):
        result = cronstream(ns, "runs", "trigger", "urgent", "--idempotency-key", "deploy-7")
        assert result.returncode == 0, result.stderr
        assert "urgent@manual:deploy-7" in result.stdout
    lines = kcat(ns, Topics(ns).runs(Priority.HIGH), "%k|%h\n")
    assert len(lines) == 2
    for line in lines:
        key, headers = line.split("|", 1)
        assert key == "urgent"
        assert "run_id=urgent@manual:deploy-7" in headers
        assert "trigger=MANUAL" in headers
        assert "attempt=1" in headers
    assert record_count(ns, Topics(ns).runs(Priority.NORMAL)) == 0


def test_cancel_publishes_a_control_command(ns: Settings) -> None:
    result = cronstream(
        ns, "runs", "cancel", "nightly@2026-11-22T02:00:00.000Z", "--reason", "bad data"
    )
    assert result.returncode == 0, result.stderr
    tail = cronstream(ns, "tail", "control", "--from-beginning", "-n", "1", "--timeout", "20")
    record = json.loads(tail.stdout)
    assert record["key"] == "nightly@2026-11-22T02:00:00.000Z"
    assert record["value"]["action"] == "CANCEL"
    assert record["value"]["job_id"] == "nightly"
    assert record["value"]["reason"] == "bad data"


def test_get_and_tail_never_print_a_credential(ns: Settings) -> None:
    """Found by review: Authorization headers and URL credentials were printed by
    `jobs get`/`tail`."""
    result = cronstream(
        ns,
        "jobs",
        "put",
        "hook",
        "--every",
        "1h",
        *HTTP,
        "--header",
        "Authorization: Bearer hunter2",
        "--header",
        "X-Api-Key: secret:billing-key",
    )
    assert result.returncode == 0, result.stderr
    assert "header Authorization holds a literal value" in result.stderr
    assert "hunter2" not in result.stderr + result.stdout
    shown = cronstream(ns, "jobs", "get", "hook").stdout
    tailed = cronstream(ns, "tail", "jobs", "--from-beginning", "-n", "1", "--timeout", "20")
    for text in (shown, tailed.stdout):
        headers = json.loads(text.splitlines()[0])
        headers = headers.get("value", headers)["target"]["headers"]
        assert headers == {"Authorization": "***", "X-Api-Key": "secret:billing-key"}
    refused = cronstream(
        ns,
        "jobs",
        "put",
        "bad",
        "--every",
        "1h",
        "--target",
        "http",
        "--url",
        "https://bob:hunter2@example.com/",
    )
    assert refused.returncode == 2
    assert "secret:NAME" in refused.stderr
    assert "hunter2" not in refused.stderr


def test_trigger_refuses_an_idempotency_key_over_the_limit(ns: Settings) -> None:
    put(ns, "t", "--every", "1h", *HTTP)
    result = cronstream(ns, "runs", "trigger", "t", "--idempotency-key", "k" * 201)
    assert result.returncode == 2, result.stderr
    assert "idempotency key" in result.stderr


def test_one_client_reads_again_and_again_each_time_to_the_end(ns: Settings) -> None:
    """A JobClient keeps one reader for all its reads: a partition read before
    is read again from its beginning to its new end, on either topic."""
    with JobClient(ns) as client:
        for hours in range(1, 5):
            client.put_spec(
                {
                    "id": "again",
                    "every": f"{hours}h",
                    "target": "http",
                    "url": "https://example.com/h",
                }
            )
            job = client.get("again")  # put_spec read its partition just before
            assert job is not None
            assert job.describe_schedule().startswith(f"every {hours * 3_600_000}ms")
            assert [j.job_id for j in client.list_jobs()] == ["again"]
            assert len(client.audit_log("again")) == hours
            assert client.get("never") is None


LIBRDKAFKA_LINE = re.compile(r"%\d\||rdkafka#")  # %3|1795814637.239|FAIL|rdkafka#consumer-3|


def test_successful_commands_print_no_librdkafka_line(ns: Settings, tmp_path: Path) -> None:
    """librdkafka's lines go through logging, shown by default only for errors that are
    not connection churn (runtime.kafka.logs). A correct `flows trigger` printed
    "%3|...|FAIL|rdkafka#consumer-3| ... SASL authentication error: ... Broker transport
    failure": its reader closed while logging in to the group coordinator.
    Each command three times: that close is a race."""
    put(ns, "quiet", "--every", "1h", *HTTP)
    path = tmp_path / "flows.yaml"
    node = {"name": "a", "target": "http", "url": "https://example.com/a"}
    path.write_text(yaml.safe_dump({"flows": [{"id": "hushed", "every": "1h", "nodes": [node]}]}))
    assert cronstream(ns, "flows", "put", "-f", str(path)).returncode == 0
    commands = [
        ("jobs", "list"),
        ("flows", "trigger", "hushed"),
        ("tail", "jobs", "--from-beginning", "-n", "2", "--timeout", "20"),
    ]
    for command in commands * 3:
        done = cronstream(ns, *command)
        assert done.returncode == 0, done.stderr
        lines = 1 if command[0] == "flows" else 2  # jobs: quiet and the flow's schedule
        assert len(done.stdout.splitlines()) == lines, done.stdout
        assert not LIBRDKAFKA_LINE.search(done.stdout + done.stderr), (command, done.stderr)


def test_vv_shows_librdkafkas_own_lines_through_logging(ns: Settings) -> None:
    put(ns, "loud", "--every", "1h", *HTTP)
    done = cronstream(ns, "jobs", "list", "-vv")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("loud ")
    routed = [line for line in done.stderr.splitlines() if " DEBUG librdkafka: " in line]
    assert any("SASL" in line for line in routed), done.stderr[-3000:]  # -vv: security
    assert not re.search(r"^%\d\|", done.stderr, re.MULTILINE)  # none printed by itself
