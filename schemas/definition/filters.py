"""The filter language of event triggers: which records of a topic run a job.

A filter is an expression over one record, read by this module's own tokenizer and
parser (never ``eval``, ``exec`` or Python's ``ast``: user text is data here)::

    value.amount >= 100 and value.currency in ["EUR", "USD"]
    headers["source"] == "web" and not (key startswith "test-")
    value.items[0].sku contains "gift" or value.customer.vip

- **paths**: ``value`` (the decoded Avro or JSON value) followed by ``.field``,
  ``["any field"]`` or ``[index]`` steps; ``key`` (the record's key as text, null for a
  record without one); ``headers["name"]`` (or ``headers.name``; a header repeated: its
  last value); ``topic``, ``partition``, ``offset``, ``timestamp`` (epoch milliseconds);
- **literals**: numbers (``12``, ``-3.5``, ``1e3``), strings in double or single quotes
  (escapes ``\\" \\' \\\\ \\n \\t \\r \\b \\f \\/ \\uXXXX``), ``true``, ``false``, ``null``;
- **comparisons**: ``== != < <= > >=``, ``in [literals]``, ``not in [...]``,
  ``startswith``, ``endswith``, ``contains`` (a substring, or an element of a list);
  a path alone means "is the boolean true";
- ``and``, ``or``, ``not`` and parentheses: a comparison binds tighter than ``not``,
  ``not`` than ``and``, ``and`` than ``or`` (``not a == 1 or b`` is
  ``(not (a == 1)) or b``).

**Evaluation is total** (``schemas.definition.matching.matches`` never raises): a
comparison with a side that is missing (no such field, an index past the end, a path
into a number, a header not there, a key that is not UTF-8, a value that could not be
decoded) is false. ``==`` and ``in`` hold only between values of one kind (numbers,
strings, booleans, null: ``1`` never equals ``"1"`` or ``true``); ``!=`` and ``not in``
are their negations *on present values* (so ``value.x != 1`` is false when ``x`` is
missing, while ``not value.x == 1`` is true). Ordering needs two numbers or two strings
(by code point); the string operators two strings. Anything else is false.

**Limits** (``schemas.limits``): ``MAX_FILTER`` characters, ``MAX_FILTER_DEPTH`` nested
parentheses or ``not``s, ``MAX_PATH_STEPS`` steps in a path. A text that does not parse
raises FilterError naming the column. ``unparse`` prints an expression back in a
canonical form that parses to the same expression.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from cronstream.schemas.errors import FilterError
from cronstream.schemas.limits import MAX_FILTER, MAX_FILTER_DEPTH, MAX_PATH_STEPS

ROOTS = ("value", "key", "headers", "topic", "partition", "offset", "timestamp")
TEXT_OPS = ("startswith", "endswith", "contains")
KEYWORDS = frozenset({"and", "or", "not", "in", "true", "false", "null", *TEXT_OPS})
Scalar = str | int | float | bool | None


# -- the expression -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Literal:
    value: Scalar


@dataclass(frozen=True, slots=True)
class Path:
    root: str  # one of ROOTS
    steps: tuple[str | int, ...] = ()  # field names and list indexes (headers: the name)


Operand = Literal | Path


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # == != < <= > >= startswith endswith contains
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Member:
    item: Operand
    options: tuple[Literal, ...]
    negated: bool = False  # not in


@dataclass(frozen=True, slots=True)
class IsTrue:
    operand: Operand


@dataclass(frozen=True, slots=True)
class Not:
    expr: Expr


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Expr, ...]


Expr = Compare | Member | IsTrue | Not | And | Or


# -- reading ----------------------------------------------------------------------------
_TOKEN = re.compile(
    r"(?P<space>\s+)|(?P<number>-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|<|>)|(?P<punct>[()\[\],.])"
    r"|(?P<quote>[\"'])"
)
_ESCAPES = {
    '"': '"',
    "'": "'",
    "\\": "\\",
    "/": "/",
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
}
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # number, name, op, punct, string, end
    text: str
    value: Any
    column: int  # 1-based


def _string(text: str, start: int) -> tuple[str, int]:
    """The string literal whose quote is at ``start``: (its value, the index after it)."""
    quote, i, out = text[start], start + 1, list[str]()
    while i < len(text):
        char = text[i]
        if char == quote:
            return "".join(out), i + 1
        if char != "\\":
            out.append(char)
            i += 1
            continue
        escape = text[i + 1 : i + 2]
        digits = text[i + 2 : i + 6]
        if escape in _ESCAPES:
            out.append(_ESCAPES[escape])
            i += 2
        elif escape == "u" and len(digits) == 4 and set(digits) <= _HEX:
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            raise FilterError(f"unknown escape {text[i : i + 2]!r} in a string", i + 1)
    raise FilterError("a string is not closed", start + 1)


def _number(text: str, column: int) -> int | float:
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise FilterError(f"number {text[:40]} is out of range", column)
    return number


def _tokens(text: str) -> list[_Token]:
    """``text`` as tokens, ending with an ``end`` token; FilterError for a character
    that starts none."""
    if len(text) > MAX_FILTER:
        raise FilterError(f"longer than {MAX_FILTER} characters", MAX_FILTER + 1)
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise FilterError(f"unexpected character {text[pos]!r}", pos + 1)
        kind = match.lastgroup or ""
        if kind == "quote":
            value, end = _string(text, pos)
            out.append(_Token("string", text[pos:end], value, pos + 1))
            pos = end
            continue
        word = match.group()
        if kind == "number":
            out.append(_Token(kind, word, _number(word, pos + 1), pos + 1))
        elif kind != "space":
            out.append(_Token(kind, word, word, pos + 1))
        pos = match.end()
    out.append(_Token("end", "", None, len(text) + 1))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0
        self.depth = 0

    @property
    def peek(self) -> _Token:
        return self.tokens[self.pos]

    def take(self) -> _Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def at(self, *texts: str) -> bool:
        token = self.peek
        return token.kind in ("name", "op", "punct") and token.text in texts

    def expect(self, text: str, what: str) -> None:
        if not self.at(text):
            self.fail(f"expected {what}")
        self.take()

    def fail(self, wanted: str) -> NoReturn:
        token = self.peek
        found = "the end" if token.kind == "end" else repr(token.text[:40])
        raise FilterError(f"{wanted}, found {found}", token.column)

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            raise FilterError(f"nested deeper than {MAX_FILTER_DEPTH}", self.peek.column)

    def whole(self) -> Expr:
        expr = self.disjunction()
        if self.peek.kind != "end":
            self.fail("expected 'and', 'or' or the end")
        return expr

    def disjunction(self) -> Expr:
        items = [self.conjunction()]
        while self.at("or"):
            self.take()
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def conjunction(self) -> Expr:
        items = [self.negation()]
        while self.at("and"):
            self.take()
            items.append(self.negation())
        return items[0] if len(items) == 1 else And(tuple(items))

    def negation(self) -> Expr:
        if not self.at("not"):
            return self.primary()
        self.take()
        self.nest()
        inner = self.negation()
        self.depth -= 1
        return Not(inner)

    def primary(self) -> Expr:
        if not self.at("("):
            return self.comparison()
        self.take()
        self.nest()
        inner = self.disjunction()
        self.expect(")", "')'")
        self.depth -= 1
        return inner

    def comparison(self) -> Expr:
        left = self.operand()
        if self.peek.kind == "op" or self.at(*TEXT_OPS):
            op = self.take().text
            return Compare(op, left, self.operand("a literal or a path"))
        if self.at("in"):
            self.take()
            return Member(left, self.options())
        if self.at("not") and self.tokens[self.pos + 1].text == "in":
            self.pos += 2
            return Member(left, self.options(), negated=True)
        return IsTrue(left)

    def options(self) -> tuple[Literal, ...]:
        self.expect("[", "'[' (a list of literals)")
        items: list[Literal] = []
        while not self.at("]"):
            if items:
                self.expect(",", "',' or ']'")
            column = self.peek.column
            operand = self.operand("a literal")
            if not isinstance(operand, Literal):
                raise FilterError("a list holds literals only", column)
            items.append(operand)
        self.take()
        return tuple(items)

    def operand(self, wanted: str = "a literal, a path or '('") -> Operand:
        token = self.peek
        if token.kind in ("number", "string"):
            self.take()
            return Literal(token.value)
        if token.kind == "name" and token.text in ("true", "false", "null"):
            self.take()
            return Literal({"true": True, "false": False, "null": None}[token.text])
        if token.kind == "name" and token.text in ROOTS:
            return self.path()
        if token.kind == "name" and token.text not in KEYWORDS:
            raise FilterError(
                f"unknown name {token.text[:40]!r} (a path starts with {', '.join(ROOTS)})",
                token.column,
            )
        self.fail(f"expected {wanted}")

    def path(self) -> Path:
        root = self.take()
        steps: list[str | int] = []
        while self.at(".", "["):
            if len(steps) == MAX_PATH_STEPS:
                raise FilterError(f"a path of more than {MAX_PATH_STEPS} steps", self.peek.column)
            steps.append(self.step())
        return _checked_path(Path(root.text, tuple(steps)), root.column)

    def step(self) -> str | int:
        if self.take().text == ".":
            if self.peek.kind != "name":
                self.fail("expected a field name after '.'")
            return str(self.take().text)
        token = self.take()
        if token.kind == "string" or (
            token.kind == "number" and isinstance(token.value, int) and token.value >= 0
        ):
            self.expect("]", "']'")
            return token.value  # type: ignore[no-any-return]
        raise FilterError("expected a field name in quotes or an index (0 or more)", token.column)


def _checked_path(path: Path, column: int) -> Path:
    if path.root == "headers" and (len(path.steps) != 1 or not isinstance(path.steps[0], str)):
        raise FilterError('headers takes one name: headers["name"]', column)
    if path.root not in ("value", "headers") and path.steps:
        raise FilterError(f"{path.root} has no fields", column)
    return path


def parse_filter(text: str) -> Expr:
    """The expression ``text`` says; FilterError (with the column) when it says none."""
    return _Parser(text).whole()


def parse_path(text: str) -> Path:
    """A path alone (a trigger's ``key``, a payload field); FilterError otherwise."""
    parser = _Parser(text)
    if not (parser.peek.kind == "name" and parser.peek.text in ROOTS):
        parser.fail(f"expected a path ({', '.join(ROOTS)})")
    path = parser.path()
    if parser.peek.kind != "end":
        parser.fail("expected the end of the path")
    return path


# -- printing ---------------------------------------------------------------------------
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _quoted(text: str) -> str:
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _literal(value: Scalar) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, str):
        return _quoted(value)
    return repr(value)  # an int, or a float repr reads back exactly


def _operand(operand: Operand) -> str:
    if isinstance(operand, Literal):
        return _literal(operand.value)
    out = [operand.root]
    for step in operand.steps:
        if isinstance(step, int):
            out.append(f"[{step}]")
        elif operand.root != "headers" and _NAME.match(step):
            out.append(f".{step}")
        else:
            out.append(f"[{_quoted(step)}]")
    return "".join(out)


def unparse(expr: Expr) -> str:
    """``expr`` as canonical text: ``parse_filter(unparse(e)) == e``."""
    match expr:
        case Or(items=items):
            return " or ".join(
                f"({unparse(i)})" if isinstance(i, Or) else unparse(i) for i in items
            )
        case And(items=items):
            return " and ".join(
                f"({unparse(i)})" if isinstance(i, And | Or) else unparse(i) for i in items
            )
        case Not(expr=inner):
            text = unparse(inner)
            return f"not ({text})" if isinstance(inner, And | Or) else f"not {text}"
        case Compare(op=op, left=left, right=right):
            return f"{_operand(left)} {op} {_operand(right)}"
        case Member(item=item, options=options, negated=negated):
            listed = ", ".join(_literal(o.value) for o in options)
            return f"{_operand(item)} {'not in' if negated else 'in'} [{listed}]"
        case IsTrue(operand=operand):
            return _operand(operand)
    raise TypeError(f"not a filter expression: {expr!r}")
