"""Avro in the Confluent wire format, through a schema registry.

A value is ``0x00`` + the 4-byte big-endian schema id + the Avro body. Encoding uses the
id under which *our* schema file is registered for the topic's subject (looked up, or
registered, once per subject per process). Decoding fetches the *writer's* schema by the
id in the record (cached) and resolves it against our reader schema, so records written
by older or newer compatible schema versions decode into today's dataclasses.

Bad input (wrong magic byte, unknown id, a body that does not parse, a record of a type
we did not expect) raises DecodeError, which callers turn into a DLQ record. Failing to
*encode* one of our own events is a bug and raises whatever fastavro raised.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import time
from typing import Any, Protocol, TypeVar

import fastavro

from cronstream.schemas.alerts import Alert
from cronstream.schemas.audit import AuditRecord
from cronstream.schemas.avro import parsed_schema, schema_json
from cronstream.schemas.errors import (
    DecodeError,
    HeadError,
    InvalidTiming,
    LimitError,
    RegistryError,
)
from cronstream.schemas.events import (
    ControlCommand,
    DeadLetter,
    JobDefinition,
    RunOutcome,
    RunRequest,
    TimerRequest,
)
from cronstream.schemas.flows import FlowDefinition, FlowEvent
from cronstream.schemas.limits import refusal, run_problems
from cronstream.schemas.output import RunOutput
from cronstream.schemas.registry import RegistryClient
from cronstream.schemas.templates import RunRequestReader, encode_dead_letter, encode_run_outcome
from cronstream.schemas.tenancy import AnyEvent, TenantCommand, TenantResult
from cronstream.schemas.timing import JobTiming, TimingReader

MAGIC = 0
# A schema id the registry refused is refused again without asking for this long.
REFUSED_FOR_S = 60.0
_HEADER = struct.Struct(">bI")
EVENT_TYPES: dict[str, type[AnyEvent]] = {
    t.AVRO_NAME: t
    for t in (
        *(JobDefinition, RunRequest, RunOutcome, TimerRequest, ControlCommand, DeadLetter, Alert),
        *(TenantCommand, TenantResult, FlowDefinition, FlowEvent, AuditRecord, RunOutput),
    )
}
E = TypeVar("E", bound=AnyEvent)


class WriterSchemas(Protocol):
    """What decoding asks of a schema registry: a writer's schema by its id, as (text,
    kind). ``schemas.registry.RegistryClient`` is one; unit tests pass in-memory fakes."""

    def schema_by_id(self, schema_id: int) -> tuple[str, str]: ...


class SchemaRegistry(WriterSchemas, Protocol):
    """What a ``Codec`` asks of its registry client: ids of the schemas it writes with
    (registering them or looking them up), writers' schemas, and ``close`` (the
    ``Publisher`` that owns the codec releases the client)."""

    def register(self, subject: str, schema: str) -> int: ...
    def lookup(self, subject: str, schema: str) -> int | None: ...
    def close(self) -> None: ...


class Codec:
    """Encode and decode cronstream events for one schema registry."""

    def __init__(self, registry: SchemaRegistry) -> None:
        self.registry = registry
        self._writer_ids: dict[tuple[str, str], int] = {}
        self._writers: dict[int, tuple[str, Any, bool]] = {}
        self._refused: dict[int, tuple[float, str]] = {}  # id -> (until, why)
        self._runs = RunRequestReader(limits=True)
        self._timings = TimingReader()

    # -- registration -------------------------------------------------------------------
    def register(self, subject: str, event_type: type[AnyEvent]) -> int:
        """Register our schema for ``event_type`` under ``subject``; returns its id."""
        schema_id = self.registry.register(subject, schema_json(event_type.AVRO_NAME))
        self._writer_ids[(subject, event_type.AVRO_NAME)] = schema_id
        return schema_id

    def writer_id(self, subject: str, event_type: type[AnyEvent]) -> int:
        """The id our schema has under ``subject`` (registered on first use if missing)."""
        cached = self._writer_ids.get((subject, event_type.AVRO_NAME))
        if cached is not None:
            return cached
        schema_id = self.registry.lookup(subject, schema_json(event_type.AVRO_NAME))
        if schema_id is None:
            return self.register(subject, event_type)
        self._writer_ids[(subject, event_type.AVRO_NAME)] = schema_id
        return schema_id

    # -- encode -------------------------------------------------------------------------
    def wire_prefix(self, topic: str, event_type: type[AnyEvent]) -> bytes:
        """The wire-format header (magic byte, schema id) of ``event_type`` values on
        ``topic``, for callers that encode the body themselves (``schemas.templates``)."""
        return _HEADER.pack(MAGIC, self.writer_id(f"{topic}-value", event_type))

    def encode(self, topic: str, event: AnyEvent) -> bytes:
        prefix = self.wire_prefix(topic, type(event))
        if type(event) is RunOutcome:  # the hot one: written by hand, same bytes
            return prefix + encode_run_outcome(event)
        if type(event) is DeadLetter:  # one per record of a flood of bad ones
            return prefix + encode_dead_letter(event)
        buf = io.BytesIO()
        buf.write(prefix)
        fastavro.schemaless_writer(buf, parsed_schema(event.AVRO_NAME), event.to_avro())
        return buf.getvalue()

    # -- decode -------------------------------------------------------------------------
    def _writer(self, schema_id: int) -> tuple[str, Any, bool]:
        """(full name, parsed writer schema, whether it is exactly our schema)."""
        cached = self._writers.get(schema_id)
        if cached is not None:
            return cached
        refused = self._refused.get(schema_id)
        if refused is not None and refused[0] > time.monotonic():
            raise DecodeError(refused[1])
        return self._fetch_writer(schema_id, self.registry)

    def unknown_id(self, data: bytes | None) -> int | None:
        """The writer schema id in ``data``'s header when decoding it would have to ask
        the registry (neither known nor refused lately); None otherwise."""
        if data is None or len(data) < _HEADER.size:
            return None
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC or schema_id in self._writers:
            return None
        refused = self._refused.get(schema_id)
        if refused is not None and refused[0] > time.monotonic():
            return None
        return int(schema_id)

    def learn(self, schema_id: int, registry: WriterSchemas) -> None:
        """Ask ``registry`` for ``schema_id`` (off a hot loop: ``unknown_id``); it is
        known or refused afterwards. RegistryUnavailable propagates."""
        with contextlib.suppress(DecodeError):  # remembered in _refused
            self._fetch_writer(schema_id, registry)

    def _fetch_writer(self, schema_id: int, registry: WriterSchemas) -> tuple[str, Any, bool]:
        try:
            text, kind = registry.schema_by_id(schema_id)
        except RegistryError as exc:
            # The registry answered, so it is up: the refusal is about this record's
            # schema id (unknown: 404; or forbidden...). Remembered for a while, so a
            # flood of such records costs one request per id, not one per record.
            # (Unreachable, or a server error: RegistryUnavailable, for the caller.)
            reason = (
                f"schema id {schema_id} is not in the registry"
                if exc.status == 404
                else f"schema id {schema_id}: the registry refused it ({exc})"
            )
            raise self._refuse(schema_id, reason) from exc
        if kind != "AVRO":
            raise self._refuse(schema_id, f"schema id {schema_id} is {kind}, not Avro")
        try:
            raw = json.loads(text)
            name = raw.get("name", "") if isinstance(raw, dict) else ""
            if "." not in name and isinstance(raw, dict):
                name = f"{raw.get('namespace', '')}.{name}".lstrip(".")
            ours = name in EVENT_TYPES and raw == json.loads(schema_json(name))
            entry = (name, fastavro.parse_schema(raw), ours)
        except Exception as exc:  # the registry holds a schema fastavro cannot read
            raise self._refuse(schema_id, f"schema id {schema_id}: unreadable ({exc!r})") from exc
        self._writers[schema_id] = entry
        return entry

    def _refuse(self, schema_id: int, reason: str) -> DecodeError:
        if len(self._refused) >= 4096:
            self._refused.clear()
        self._refused[schema_id] = (time.monotonic() + REFUSED_FOR_S, reason)
        return DecodeError(reason)

    def decode(self, data: bytes | None, expected: type[E]) -> E:
        event_type, record = self._read(data, expected)
        try:
            return event_type.from_avro(record)  # type: ignore[return-value]
        except Exception as exc:
            raise DecodeError(f"undecodable {event_type.AVRO_NAME} body: {exc!r}") from exc

    def decode_run(self, data: bytes | None) -> RunRequest:
        """``decode(data, RunRequest)``, for the workers' hot path: a record written with
        our schema goes through ``RunRequestReader`` (same result, a fraction of the
        cost once its definition's tail has been seen). A run over ``schemas.limits``
        is refused."""
        if data is not None and self._ours(data, RunRequest):
            try:
                return self._runs.read(data[_HEADER.size :], lambda: self.decode(data, RunRequest))
            except (HeadError, IndexError, UnicodeDecodeError) as exc:
                raise DecodeError(f"undecodable {RunRequest.AVRO_NAME} body: {exc!r}") from exc
            except LimitError as exc:
                raise DecodeError(str(exc)) from None
        run = self.decode(data, RunRequest)
        problems = run_problems(run)
        if problems:
            raise DecodeError(refusal(problems))
        return run

    def decode_timing(self, data: bytes | None) -> JobTiming:
        """A JobDefinition's scheduling fields, for a scheduler loading its partitions:
        a record written with our schema goes through ``TimingReader`` (the same result
        as fastavro's, a fraction of the cost once its tail has been seen)."""
        if data is not None and self._ours(data, JobDefinition):
            try:
                return self._timings.read(data[_HEADER.size :], lambda: self._slow_timing(data))
            except (HeadError, IndexError, UnicodeDecodeError) as exc:
                raise DecodeError(f"undecodable {JobDefinition.AVRO_NAME} body: {exc!r}") from exc
            except InvalidTiming as exc:
                raise DecodeError(str(exc)) from None
        return self._slow_timing(data)

    def _ours(self, data: bytes, event_type: type[AnyEvent]) -> bool:
        """Whether ``data`` was written with exactly our schema of ``event_type`` (then
        a hand reader may read its body)."""
        if len(data) <= _HEADER.size:
            return False
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            return False
        name, _, ours = self._writer(schema_id)
        return ours and name == event_type.AVRO_NAME

    def _slow_timing(self, data: bytes | None) -> JobTiming:
        record = self.decode_record(data, JobDefinition)
        try:
            return JobTiming.from_record(record)
        except InvalidTiming as exc:
            raise DecodeError(str(exc)) from None

    def decode_any(self, data: bytes | None) -> AnyEvent:
        event_type, record = self._read(data, None)
        try:
            return event_type.from_avro(record)
        except Exception as exc:
            raise DecodeError(f"undecodable {event_type.AVRO_NAME} body: {exc!r}") from exc

    def decode_record(self, data: bytes | None, expected: type[AnyEvent]) -> dict[str, Any]:
        """The record as fastavro's dict in our schema's shape, for hot paths that want
        a few fields of many records without building the dataclass."""
        _, record = self._read(data, expected)
        return record  # type: ignore[no-any-return]

    def _read(self, data: bytes | None, expected: type[Any] | None) -> tuple[type[AnyEvent], Any]:
        """(type, fastavro's record); a record of another type than ``expected`` is
        refused before its body is read."""
        if data is None:
            raise DecodeError("record has no value (tombstone)")
        if len(data) < _HEADER.size:
            raise DecodeError(f"record of {len(data)} bytes is too short for the wire format")
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise DecodeError(f"unknown magic byte {magic} (not the Confluent wire format)")
        writer_name, writer, ours = self._writer(schema_id)
        event_type = EVENT_TYPES.get(writer_name)
        if event_type is None:
            raise DecodeError(f"schema id {schema_id} is {writer_name!r}, not a cronstream event")
        if expected is not None and event_type is not expected:
            raise DecodeError(f"expected a {expected.AVRO_NAME} record, got {writer_name}")
        try:
            record: Any = fastavro.schemaless_reader(
                io.BytesIO(memoryview(data)[_HEADER.size :]),
                writer,
                # Resolution is skipped when the writer used exactly our schema.
                None if ours else parsed_schema(event_type.AVRO_NAME),
                # Record-typed union branches always come back as (name, record), whatever
                # the writer's union looked like (see schedule_from_avro).
                return_record_name=True,
            )
        except Exception as exc:  # fastavro raises many types for a corrupt body
            raise DecodeError(f"undecodable {writer_name} body: {exc!r}") from exc
        return event_type, record


__all__ = ["Codec", "RegistryClient", "SchemaRegistry", "WriterSchemas"]
