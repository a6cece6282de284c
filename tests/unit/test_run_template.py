"""Hand-assembled RunRequest and RunOutcome bytes equal fastavro's, field for field."""

from __future__ import annotations

import io
import struct
from dataclasses import replace
from functools import partial
from zoneinfo import ZoneInfo

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronstream.schemas.avro import parsed_schema
from cronstream.schemas.errors import HeadError
from cronstream.schemas.events import (
    Concurrency,
    CronSchedule,
    DeadLetter,
    JobDefinition,
    Priority,
    RetryPolicy,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
    Trigger,
    from_ms,
    iso,
    utc_now,
)
from cronstream.schemas.templates import (
    LetterWriter,
    RunRequestReader,
    RunTemplate,
    encode_dead_letter,
    encode_run_outcome,
)
from cronstream.schemas.wire import avro_string, zigzag

JOBS = [
    JobDefinition(
        job_id="a",
        target=Target(type="http", url="https://x.test/h"),
        updated_at=utc_now(),
        schedule=CronSchedule(expression="* * * * *"),
    ),
    JobDefinition(
        job_id="tenant-ü.job/with@signs" * 4,
        tenant="acme",
        target=Target(type="kafka", topic="out", headers={"k": "v", "é": "x"}),
        updated_at=utc_now(),
        payload='{"big": "' + "x" * 300 + '"}',
        priority=Priority.HIGH,
        timeout_ms=123_456_789_012,
        retry=RetryPolicy(max_attempts=9, initial_backoff_ms=1, max_backoff_ms=2**40),
        concurrency=Concurrency.QUEUE,
    ),
]


@pytest.mark.parametrize("job", JOBS, ids=["plain", "unicode-big"])
@pytest.mark.parametrize("trigger", list(Trigger))
@pytest.mark.parametrize("dup", [False, True])
@pytest.mark.parametrize("due", [None, 1_795_320_004_321])
def test_template_bytes_equal_fastavro(
    job: JobDefinition, trigger: Trigger, dup: bool, due: int | None
) -> None:
    slot, fired = 1_795_320_000_000, 1_795_320_000_123
    run = RunRequest(
        run_id=f"{job.job_id}@x",
        job_id=job.job_id,
        tenant=job.tenant,
        scheduled_at=from_ms(slot),
        fired_at=from_ms(fired),
        target=job.target,
        payload=job.payload,
        priority=job.priority,
        timeout_ms=job.timeout_ms,
        retry=job.retry,
        attempt=70,
        trigger=trigger,
        possible_duplicate=dup,
        concurrency=job.concurrency,
        due_at=None if due is None else from_ms(due),
    )
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, 4242))
    fastavro.schemaless_writer(buf, parsed_schema(RunRequest.AVRO_NAME), run.to_avro())
    mine = RunTemplate(job).encode(
        4242,
        run.run_id,
        slot,
        fired,
        attempt=70,
        trigger=trigger,
        possible_duplicate=dup,
        due_ms=due,
    )
    assert mine == buf.getvalue()


def _fastavro_run(body: bytes) -> RunRequest:
    record = fastavro.schemaless_reader(
        io.BytesIO(body), parsed_schema(RunRequest.AVRO_NAME), None, return_record_name=True
    )
    assert isinstance(record, dict)
    return RunRequest.from_avro(record)


@pytest.mark.parametrize("trigger", list(Trigger))
@pytest.mark.parametrize("dup", [False, True])
def test_run_request_reader_equals_fastavro(trigger: Trigger, dup: bool) -> None:
    reader = RunRequestReader()
    slow_calls = []

    def slow_for(body: bytes) -> RunRequest:
        slow_calls.append(body)
        return _fastavro_run(body)

    for job in JOBS:
        template = RunTemplate(job)
        # The first run of a definition is decoded by fastavro, the next ones by hand.
        # The due time is in the head: runs of one definition due at different times
        # share its tail.
        for k, (slot, fired, attempt, due) in enumerate(
            [
                (1_795_320_000_000, 1_795_320_000_123, 1, None),
                (0, 2**41, 70, 2**41 + 5),
                (-1, 1, 2**30, -7),
            ]
        ):
            body = template.encode(
                4242,
                f"{job.job_id}@{k}é",
                slot,
                fired,
                attempt=attempt,
                trigger=trigger,
                possible_duplicate=dup,
                due_ms=due,
            )[5:]
            got = reader.read(body, partial(slow_for, body))
            assert got == _fastavro_run(body)
            assert (got.attempt, got.trigger, got.possible_duplicate) == (attempt, trigger, dup)
            assert got.due_at == (None if due is None else from_ms(due))
    assert len(slow_calls) == len(JOBS)  # once per distinct tail


def test_run_request_reader_refuses_a_broken_head() -> None:
    reader = RunRequestReader()
    body = RunTemplate(JOBS[0]).encode(1, "a@x", 5, 6)[5:]
    reader.read(body, lambda: _fastavro_run(body))  # the tail is known now
    with pytest.raises(HeadError):
        reader.read(body[:3], lambda: _fastavro_run(body))  # ends inside the head
    with pytest.raises(HeadError):
        reader.read(zigzag(-5) + body[1:], lambda: _fastavro_run(body))  # negative length
    bad_trigger = bytearray(body)
    bad_trigger[len(body) - len(RunTemplate(JOBS[0])._tail) - 3] = 0x7E  # index 63
    with pytest.raises(HeadError):
        reader.read(bytes(bad_trigger), lambda: _fastavro_run(body))
    bad_branch = bytearray(body)
    bad_branch[len(body) - len(RunTemplate(JOBS[0])._tail) - 1] = 0x04  # due_at branch 2
    with pytest.raises(HeadError):
        reader.read(bytes(bad_branch), lambda: _fastavro_run(body))
    with pytest.raises(UnicodeDecodeError):
        reader.read(b"\x02\xff" + body[2:], lambda: _fastavro_run(body))


@pytest.mark.parametrize(
    ("attempt", "scheduled", "fired"),
    [
        (2**31, 5, 6),  # attempt is an Avro int
        (1, 253_402_300_800_000, 6),  # after year 9999: no datetime holds it
        (1, 5, -62_135_596_800_001),  # before year 1
    ],
)
def test_run_request_reader_refuses_what_fastavro_cannot_read(
    attempt: int, scheduled: int, fired: int
) -> None:
    """Found by review: the reader took these, and the worker crashed on them later
    (``from_ms``, or encoding attempt + 1 for the retry timer)."""
    reader = RunRequestReader()
    good = RunTemplate(JOBS[0]).encode(1, "a@x", 5, 6)[5:]
    reader.read(good, lambda: _fastavro_run(good))
    bad = RunTemplate(JOBS[0]).encode(1, "a@x", scheduled, fired, attempt=attempt)[5:]
    with pytest.raises(HeadError):
        reader.read(bad, lambda: _fastavro_run(good))


def test_a_varint_over_64_bits_is_refused() -> None:
    reader = RunRequestReader()
    good = RunTemplate(JOBS[0]).encode(1, "a@x", 5, 6)[5:]
    reader.read(good, lambda: _fastavro_run(good))
    head = avro_string("a@x") + avro_string(JOBS[0].job_id) + avro_string(JOBS[0].tenant)
    assert good.startswith(head + b"\x02")  # attempt 1
    seventy_bits = b"\xff" * 9 + b"\x7f"
    with pytest.raises(HeadError):
        reader.read(head + seventy_bits + good[len(head) + 1 :], lambda: _fastavro_run(good))


# Around every 7- and 14-bit boundary of the tables, and the ends of a long.
EDGES = [
    n
    for k in range(0, 64, 7)
    for d in (-1, 0, 1)
    for sign in (1, -1)
    if -(2**63) <= (n := sign * (2**k + d)) < 2**63
]


@pytest.mark.parametrize(
    "n", [0, 1, -1, 63, -64, 64, 2**31, -(2**40), 2**62, *EDGES, 2**63 - 1, -(2**63)]
)
def test_zigzag_matches_avro_long_encoding(n: int) -> None:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, "long", n)
    assert zigzag(n) == buf.getvalue()


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_zigzag_matches_avro_long_encoding_anywhere(n: int) -> None:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, "long", n)
    assert zigzag(n) == buf.getvalue()


OUTCOMES = [
    RunOutcome(
        run_id="a@x",
        job_id="a",
        status=RunStatus.STARTED,
        scheduled_at=from_ms(1_795_320_000_000),
        recorded_at=from_ms(1_795_320_000_001),
    ),
    RunOutcome(
        run_id="tenant-ü.job@1" * 9,
        job_id="tenant-ü.job" * 9,
        tenant="acme",
        attempt=2**30,
        status=RunStatus.FAILED,
        trigger=Trigger.RETRY,
        scheduled_at=from_ms(0),
        recorded_at=from_ms(2**41),
        started_at=from_ms(1),
        finished_at=from_ms(-1),
        duration_ms=0,
        error="boom é" * 400,
        next_attempt_at=from_ms(2**42),
        target_type="http",
        worker="w-1",
    ),
]


@pytest.mark.parametrize("base", OUTCOMES, ids=["bare", "every-field"])
@pytest.mark.parametrize("status", list(RunStatus))
@pytest.mark.parametrize("trigger", list(Trigger))
def test_run_outcome_bytes_equal_fastavro(
    base: RunOutcome, status: RunStatus, trigger: Trigger
) -> None:
    outcome = replace(base, status=status, trigger=trigger)
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed_schema(RunOutcome.AVRO_NAME), outcome.to_avro())
    assert encode_run_outcome(outcome) == buf.getvalue()


LETTERS = [
    DeadLetter(
        reason="r",
        stage="worker",
        source_topic="t",
        source_partition=0,
        source_offset=0,
        dead_at=from_ms(0),
    ),
    DeadLetter(
        reason="undecodable run: é" * 300,
        stage="scheduler",
        source_topic="x.runs",
        source_partition=2**31 - 1,
        source_offset=2**62,
        dead_at=from_ms(4_102_444_799_999),
        source_key=b"\x00\xff" * 70,
        source_value=bytes(range(256)) * 9,
        job_id="j" * 200,
        run_id="j@1",
        attempt=-(2**31),
    ),
    DeadLetter(
        reason="",
        stage="",
        source_topic="",
        source_partition=-1,
        source_offset=-1,
        dead_at=from_ms(-1),
        source_key=b"",
        source_value=b"",
        job_id="",
        run_id="",
        attempt=0,
    ),
]


@pytest.mark.parametrize("letter", LETTERS, ids=["bare", "every-field", "empty"])
def test_dead_letter_bytes_equal_fastavro(letter: DeadLetter) -> None:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed_schema(DeadLetter.AVRO_NAME), letter.to_avro())
    assert encode_dead_letter(letter) == buf.getvalue()


@given(
    reason=st.text(max_size=300),
    topic=st.text(max_size=40),
    partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | st.binary(max_size=40) | st.text(max_size=20).map(str.encode),
    value=st.none() | st.binary(max_size=300),
    dead_ms=st.integers(0, 4_102_444_799_999),
)
def test_a_letter_written_from_its_parts_is_the_dead_letter_of_those_parts(
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    dead_ms: int,
) -> None:
    letter = DeadLetter(
        reason=reason,
        stage="worker",
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        dead_at=from_ms(dead_ms),
        source_key=key,
        source_value=value,
        job_id=None if key is None else key.decode("utf-8", "replace"),
    )
    written = LetterWriter("worker").write(reason, topic, partition, offset, key, value, dead_ms)
    assert written == (letter.key().encode(), encode_dead_letter(letter), letter.headers())


@pytest.mark.parametrize(
    "ms", [0, 1, 999, 1_795_320_000_123, 951_782_400_000, 4_102_444_799_999]
)  # the epoch, a leap day, the last millisecond of 2099
def test_iso_is_the_one_wire_form(ms: int) -> None:
    instant = from_ms(ms)
    expected = instant.strftime("%Y-%m-%dT%H:%M:%S.") + f"{instant.microsecond // 1000:03d}Z"
    assert iso(instant) == expected
    paris = instant.astimezone(ZoneInfo("Europe/Paris")) if ms > 10**11 else instant
    assert iso(paris) == expected
