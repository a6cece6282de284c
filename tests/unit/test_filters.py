"""The event triggers' filter language (schemas.definition.filters, .matching): what each
expression says of a record, the parse errors and their columns, the limits; and, over
random expressions and records, that evaluation is total and printing reads back."""

from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.schemas.definition.filters import (
    ROOTS,
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
    parse_filter,
    parse_path,
    unparse,
)
from cronstream.schemas.definition.matching import MISSING, Record, matches, resolve
from cronstream.schemas.errors import FilterError
from cronstream.schemas.limits import MAX_FILTER, MAX_FILTER_DEPTH

EXAMPLES = int(os.environ.get("CRONSTREAM_HYPOTHESIS_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None)

ORDER = Record(
    topic="acme.orders",
    partition=3,
    offset=1042,
    timestamp_ms=1_764_000_000_000,
    key="cust-7",
    headers={"source": "web", "trace-id": "abc", "empty": None},
    value={
        "id": 9,
        "amount": 150.5,
        "currency": "EUR",
        "paid": True,
        "note": None,
        "customer": {"id": "c7", "vip": False, "tags": ["new", "eu"]},
        "items": [{"sku": "gift-card", "qty": 2}],
        "price": Decimal("19.90"),
        "weird key": "w",
    },
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('value.amount >= 100 and value.currency in ["EUR", "USD"]', True),
        ("value.amount > 150.5", False),
        ("value.id == 9.0", True),  # numbers compare as numbers
        ('value.id == "9"', False),  # never across kinds
        ("value.paid", True),  # a path alone: is it the boolean true
        ("value.customer.vip", False),
        ("value.id", False),  # 9 is not true
        ("value.paid == 1", False),  # true is not 1
        ("value.note == null", True),
        ("value.note != null", False),
        ("value.customer != null", True),  # a map is present and not null
        ("value.nothing == null", False),  # missing is not null
        ("value.nothing != 1", False),  # a missing side: every comparison is false
        ("not value.nothing == 1", True),  # ... but not negates it
        ("value.nothing not in [1, 2]", False),
        ('value.currency not in ["USD"]', True),
        ('value.id != "9"', True),  # present and unequal
        ('value.currency < "F"', True),  # strings by code point
        ('value.amount < "200"', False),  # ordering across kinds: false
        ('value.customer.tags contains "eu"', True),
        ('value.items[0].sku startswith "gift"', True),
        ('value.items[0].sku endswith "card"', True),
        ('value.items[1].sku == "x"', False),  # past the end
        ("value.amount.cents == 1", False),  # into a number
        ('value.customer.tags[0] == "new"', True),
        ('value["weird key"] == "w"', True),
        ("value.price > 19.8 and value.price < 20", True),  # Avro decimals are numbers
        ('headers["source"] == "web" and headers.source == "web"', True),
        ('headers["trace-id"] startswith "a"', True),
        ('headers["absent"] != "x"', False),
        ("headers.empty == null", True),  # a header without a value
        ('key == "cust-7" and key startswith "cust-"', True),
        ('topic == "acme.orders" and partition == 3 and offset >= 1000', True),
        ("timestamp > 1700000000000", True),
        ("(value.paid or value.nothing) and not value.customer.vip", True),
        ("value.paid and value.customer.vip or value.id == 9", True),  # and binds tighter
        ("not value.paid or value.id == 9", True),
        ("true", True),
        ("false or null", False),
    ],
)
def test_what_a_filter_says_of_a_record(text: str, expected: bool) -> None:
    assert matches(parse_filter(text), ORDER) is expected


def test_a_value_that_could_not_be_decoded_matches_no_value_comparison() -> None:
    undecoded = Record(topic="t", partition=0, offset=0, timestamp_ms=0, key=MISSING)
    assert not matches(parse_filter("value == null"), undecoded)
    assert not matches(parse_filter("value.a != 1"), undecoded)
    assert not matches(parse_filter('key != "x"'), undecoded)  # a key that is not UTF-8
    assert matches(parse_filter("offset == 0"), undecoded)


def test_a_record_without_a_key_has_a_null_key() -> None:
    keyless = Record(topic="t", partition=0, offset=0, timestamp_ms=0, key=None, value=1)
    assert matches(parse_filter("key == null and value == 1"), keyless)


@pytest.mark.parametrize(
    ("text", "column", "words"),
    [
        ("", 1, "expected a literal, a path or '('"),
        ("value.a ==", 11, "expected a literal or a path"),
        ("value.a == (1)", 12, "expected a literal or a path"),
        ('value.a == "abc', 12, "not closed"),
        (r'value.a == "\q"', 13, "unknown escape"),
        ("value.a $ 3", 9, "unexpected character '$'"),
        ("amount > 3", 1, "unknown name 'amount'"),
        ('__import__("os").system("true")', 1, "unknown name '__import__'"),
        ("value.a == 1 value.b", 14, "expected 'and', 'or' or the end"),
        ("(value.a == 1", 14, "expected ')'"),
        ("value.a in (1, 2)", 12, "expected '['"),
        ("value.a in [1, value.b]", 16, "a list holds literals only"),
        ("value.a in [1 2]", 15, "expected ',' or ']'"),
        ("headers == 1", 1, "headers takes one name"),
        ("key.id == 1", 1, "key has no fields"),
        ("value.a[-1] == 1", 9, "an index (0 or more)"),
        ("value.a[1.5] == 1", 9, "an index (0 or more)"),
        ("value. == 1", 8, "expected a field name after '.'"),
        ("value.a == 1e999", 12, "out of range"),
        ("value.a and and", 13, "expected a literal, a path or '('"),
        ("not", 4, "found the end"),
    ],
)
def test_a_filter_that_does_not_parse_names_the_column(text: str, column: int, words: str) -> None:
    with pytest.raises(FilterError, match=re.escape(words)) as caught:
        parse_filter(text)
    assert caught.value.column == column
    assert str(caught.value).endswith(f"at column {column}")


def test_the_limits_of_a_filter() -> None:
    deepest = "(" * MAX_FILTER_DEPTH + "value.a" + ")" * MAX_FILTER_DEPTH
    assert parse_filter(deepest) == IsTrue(Path("value", ("a",)))
    with pytest.raises(FilterError, match="nested deeper than 32"):
        parse_filter("(" + deepest + ")")
    with pytest.raises(FilterError, match="nested deeper than 32"):
        parse_filter("not " * (MAX_FILTER_DEPTH + 1) + "value.a")
    long = " or ".join(["value.a == 1"] * 200)[:MAX_FILTER]
    with pytest.raises(FilterError, match="longer than 2000 characters"):
        parse_filter(long + " or value.b")
    with pytest.raises(FilterError, match="more than 32 steps"):
        parse_filter("value" + ".a" * 33)
    wide = " and ".join(f"value.f{i} == {i}" for i in range(100))  # no recursion per item
    assert len(parse_filter(wide).items) == 100  # type: ignore[union-attr]


def test_paths_alone() -> None:
    assert parse_path("value.customer.id") == Path("value", ("customer", "id"))
    assert parse_path('headers["x-y"]') == Path("headers", ("x-y",))
    assert parse_path("key") == Path("key")
    for text in ("value.a == 1", "1", "amount", ""):
        with pytest.raises(FilterError):
            parse_path(text)


def test_resolve_finds_values_and_missing() -> None:
    assert resolve(parse_path("value.customer.tags[1]"), ORDER) == "eu"
    assert resolve(parse_path("value.customer.tags[2]"), ORDER) is MISSING
    assert resolve(parse_path('headers["nope"]'), ORDER) is MISSING
    assert resolve(parse_path("partition"), ORDER) == 3


def test_the_canonical_form() -> None:
    text = "not (value.a == 1 or value.b) and (x_ or y)".replace("x_", "value.x").replace(
        "y", "key"
    )
    assert unparse(parse_filter(text)) == "not (value.a == 1 or value.b) and (value.x or key)"
    assert (
        unparse(parse_filter("value.in == 'it''s'".replace("''", "\\'"))) == 'value.in == "it\'s"'
    )
    assert unparse(parse_filter('headers.x == "\\u0001\\n"')) == 'headers["x"] == "\\u0001\\u000a"'


# -- properties -------------------------------------------------------------------------
names = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    names,
)
literals = scalars.map(Literal)
steps = st.one_of(names, st.integers(0, 5), st.sampled_from(["a", "b", "in", "not"]))


@st.composite
def paths(draw: st.DrawFn) -> Path:
    root = draw(st.sampled_from(ROOTS))
    if root == "value":
        return Path(root, tuple(draw(st.lists(steps, max_size=4))))
    if root == "headers":
        return Path(root, (draw(names),))
    return Path(root)


operands: st.SearchStrategy[Operand] = st.one_of(literals, paths())
leaves = st.one_of(
    st.builds(
        Compare,
        st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "startswith", "endswith", "contains"]),
        operands,
        operands,
    ),
    st.builds(Member, operands, st.lists(literals, max_size=4).map(tuple), st.booleans()),
    st.builds(IsTrue, operands),
)


def _group(kind: type[And] | type[Or]) -> Any:
    return lambda children: st.lists(children, min_size=2, max_size=4).map(
        lambda items: kind(tuple(items))
    )


expressions: st.SearchStrategy[Expr] = st.recursive(
    leaves,
    lambda children: st.one_of(children.map(Not), _group(And)(children), _group(Or)(children)),
    max_leaves=12,
)
json_values = st.recursive(
    st.one_of(scalars, st.just(Decimal("NaN")), st.just(Decimal("sNaN")), st.binary(max_size=3)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "in", "not", ""]), children, max_size=3),
    ),
    max_leaves=10,
)
records = st.builds(
    Record,
    topic=names,
    partition=st.integers(0, 9),
    offset=st.integers(0, 10**9),
    timestamp_ms=st.integers(0, 2**41),
    key=st.one_of(st.none(), st.just(MISSING), names),
    headers=st.dictionaries(names, st.one_of(st.none(), names), max_size=3),
    value=st.one_of(st.just(MISSING), json_values),
)


@SETTINGS
@given(expressions)
def test_printing_reads_back_as_the_same_expression(expr: Expr) -> None:
    assert parse_filter(unparse(expr)) == expr


@SETTINGS
@given(expressions, records)
def test_evaluation_never_raises(expr: Expr, record: Record) -> None:
    assert matches(expr, record) in (True, False)


@SETTINGS
@given(paths(), literals, records)
def test_unequal_is_the_negation_of_equal_on_present_values(
    path: Path, literal: Literal, record: Record
) -> None:
    equal, unequal = Compare("==", path, literal), Compare("!=", path, literal)
    present = resolve(path, record) is not MISSING
    assert matches(unequal, record) is (present and not matches(equal, record))
    inside, outside = Member(path, (literal,)), Member(path, (literal,), negated=True)
    assert matches(outside, record) is (present and not matches(inside, record))


PIECES = [
    "value",
    "key",
    "headers",
    ".",
    "[",
    "]",
    "(",
    ")",
    ",",
    "==",
    "!=",
    "<",
    ">=",
    "and",
    "or",
    "not",
    "in",
    "contains",
    "true",
    "null",
    '"a"',
    "'b",
    "1",
    "-2.5e3",
    " ",
    "\\",
    '"\\u12"',
    "é",
    "0x1",
    "$",
    "\n",
]


@SETTINGS
@given(st.lists(st.sampled_from(PIECES), max_size=25).map("".join) | st.text(max_size=40))
def test_any_text_parses_or_is_refused_with_a_column(text: str) -> None:
    try:
        expr = parse_filter(text)
    except FilterError as exc:
        column = exc.column
    else:
        assert parse_filter(unparse(expr)) == expr
        return
    assert 1 <= column <= len(text) + 1
