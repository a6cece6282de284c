"""Load the ``.avsc`` files in ``schemas/avro/`` into self-contained schemas, once.

A file may name a type defined in another file (``"type": "cronstream.Target"``); the
loader inlines that definition at its first use, so each top-level schema registered
with the schema registry stands on its own (no registry references needed), exactly as
Avro's own Java tooling would emit it. Files are named after the type's full name.

``AvroRecord`` is the mixin of the dataclasses that are Avro records (``schemas.events``
and the others): to and from the plain dicts fastavro reads and writes; ``KeyedByJob``
that of those keyed by their job's id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import fields
from datetime import datetime
from enum import StrEnum
from functools import cache, partial
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import Any, Self, get_args, get_origin, get_type_hints

import fastavro

from cronstream.schemas.errors import SchemaFileError
from cronstream.schemas.instants import aware
from cronstream.schemas.schedules import CronSchedule, schedule_from_avro, schedule_to_avro

AVRO_DIR = Path(__file__).resolve().parent / "avro"

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@cache
def _raw(fullname: str) -> dict[str, Any]:
    path = AVRO_DIR / f"{fullname}.avsc"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise SchemaFileError(f"no schema file for type {fullname!r} ({path})") from None
    return data


def _inline_name(name: str, namespace: str, defined: set[str]) -> Any:
    """A type named by a string: a primitive, one defined already, or its file inlined."""
    if name in PRIMITIVES:
        return name
    fullname = name if "." in name else f"{namespace}.{name}"
    if fullname in defined:
        return fullname
    return _inline(_raw(fullname), namespace, defined)


def _inline(node: Any, namespace: str, defined: set[str]) -> Any:
    if isinstance(node, str):
        return _inline_name(node, namespace, defined)
    if isinstance(node, list):
        return [_inline(branch, namespace, defined) for branch in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    out = dict(node)
    if kind in ("record", "error", "enum", "fixed"):
        ns = node.get("namespace", namespace)
        defined.add(node["name"] if "." in node["name"] else f"{ns}.{node['name']}")
        if kind in ("record", "error"):
            out["fields"] = [
                {**field, "type": _inline(field["type"], ns, defined)} for field in node["fields"]
            ]
        return out
    if kind == "array":
        out["items"] = _inline(node["items"], namespace, defined)
    elif kind == "map":
        out["values"] = _inline(node["values"], namespace, defined)
    elif isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in PRIMITIVES):
        out["type"] = _inline(kind, namespace, defined)
    return out


@cache
def schema_json(fullname: str) -> str:
    """The self-contained schema of ``fullname`` as compact JSON (what gets registered)."""
    return json.dumps(_inline(fullname, "cronstream", set()), separators=(",", ":"))


@cache
def parsed_schema(fullname: str) -> Any:
    """The fastavro-parsed schema of ``fullname``; parsing happens once per process."""
    return fastavro.parse_schema(json.loads(schema_json(fullname)))


# Each record class converts to and from fastavro's dicts by its field types, worked out
# once per class: enums travel as their symbol, instants as aware datetimes, nested
# records recursively, the schedule union as (record name, fields) so fastavro picks the
# branch without guessing.
Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _optional(convert: Convert) -> Convert:
    return lambda value: None if value is None else convert(value)


def _record_from_avro(from_avro: Convert, value: Any) -> Any:
    # A record in a union (["null", Record]) comes as (name, fields) from codecs, which
    # read with return_record_name (for the schedule union).
    return from_avro(value[1] if isinstance(value, tuple) else value)


def _converters(hint: Any) -> tuple[Convert, Convert]:
    """(to_avro, from_avro) for a value of type ``hint``."""
    args = get_args(hint)
    if CronSchedule in args:
        return schedule_to_avro, schedule_from_avro
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        to_inner, from_inner = _converters(inner)
        return _optional(to_inner), _optional(from_inner)
    if hint is datetime:
        return _same, aware
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return attrgetter("value"), hint
    if isinstance(hint, type) and issubclass(hint, AvroRecord):
        return methodcaller("to_avro"), partial(_record_from_avro, hint.from_avro)
    if get_origin(hint) is dict:
        return dict, dict
    if get_origin(hint) is tuple:  # tuple[X, ...]: an Avro array
        to_item, from_item = _converters(args[0])
        return (lambda seq: [to_item(x) for x in seq]), (lambda seq: tuple(map(from_item, seq)))
    return _same, _same


class AvroRecord:
    """Mixin for the dataclasses that are Avro records: ``to_avro`` and ``from_avro``."""

    __slots__ = ()

    @classmethod
    def _fields(cls) -> tuple[tuple[str, Convert, Convert], ...]:
        try:
            return cls.__dict__["_avro_fields_cache"]  # type: ignore[no-any-return]
        except KeyError:
            hints = get_type_hints(cls)
            table = tuple(
                (f.name, *_converters(hints[f.name]))
                for f in fields(cls)  # type: ignore[arg-type]
            )
            type.__setattr__(cls, "_avro_fields_cache", table)
            return table

    def to_avro(self) -> dict[str, Any]:
        return {name: to(getattr(self, name)) for name, to, _ in self._fields()}

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(**{name: back(d[name]) for name, _, back in cls._fields()})


class KeyedByJob(AvroRecord):
    """A record keyed by its job's id, so that a job's records keep their order on one
    partition (co-partitioned with the jobs topic)."""

    __slots__ = ()
    job_id: str

    def key(self) -> str:
        return self.job_id
