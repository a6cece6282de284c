"""Fast encoding of the records cronstream emits by the ten thousand: RunRequest (the
scheduler) and RunOutcome (the workers, two or more per run).

A job's run requests differ only in the run id, the instants, the attempt, the trigger
and the duplicate flag; everything else (target, payload, retry policy...) is the same
for every run of one definition. ``RunTemplate`` encodes the constant part once, with
fastavro, and writes the varying fields by hand in Avro's binary encoding (zig-zag
varints, length-prefixed UTF-8, enum indexes). The result is byte-for-byte what
``Codec.encode`` produces — a unit test holds it to that — at a fraction of the cost.

Field order is RunRequest.avsc's: run_id, job_id, tenant, attempt, scheduled_at,
fired_at, trigger, possible_duplicate, due_at, then the constant tail.

``RunRequestReader`` is the way back, for the workers: it reads the varying head by
hand and keeps the decoded constant tail of the definitions it has seen, so a run
request costs fastavro only the first time its tail comes by.

``encode_run_outcome`` writes a whole RunOutcome body by hand, in RunOutcome.avsc's
field order; a unit test holds it equal to fastavro's for every status and every
optional field present or absent.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from datetime import datetime

import fastavro

from cronstream.schemas.avro import parsed_schema
from cronstream.schemas.errors import HeadError, LimitError
from cronstream.schemas.events import (
    EPOCH,
    DeadLetter,
    JobDefinition,
    RunOutcome,
    RunRequest,
    RunStatus,
    Trigger,
    execution,
    from_ms,
    run_identity,
    to_ms,
)
from cronstream.schemas.limits import head_problems, refusal, tail_problems
from cronstream.schemas.wire import (
    Tails,
    avro_string,
    read_instant,
    read_int,
    read_long,
    read_string,
    zigzag,
)

_HEADER = struct.Struct(">bI")
TRIGGER_INDEX = {trigger: index for index, trigger in enumerate(Trigger)}
STATUS_INDEX = {status: bytes([2 * index]) for index, status in enumerate(RunStatus)}
TRIGGER_BYTE = {trigger: bytes([2 * index]) for index, trigger in enumerate(Trigger)}


class RunTemplate:
    """The encoded constant part of one definition's run requests."""

    __slots__ = ("_ident", "_tail", "header_job", "job_id", "priority")

    def __init__(self, job: JobDefinition) -> None:
        self.job_id = job.job_id
        self.priority = job.priority
        self.header_job = job.job_id.encode()
        self._ident = avro_string(job.job_id) + avro_string(job.tenant)
        probe = job.run_request(
            run_id="", scheduled_at=EPOCH, fired_at=EPOCH, trigger=Trigger.SCHEDULE
        )
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed_schema(RunRequest.AVRO_NAME), probe.to_avro())
        encoded = buf.getvalue()
        # run_id "" (1 byte), ident, attempt 1 (1), two zero instants (1+1), trigger
        # index 0 (1), possible_duplicate false (1), due_at null (1): 7 bytes plus
        # the ident.
        head = 7 + len(self._ident)
        self._tail = encoded[head:]
        self._tail_check(encoded, head)

    def _tail_check(self, encoded: bytes, head: int) -> None:
        expected = b"\x00" + self._ident + b"\x02\x00\x00\x00\x00\x00"
        if encoded[:head] != expected:
            raise AssertionError("RunRequest.avsc field order changed: update RunTemplate")

    def encode(
        self,
        schema_id: int,
        run_id: str,
        scheduled_ms: int,
        fired_ms: int,
        *,
        attempt: int = 1,
        trigger: Trigger = Trigger.SCHEDULE,
        possible_duplicate: bool = False,
        due_ms: int | None = None,
    ) -> bytes:
        """The Confluent wire-format value of one run request."""
        return b"".join(
            (
                _HEADER.pack(0, schema_id),
                avro_string(run_id),
                self._ident,
                zigzag(attempt),
                zigzag(scheduled_ms),
                zigzag(fired_ms),
                zigzag(TRIGGER_INDEX[trigger]),
                b"\x01" if possible_duplicate else b"\x00",
                _opt_long(due_ms),
                self._tail,
            )
        )


TRIGGERS = tuple(Trigger)


class RunRequestReader:
    """Decodes RunRequest bodies written with our schema (``RunTemplate``'s layout).

    The head (run id, job id, tenant, attempt, instants, trigger, duplicate flag) is
    read by hand; the rest, the same bytes for every run of one definition, is looked
    up among the tails decoded before. An unseen tail is decoded with ``slow`` (the
    whole record, by fastavro) and remembered (``schemas.wire.Tails``). A head that
    does not parse raises HeadError (or UnicodeDecodeError)."""

    def __init__(self, *, limits: bool = False) -> None:
        # Refuse runs over ``schemas.limits`` (LimitError): the tail's part is checked
        # once per tail, the head's per run.
        self.limits = limits
        self._tails: Tails[tuple[RunRequest, list[str]]] = Tails()

    def read(self, body: bytes, slow: Callable[[], RunRequest]) -> RunRequest:
        try:
            run_id, pos = read_string(body, 0)
            job_id, pos = read_string(body, pos)
            tenant, pos = read_string(body, pos)
            attempt, pos = read_int(body, pos)
            scheduled, pos = read_instant(body, pos)
            fired, pos = read_instant(body, pos)
            trigger, pos = read_long(body, pos)
            duplicate = body[pos]
            branch = body[pos + 1]
            if branch == 2:
                due, pos = read_instant(body, pos + 2)
            elif branch == 0:
                due, pos = None, pos + 2
            else:
                raise HeadError(f"due_at union branch byte {branch} out of range")
        except IndexError:
            raise HeadError("record ends inside the RunRequest head") from None
        if not 0 <= trigger < len(TRIGGERS) or duplicate > 1:
            raise HeadError(f"trigger index {trigger} / boolean byte {duplicate} out of range")
        tail = body[pos:]
        cached = self._tails.get(tail)
        if cached is None:
            run = slow()
            cached = (run, tail_problems(run) if self.limits else [])
            self._tails.put(tail, cached)
        known, problems = cached
        if self.limits:
            problems = problems + head_problems(run_id, job_id, tenant, attempt)
            if problems:
                raise LimitError(refusal(problems))
        return RunRequest(
            run_id=run_id,
            job_id=job_id,
            tenant=tenant,
            attempt=attempt,
            scheduled_at=from_ms(scheduled),
            fired_at=from_ms(fired),
            trigger=TRIGGERS[trigger],
            possible_duplicate=duplicate == 1,
            due_at=None if due is None else from_ms(due),
            concurrency=known.concurrency,
            **execution(known),
        )


def _opt_long(value: int | None) -> bytes:
    # Optional fields are ["null", T] unions: branch 0 is null, branch 1 (byte 2) a value.
    return b"\x00" if value is None else b"\x02" + zigzag(value)


def _opt_string(value: str | None) -> bytes:
    return b"\x00" if value is None else b"\x02" + avro_string(value)


class OutcomeTemplate:
    """The encoded constant part of one attempt's outcomes (a worker writes two or more
    per attempt: STARTED, then the final one): the ids, attempt, trigger, scheduled
    time, target type and worker are encoded once; ``encode`` writes the rest."""

    __slots__ = ("_head", "_middle", "_tail")

    def __init__(
        self,
        *,
        run_id: str,
        job_id: str,
        tenant: str,
        attempt: int,
        scheduled_at: datetime,
        trigger: Trigger,
        target_type: str | None,
        worker: str | None,
    ) -> None:
        self._head = avro_string(run_id) + avro_string(job_id) + avro_string(tenant)
        self._head += zigzag(attempt)
        self._middle = TRIGGER_BYTE[trigger] + zigzag(to_ms(scheduled_at))
        self._tail = _opt_string(target_type) + _opt_string(worker)

    def encode(
        self,
        status: RunStatus,
        recorded_ms: int,
        *,
        started_ms: int | None = None,
        finished_ms: int | None = None,
        duration_ms: int | None = None,
        error: str | None = None,
        next_attempt_ms: int | None = None,
    ) -> bytes:
        """The Avro body (no wire-format header) of one outcome, in RunOutcome.avsc's
        field order."""
        return b"".join(
            (
                self._head,
                STATUS_INDEX[status],
                self._middle,
                zigzag(recorded_ms),
                _opt_long(started_ms),
                _opt_long(finished_ms),
                _opt_long(duration_ms),
                _opt_string(error),
                _opt_long(next_attempt_ms),
                self._tail,
            )
        )


def _ms_or_none(instant: datetime | None) -> int | None:
    return None if instant is None else to_ms(instant)


def encode_run_outcome(outcome: RunOutcome) -> bytes:
    """The Avro body (no wire-format header) of ``outcome``, as fastavro writes it."""
    o = outcome
    template = OutcomeTemplate(
        **run_identity(o), trigger=o.trigger, target_type=o.target_type, worker=o.worker
    )
    return template.encode(
        o.status,
        to_ms(o.recorded_at),
        started_ms=_ms_or_none(o.started_at),
        finished_ms=_ms_or_none(o.finished_at),
        duration_ms=o.duration_ms,
        error=o.error,
        next_attempt_ms=_ms_or_none(o.next_attempt_at),
    )


def _opt_bytes(value: bytes | None) -> bytes:
    return b"\x00" if value is None else b"\x02" + zigzag(len(value)) + value


def encode_dead_letter(letter: DeadLetter) -> bytes:
    """The Avro body (no wire-format header) of ``letter``, as fastavro writes it: a
    flood of undecodable records costs one of these each."""
    d = letter
    return b"".join(
        (
            avro_string(d.reason),
            avro_string(d.stage),
            avro_string(d.source_topic),
            zigzag(d.source_partition),
            zigzag(d.source_offset),
            _opt_bytes(d.source_key),
            _opt_bytes(d.source_value),
            _opt_string(d.job_id),
            _opt_string(d.run_id),
            _opt_long(d.attempt),
            zigzag(to_ms(d.dead_at)),
        )
    )


class LetterWriter:
    """DLQ records of one stage's unusable source records, encoded straight from the
    record's place, key and value: the same key, value body and headers as
    ``dead_letter`` (job id from the source key) through ``encode_dead_letter`` and
    ``DeadLetter.headers``, without building the DeadLetter (a frozen dataclass of
    eleven fields). A flood of malformed records costs one of these each."""

    __slots__ = ("_sources", "_stage", "_stage_header")

    def __init__(self, stage: str) -> None:
        self._stage = avro_string(stage)
        self._stage_header = ("stage", stage.encode())
        self._sources: dict[tuple[str, int], bytes] = {}  # the encoded source topic, partition

    def write(
        self,
        reason: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        dead_ms: int,
    ) -> tuple[bytes, bytes, list[tuple[str, bytes]]]:
        """(record key, Avro body, headers) of the letter for one source record."""
        source = self._sources.get((topic, partition))
        if source is None:
            source = self._sources[(topic, partition)] = avro_string(topic) + zigzag(partition)
        if key is None:
            job_id, key_field, job_field = b"", b"\x00", b"\x00"
        else:
            text = key.decode("utf-8", "replace")  # the job id: the key, read as UTF-8
            job_id = key if "\ufffd" not in text else text.encode()
            key_field = b"\x02" + zigzag(len(key)) + key
            job_field = key_field if job_id is key else b"\x02" + zigzag(len(job_id)) + job_id
        body = b"".join(
            (
                avro_string(reason),
                self._stage,
                source,
                zigzag(offset),
                key_field,
                _opt_bytes(value),
                job_field,
                b"\x00\x00",
                zigzag(dead_ms),
            )
        )
        headers = [
            ("event", b"DeadLetter"),
            self._stage_header,
            ("source", f"{topic}/{partition}@{offset}".encode()),
            ("reason", reason[:200].encode()),
        ]
        if job_id:
            headers.append(("job_id", job_id))
        return job_id, body, headers


__all__ = [
    "LetterWriter",
    "OutcomeTemplate",
    "RunRequestReader",
    "RunTemplate",
    "avro_string",
    "encode_dead_letter",
    "encode_run_outcome",
    "zigzag",
]
