"""The scheduler's fast read of a definition's timing equals fastavro's, and refuses
what fastavro refuses (``schemas.timing``)."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import parsed_schema, schema_json
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import (
    CronSchedule,
    EventTrigger,
    IntervalSchedule,
    JobDefinition,
    MisfireKind,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RetryPolicy,
    Schedule,
    Target,
    from_ms,
    to_ms,
)
from cronstream.schemas.serde import Codec
from cronstream.schemas.timing import JobTiming, TimingReader
from cronstream.schemas.wire import zigzag
from tests.factories import HTTP, T0, definition
from tests.fakes import FakeRegistry

TOPIC = Topics(Settings.from_env({})).jobs
TARGETS = [
    HTTP,
    Target(type="kafka", topic="out", headers={"k": "v", "é": "x" * 200}),
]
SCHEDULES: list[Schedule | None] = [
    CronSchedule(expression="*/5 * * * *"),
    CronSchedule(expression="0 0 12 L * ?"),
    IntervalSchedule(every_ms=1, anchor=from_ms(-62_135_596_800_000)),
    IntervalSchedule(every_ms=2**40, anchor=T0),
    OnceSchedule(at=from_ms(253_402_300_799_999)),
    OnceSchedule(at=from_ms(-1)),
    None,
]


def body(job: JobDefinition) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed_schema(JobDefinition.AVRO_NAME), job.to_avro())
    return out.getvalue()


def fastavro_timing(data: bytes) -> JobTiming:
    record: Any = fastavro.schemaless_reader(
        io.BytesIO(data), parsed_schema(JobDefinition.AVRO_NAME), None, return_record_name=True
    )
    return JobTiming.from_record(record)


def never() -> JobTiming:
    raise AssertionError("the fast path should have read this record")


@pytest.mark.parametrize("schedule", SCHEDULES, ids=repr)
@pytest.mark.parametrize("target", TARGETS, ids=["http", "kafka"])
def test_the_fast_read_equals_fastavro(schedule: Schedule | None, target: Target) -> None:
    tail = {
        "target": target,
        "payload": "p" * 300,
        "priority": Priority.HIGH,
        "retry": RetryPolicy(max_attempts=9),
        "timeout_ms": 2**35,
        "misfire": MisfirePolicy(policy=MisfireKind.ALL, max_catchup=3, catchup_window_ms=123),
        "on": EventTrigger(topic="t", filter="value.a == 1", payload_fields={"a": "value.a"}),
        "after": ("x", "y"),
    }
    reader = TimingReader()
    primer = body(definition("primer", **tail))
    assert reader.read(primer, lambda: fastavro_timing(primer)) == fastavro_timing(primer)
    for job in (
        definition("ü/é" * 50, schedule=schedule, tenant="acme", **tail),
        definition(
            "j",
            schedule=schedule,
            timezone="Australia/Lord_Howe",
            start_at=T0,
            end_at=from_ms(2**41),
            jitter_ms=2**33,
            paused=True,
            updated_at=from_ms(-62_135_596_800_000),
            **tail,
        ),
        definition("k", schedule=schedule, updated_at=from_ms(253_402_300_799_999), **tail),
    ):
        data = body(job)
        assert reader.read(data, never) == fastavro_timing(data)


def test_an_unseen_tail_is_decoded_whole_once() -> None:
    reader, calls = TimingReader(), []
    first, second = body(definition("a")), body(definition("b", updated_at=from_ms(5)))

    def slow() -> JobTiming:
        calls.append(1)
        return fastavro_timing(first)

    reader.read(first, slow)
    assert reader.read(second, never).job_id == "b"
    assert len(calls) == 1
    other = body(definition("c", misfire=MisfirePolicy(policy=MisfireKind.SKIP)))
    assert reader.read(other, lambda: fastavro_timing(other)).misfire[0] == "SKIP"


@pytest.fixture
def codec() -> Codec:
    return Codec(FakeRegistry())


def test_every_truncation_is_a_decode_error(codec: Codec) -> None:
    whole = codec.encode(TOPIC, definition("j", schedule=SCHEDULES[0], start_at=T0))
    codec.decode_timing(whole)  # the tail is known: the fast path reads the rest
    for end in range(len(whole)):
        with pytest.raises(DecodeError):
            codec.decode_timing(whole[:end])


@settings(max_examples=400, deadline=None)
@given(
    schedule=st.sampled_from(SCHEDULES),
    position=st.integers(min_value=0, max_value=10_000),
    byte=st.integers(min_value=0, max_value=255),
)
def test_a_corrupted_record_reads_as_fastavro_reads_it_or_is_refused(
    schedule: Schedule | None, position: int, byte: int
) -> None:
    codec = Codec(FakeRegistry())
    whole = codec.encode(TOPIC, definition("job-1", schedule=schedule, start_at=T0))
    codec.decode_timing(whole)
    at = 5 + position % (len(whole) - 5)  # the body, after the wire-format header
    bad = whole[:at] + bytes([byte]) + whole[at + 1 :]
    try:
        fast = codec.decode_timing(bad)
    except DecodeError:
        return  # refusing is always allowed (the fast path is stricter on booleans)
    assert fast == fastavro_timing(bad[5:])


def test_a_record_of_another_schema_version_goes_through_fastavro() -> None:
    """A writer schema that is not exactly ours (here: a newer one with a field added
    after the tenant) is resolved by fastavro; read by hand, the new field would be
    taken for the schedule."""
    registry = FakeRegistry()
    codec = Codec(registry)
    newer = json.loads(schema_json(JobDefinition.AVRO_NAME))
    newer["fields"].insert(2, {"name": "note", "type": "long", "default": 0})
    schema_id = registry.register(f"{TOPIC}-value", json.dumps(newer))
    record = definition("j", schedule=SCHEDULES[2]).to_avro() | {"note": 2**40}
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(newer), record)
    data = struct.pack(">bI", 0, schema_id) + out.getvalue()
    for _ in range(2):
        timing = codec.decode_timing(data)
        assert timing == JobTiming.from_record(codec.decode_record(data, JobDefinition))
        assert timing.schedule == {"every_ms": 1, "anchor_ms": -62_135_596_800_000}


def test_a_boolean_byte_other_than_0_or_1_is_refused(codec: Codec) -> None:
    data = codec.encode(TOPIC, definition("j", paused=True))
    other = codec.encode(TOPIC, definition("j", paused=False))
    (at,) = [i for i, (a, b) in enumerate(zip(data, other, strict=True)) if a != b]
    assert codec.decode_timing(data).paused
    with pytest.raises(DecodeError):
        codec.decode_timing(data[:at] + b"\x02" + data[at + 1 :])


@pytest.mark.parametrize("updated_ms", [253_402_300_800_000, -62_135_596_800_001, 2**62])
def test_an_updated_at_fastavro_cannot_read_is_refused(codec: Codec, updated_ms: int) -> None:
    data = codec.encode(TOPIC, definition("j"))
    codec.decode_timing(data)
    bad = data[: -len(zigzag(to_ms(T0)))] + zigzag(updated_ms)
    with pytest.raises(DecodeError):
        codec.decode_timing(bad)


def test_an_interval_that_is_not_positive_is_refused_on_both_paths(codec: Codec) -> None:
    data = codec.encode(TOPIC, definition("a", schedule=IntervalSchedule(every_ms=0, anchor=T0)))
    with pytest.raises(DecodeError, match="not positive"):
        codec.decode_timing(data)  # an unseen tail: fastavro
    codec.decode_timing(codec.encode(TOPIC, definition("b")))  # the same tail, now known
    with pytest.raises(DecodeError, match="not positive"):
        codec.decode_timing(data)  # read by hand
