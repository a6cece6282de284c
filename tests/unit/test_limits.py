"""The documented limits hold for records from any producer, not only ``jobs put``:
the scheduler refuses a definition over them, the worker a run request
(``schemas.limits``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import (
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    MisfirePolicy,
    Priority,
    RetryPolicy,
    RunRequest,
    Target,
)
from cronstream.schemas.limits import carried, unencodable
from cronstream.schemas.serde import Codec
from cronstream.streams.scheduler.definitions import Definitions
from tests.factories import HTTP, T0, definition
from tests.fakes import FakeRegistry

TOPICS = Topics(Settings.from_env({}))


@pytest.fixture
def codec() -> Codec:
    return Codec(FakeRegistry())


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        (definition("j\n"), "job id 'j\\n' must be"),
        (definition(schedule=CronSchedule(expression="0" + ",0" * 150 + " * * * *")), "over 256"),
        (
            definition(
                misfire=MisfirePolicy(
                    max_catchup=2**31 - 1, catchup_window_ms=10 * 365 * 86_400_000
                )
            ),
            "catchup 2147483647 is out of range",
        ),
        (definition(jitter_ms=2**40), "jitter 1099511627776 is out of range"),
        (definition(schedule=IntervalSchedule(every_ms=2**60, anchor=T0)), "over 100 years"),
        (definition(payload="x" * 300_000), "definition of 3"),
    ],
)
def test_the_scheduler_refuses_a_definition_over_the_limits(
    codec: Codec, job: JobDefinition, reason: str
) -> None:
    definitions = Definitions(codec)
    definitions.schedule("ok", codec.encode(TOPICS.jobs, definition("ok")))  # a known tail
    for _ in range(2):  # read by hand, then (another tail) by fastavro: the same verdict
        with pytest.raises(DecodeError, match="over the limits") as caught:
            definitions.schedule(job.job_id, codec.encode(TOPICS.jobs, job))
        assert reason in str(caught.value)
        job = replace(job, target=Target(type="http", url="https://e.x/other"))


def run(**fields: Any) -> RunRequest:
    fields.setdefault("target", HTTP)
    fields.setdefault("run_id", "j@x")
    return RunRequest(job_id="j", scheduled_at=T0, fired_at=T0, **fields)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (run(attempt=1000), "attempt 1000 is out of range"),
        (run(retry=RetryPolicy(max_attempts=10**6)), "max attempts 1000000 is out of range"),
        (run(timeout_ms=100_000 * 86_400_000), "timeout 8640000000000 is out of range"),
        (
            run(target=Target(type="http", url="https://e.x", headers={"A": "x" * 5000})),
            "at most 4096",
        ),
        (run(tenant="t\n"), "tenant 't\\n' must be"),
        # found by the chaos suite: a 100 KB run id ran, then crashed the history sink
        (run(run_id="j@" + "x" * 100_000), "must be at most 512 printable characters"),
        (run(run_id="j@x\x1b[2J"), "must be at most 512 printable characters"),
        (run(run_id="other@x"), "is not its job's id followed by '@'"),
    ],
)
def test_the_worker_refuses_a_run_request_over_the_limits(
    codec: Codec, bad: RunRequest, reason: str
) -> None:
    """Found by review: a 70-bit attempt, 10**12 attempts and 100,000-day timeouts were
    accepted (and crashed the worker later)."""
    topic = TOPICS.runs(Priority.NORMAL)
    good = replace(bad, attempt=1, tenant="default", run_id="j@x")
    if good != bad:  # the problem is in the head: the tail is known, read by hand
        codec.decode_run(codec.encode(topic, good))
    data = codec.encode(topic, bad)
    for _ in range(2):  # a tail over the limits is refused the second time too
        with pytest.raises(DecodeError, match="over the limits") as caught:
            codec.decode_run(data)
        assert reason in str(caught.value)


def test_unencodable_names_every_field_holding_a_lone_surrogate_and_nothing_else() -> None:
    spec = {"url": "ok é", "headers": {"X\udcff": "v", "Y": ["a", "\ud800b"]}, "n": 5}
    assert [p.partition(" holds")[0] for p in unencodable(spec)] == [
        "the name of headers.'X\\udcff'",
        "headers.Y[1]",
    ]
    assert "U+D800 at character 0" in unencodable(spec)[1]
    assert unencodable({"text": "ünïcode ✓", "emoji": "\U0001f600"}) == []
    assert carried("a\udcffb").encode() == b"a\\udcffb"
    assert carried("é") == "é"
