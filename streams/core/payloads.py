"""What an event run carries: a source record, or the fields its trigger
names, as JSON text. Pure.

A record's payload item is, without ``fields``, the whole record::

    {"topic": "acme.orders", "partition": 3, "offset": 1042, "timestamp": 1764000000000,
     "key": "cust-7", "headers": {"source": "web"}, "value": {...the decoded value...}}

and with ``fields: {order: value.id, who: key}`` only those, by name
(``{"order": 9, "who": "cust-7"}``; a path that finds nothing gives null). A batch's
payload is ``{"count": N, "records": [item, ...]}`` in offset order.

Decoded values become JSON as losslessly as JSON allows: Avro decimals as their text
(``"19.90"``, exact), bytes as base64 text, instants and dates in ISO 8601, a float
that is not finite as null, maps with text keys; a key or header value that is not
UTF-8 (or absent) is null. The text is compact and keeps the value's field order, so
the same record always gives the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Mapping
from datetime import date, datetime, time
from typing import Any

from cronstream.schemas.definition.filters import Path
from cronstream.schemas.definition.matching import MISSING, Record, resolve

# A group's key longer than this (a whole map, a long text) is kept as its digest: the
# groups are the keys of a trigger's checkpointed state.
MAX_GROUP_TEXT = 128
# '{"count":' N ',"records":[' ... ']}' around a batch's items, without N's digits
BATCH_FRAME = len('{"count":,"records":[]}')


def jsonable(value: Any) -> Any:
    """``value`` (decoded from Avro or JSON) as plain JSON values (see the module)."""
    if value is None or value is MISSING:
        return None
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    return str(value)  # Decimal (exact), UUID, and whatever else a decoder hands out


def text(value: Any) -> str:
    """Compact JSON text (RecursionError for a value nested past Python's limit)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def item(record: Record, fields: tuple[tuple[str, Path], ...]) -> str:
    """The JSON text a record contributes to a run's payload."""
    if fields:
        return text({name: jsonable(resolve(path, record)) for name, path in fields})
    return text(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "timestamp": record.timestamp_ms,
            "key": jsonable(record.key),
            "headers": {name: jsonable(v) for name, v in record.headers.items()},
            "value": jsonable(record.value),
        }
    )


def batch(items: list[str]) -> str:
    return f'{{"count":{len(items)},"records":[{",".join(items)}]}}'


def group_of(key: Path | None, record: Record) -> str:
    """The group a record falls in for debounce and batch: "" without a key path, "-"
    when the path finds nothing, else the value's JSON text (1 and "1" differ), as a
    digest ("#...") when longer than MAX_GROUP_TEXT."""
    if key is None:
        return ""
    value = resolve(key, record)
    if value is MISSING:
        return "-"
    found = json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False, allow_nan=False)
    if len(found) <= MAX_GROUP_TEXT:
        return found
    return "#" + hashlib.sha256(found.encode()).hexdigest()
