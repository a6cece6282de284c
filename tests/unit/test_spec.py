from datetime import UTC, datetime
from pathlib import Path

import pytest

from cronstream.producers.spec import load_jobs_file
from cronstream.schemas.definition import (
    job_from_spec,
    parse_backoff,
    parse_duration,
    parse_instant,
)
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import (
    CronSchedule,
    IntervalSchedule,
    MisfireKind,
    OnceSchedule,
    Priority,
)

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
LIMIT = 1024


def build(**spec: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = {"id": "job-1", "target": "http", "url": "https://example.com/h"}
    return job_from_spec({**base, **spec}, max_payload_bytes=LIMIT, now=NOW)


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h30m", 5_400_000),
        ("2d", 172_800_000),
        ("1.5s", 1500),
        ("45", 45_000),
        (2, 2000),
    ],
)
def test_durations(text: str | int, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "5x", "m5", "1h 30", "-5s", "1s2"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_backoff_range() -> None:
    assert parse_backoff("1s..5m") == (1000, 300_000)
    with pytest.raises(ValueError, match=r"MIN\.\.MAX"):
        parse_backoff("1s-5m")


def test_instant_without_offset_is_read_in_the_job_zone() -> None:
    paris = parse_instant("2026-07-01T09:00:00", "Europe/Paris")
    assert paris == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)
    assert parse_instant("2026-07-01T09:00:00Z") == datetime(2026, 7, 1, 9, 0, tzinfo=UTC)


def test_a_full_spec_builds_the_definition() -> None:
    job = build(
        cron="0 2 * * *",
        tz="Europe/Paris",
        payload={"b": 2, "a": 1},
        priority="high",
        max_attempts=5,
        backoff="2s..1m",
        timeout="45s",
        misfire="all",
        catchup=3,
        catchup_window="2h",
        jitter="10s",
        headers={"X-Team": "billing"},
        method="put",
    )
    assert job.schedule == CronSchedule(expression="0 2 * * *")
    assert job.timezone == "Europe/Paris"
    assert job.payload == '{"a":1,"b":2}'
    assert job.priority is Priority.HIGH
    assert (job.retry.max_attempts, job.retry.initial_backoff_ms, job.retry.max_backoff_ms) == (
        5,
        2000,
        60_000,
    )
    assert job.timeout_ms == 45_000
    assert job.misfire.policy is MisfireKind.ALL
    assert (job.misfire.max_catchup, job.misfire.catchup_window_ms) == (3, 7_200_000)
    assert job.jitter_ms == 10_000
    assert job.target.headers == {"X-Team": "billing"}
    assert job.target.method == "PUT"
    assert job.updated_at == NOW


def test_interval_defaults_to_an_epoch_anchor_so_updates_keep_the_slots() -> None:
    job = build(every="15m")
    assert job.schedule == IntervalSchedule(
        every_ms=900_000, anchor=datetime(1970, 1, 1, tzinfo=UTC)
    )


def test_one_time_and_manual_jobs() -> None:
    assert build(at="2026-12-01T09:30:00+01:00").schedule == OnceSchedule(
        at=datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
    )
    assert build().schedule is None


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"cron": "61 * * * *"}, "not a valid cron expression"),
        ({"cron": "* * *"}, "has 3 fields"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "unknown time zone"),
        ({"every": "ten minutes"}, "not a duration"),
        ({"every": "500ms"}, "shorter than the 1s minimum"),
        ({"cron": "* * * * *", "every": "1m"}, "give one schedule"),
        ({"at": "tomorrow"}, "not an ISO 8601 instant"),
        ({"target": "ftp"}, "target type 'ftp' is not one of"),
        ({"url": None}, "target http needs a url"),
        ({"url": "file:///etc/passwd"}, "not an http(s) URL"),
        ({"target": "kafka", "url": None}, "target kafka needs a topic"),
        ({"target": "python", "callable": "no_colon"}, "module:function"),
        ({"target": "shell", "command": "  "}, "target shell needs a command"),
        ({"payload": "x" * (LIMIT + 1)}, f"over the {LIMIT}-byte limit"),
        ({"backoff": "5m..1s"}, "backoff maximum 1000 is out of range"),
        ({"max_attempts": 0}, "max attempts 0 is out of range (1 to 100)"),
        # Found by review: these slipped through, were silently defaulted, or printed a
        # traceback (the limits are in schemas.limits and the README).
        ({"id": "job\n"}, "job id 'job\\n' must be"),
        ({"tenant": "t" * 65}, "tenant 'tttt"),
        ({"timeout": "0"}, "timeout 0 is out of range"),
        ({"timeout": "100000d"}, "longer than any limit"),
        ({"timeout": "8d"}, "timeout 691200000 is out of range"),
        ({"catchup_window": "0s"}, "catchup window 0 is out of range"),
        ({"catchup": 2**31, "catchup_window": "3650d"}, "catchup 2147483648 is out of range"),
        ({"max_attempts": 10**12}, "max attempts 1000000000000 is out of range"),
        ({"backoff": "100000000d..100000000d"}, "longer than any limit"),
        ({"backoff": "31d..31d"}, "backoff minimum 2678400000 is out of range"),
        ({"every": "99999999999999999999d"}, "longer than any limit"),
        ({"every": "9" * 400 + "d"}, "longer than any limit"),
        ({"jitter": "2d"}, "jitter 172800000 is out of range"),
        ({"cron": "0 " * 20 + "* * *"}, "has 23 fields"),
        ({"cron": "0,1,2,3,4,5,6,7,8,9" + ",0" * 200 + " * * * *"}, "over 256"),
        ({"headers": {"X-Big": "x" * 2_000_000}}, "the value must be at most 4096"),
        ({"headers": {f"h{i}": "v" for i in range(40)}}, "40 headers, over 32"),
        ({"headers": {"Bad:Name": "v"}}, "without ':'"),
        ({"headers": {"Transfer-Encoding": "chunked"}}, "the worker's to set"),
        ({"headers": {"host": "elsewhere.example"}}, "the worker's to set"),
        ({"url": "https://e.x/" + "a" * 3000}, "url of 3012 characters, over 2048"),
        ({"tz": "America"}, "unknown time zone"),
        ({"tz": "A" * 300}, "unknown time zone"),
        ({"at": "0001-01-01T00:00:00", "tz": "Asia/Tokyo"}, "out of range"),
        ({"at": "9999-12-31T23:59:59", "tz": "Etc/GMT+12"}, "out of range"),
        ({"start": "0001-01-01T00:30:00", "tz": "Asia/Tokyo"}, "out of range"),
        ({"priority": "urgent"}, "not one of high, normal, low"),
        ({"misfire": "sometimes"}, "not one of skip, once, all"),
        ({"id": "has space"}, "job id 'has space' must be"),
        ({"id": ""}, "a job id is required"),
        ({"start": "2026-12-02T00:00:00Z", "end": "2026-12-01T00:00:00Z"}, "end must be after"),
        ({"colour": "blue"}, "unknown keys ['colour']"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(spec: dict[str, object], problem: str) -> None:
    with pytest.raises(SpecError) as info:
        build(**spec)
    assert any(problem in p for p in info.value.problems), info.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(SpecError) as info:
        build(cron="61 * * * *", tz="Nowhere/City", target="ftp")
    assert len(info.value.problems) == 3


def test_a_jobs_file_with_one_bad_entry_yields_no_jobs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {id: good, every: 1m, target: http, url: 'https://example.com'}\n"
        "  - {id: bad, cron: '99 * * * *', target: http, url: 'https://example.com'}\n"
    )
    with pytest.raises(SpecError) as info:
        load_jobs_file(path, max_payload_bytes=LIMIT)
    assert len(info.value.problems) == 1
    assert "entry 2 (job bad)" in info.value.problems[0]


def test_a_jobs_file_may_be_a_plain_list(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text("- {id: a, every: 1m, target: kafka, topic: out}\n")
    (job,) = load_jobs_file(path, max_payload_bytes=LIMIT)
    assert job.target.topic == "out"
