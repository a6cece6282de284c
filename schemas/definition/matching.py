"""What a filter (``schemas.definition.filters``) says of one record: ``matches``, and
``resolve``, the value a path finds in it. Total: neither raises, whatever the record
holds (the rules are in the filters module's text)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import Enum
from typing import Any, Final

from cronstream.schemas.definition.filters import (
    And,
    Compare,
    Expr,
    IsTrue,
    Literal,
    Member,
    Not,
    Operand,
    Or,
    Path,
)


class _Missing(Enum):
    MISSING = "MISSING"


MISSING: Final = _Missing.MISSING  # what a path finds where there is nothing
Missing = _Missing


@dataclass(frozen=True, slots=True)
class Record:
    """One source record as a filter sees it: its key and header values as text (None:
    a record without a key, a header without a value; MISSING: not UTF-8), its value
    decoded from Avro or JSON (MISSING: it could not be)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: str | Missing | None = None
    headers: Mapping[str, str | Missing | None] = field(default_factory=dict)
    value: Any = MISSING


_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _kind(value: Any) -> str:
    """null, bool, number, string, or other (lists, maps, bytes, instants...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float | Decimal):
        return "number"
    return "string" if isinstance(value, str) else "other"


def _equal(a: Any, b: Any) -> bool:
    """Two present values of one scalar kind that are equal (1 == 1.0; never 1 == true)."""
    kind = _kind(a)
    if kind != _kind(b) or kind == "other":
        return False
    try:
        return bool(a == b)
    except ArithmeticError:  # a signalling Decimal NaN
        return False


def _compare(op: str, a: Any, b: Any) -> bool:
    if a is MISSING or b is MISSING:
        return False
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op in _ORDER:
        kind = _kind(a)
        if kind != _kind(b) or kind not in ("number", "string"):
            return False
        try:
            return bool(_ORDER[op](a, b))
        except ArithmeticError:
            return False
    return _text(op, a, b)


def _text(op: str, a: Any, b: Any) -> bool:
    """startswith, endswith, contains (a substring, or an element of a list)."""
    if op == "contains" and isinstance(a, list | tuple):
        return any(_equal(item, b) for item in a)
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    if op == "startswith":
        return a.startswith(b)
    if op == "endswith":
        return a.endswith(b)
    return op == "contains" and b in a


def resolve(operand: Operand, record: Record) -> Any:
    """The value ``operand`` stands for in ``record``; MISSING where there is none."""
    if isinstance(operand, Literal):
        return operand.value
    root = operand.root
    if root == "headers":
        return record.headers.get(str(operand.steps[0]), MISSING)
    if root == "value":
        return _walk(record.value, operand)
    fixed = {
        "key": record.key,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
    }
    return fixed.get(root, MISSING)


def _walk(current: Any, path: Path) -> Any:
    for step in path.steps:
        if isinstance(step, int):
            if not (isinstance(current, list | tuple) and step < len(current)):
                return MISSING
            current = current[step]
        elif isinstance(current, Mapping):
            current = current.get(step, MISSING)
        else:
            return MISSING
        if current is MISSING:
            return MISSING
    return current


def matches(expr: Expr, record: Record) -> bool:
    """Whether ``record`` passes ``expr`` (total: a missing side makes a comparison false)."""
    match expr:
        case Or(items=items):
            return any(matches(item, record) for item in items)
        case And(items=items):
            return all(matches(item, record) for item in items)
        case Not(expr=inner):
            return not matches(inner, record)
        case Compare(op=op, left=left, right=right):
            return _compare(op, resolve(left, record), resolve(right, record))
        case Member(item=item, options=options, negated=negated):
            value = resolve(item, record)
            if value is MISSING:
                return False
            return any(_equal(value, option.value) for option in options) != negated
        case IsTrue(operand=operand):
            return resolve(operand, record) is True
    return False
