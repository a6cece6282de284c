"""Source records' values as filters see them (docs/event-triggers.md): the
trigger processor's decoding of any producer's records.

- A value in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro body)
  is decoded with the writer's schema, fetched from the registry by its id once and
  kept, into plain values: records as dicts (no ``return_record_name``: a union of
  records gives the record itself), decimals as ``Decimal``, instants as ``datetime``;
- else UTF-8 JSON;
- else (a schema id the registry refuses, an Avro body that does not parse, bytes that
  are neither) the value is MISSING: a comparison with it is false, and the key,
  headers and coordinates still filter. A tombstone's value is null.

Decoding must say the same of a record however often it is read (a re-read after a
crash decides the same runs), so a record whose schema the registry cannot be asked for
right now (it is away) is not decoded as MISSING: ``learn`` waits for the registry
first, as the other readers of records written by others do (``runtime.waiting``).
"""

from __future__ import annotations

import io
import json
import logging
import struct
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import fastavro

from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.waiting import wait_for
from cronstream.schemas.definition.matching import MISSING
from cronstream.schemas.errors import RegistryError
from cronstream.schemas.serde import WriterSchemas

log = logging.getLogger("cronstream.triggers")
_HEADER = struct.Struct(">bI")
MAX_SCHEMAS = 10_000  # writer schemas kept (a topic has a few; past it: forgotten, fetched again)


class SourceValues:
    """Decodes source values for one processor, writer schemas kept by id."""

    def __init__(self, registry: WriterSchemas) -> None:
        self.registry = registry
        self._schemas: dict[int, Any] = {}  # id -> parsed writer schema, or None: refused

    def decode(self, data: bytes | None) -> Any:
        """The value of a record (see the module's text); never raises for bad input."""
        if data is None:
            return None
        if len(data) >= _HEADER.size and data[0] == 0:
            return self._avro(data)
        try:
            return json.loads(data)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return MISSING

    def _avro(self, data: bytes) -> Any:
        _, schema_id = _HEADER.unpack_from(data)
        schema = self._schemas.get(schema_id, MISSING)
        if schema is MISSING:
            schema = self._fetch(schema_id)
        if schema is None:
            return MISSING
        try:
            return fastavro.schemaless_reader(
                io.BytesIO(memoryview(data)[_HEADER.size :]), schema, None
            )
        except Exception:  # fastavro raises many types for a corrupt body: bad input
            return MISSING

    def _fetch(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, or None: the registry refused it
        (not Avro, unknown, unreadable). RegistryUnavailable propagates."""
        if len(self._schemas) >= MAX_SCHEMAS:
            self._schemas.clear()
        schema: Any = None
        try:
            text, kind = self.registry.schema_by_id(schema_id)
        except RegistryError as exc:  # it answered: this id is refused
            log.warning("schema id %d: %s; its records' values are missing", schema_id, exc)
            text, kind = "", ""
        if kind == "AVRO":
            try:
                schema = fastavro.parse_schema(json.loads(text))
            except Exception as exc:  # the registry holds a schema fastavro cannot read
                log.warning(
                    "schema id %d is unreadable (%r): its records' values are missing",
                    schema_id,
                    exc,
                )
        elif kind:
            log.warning(
                "schema id %d is %s, not Avro: its records' values are missing", schema_id, kind
            )
        self._schemas[schema_id] = schema
        return schema

    def unknown(self, data: bytes | None) -> int | None:
        """The schema id of a wire-format value whose writer schema is not known yet."""
        if data is None or len(data) < _HEADER.size or data[0] != 0:
            return None
        _, schema_id = _HEADER.unpack_from(data)
        return None if schema_id in self._schemas else int(schema_id)

    def learn(
        self, messages: Iterable[ConsumedMessage], *, what: str, pause: Callable[[float], bool]
    ) -> None:
        """Every writer schema ``messages`` name that is not known yet, asked of the
        registry, waiting for it while it is away (StopWaiting on a stop): decoding
        them afterwards asks nothing."""
        unknown = {
            i for m in messages if m.error() is None and (i := self.unknown(m.value())) is not None
        }
        for schema_id in sorted(unknown):
            wait_for(what, partial(self._fetch, schema_id), log=log, pause=pause)
