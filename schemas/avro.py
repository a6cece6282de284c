"""Load the ``.avsc`` files in ``schemas/avro/`` into self-contained schemas, once.

A file may name a type defined in another file (``"type": "cronstream.Target"``); the
loader inlines that definition at its first use, so each top-level schema registered
with the schema registry stands on its own (no registry references needed), exactly as
Avro's own Java tooling would emit it. Files are named after the type's full name.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

from cronstream.schemas.errors import SchemaFileError

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
