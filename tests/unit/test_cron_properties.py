"""Property tests: schemas.definition.cron against the independent reference (tests/cron_reference.py).

Random expressions of every item kind, zones with unusual transitions (30-minute shifts,
a skipped day, two-hour jumps, Morocco's Ramadan changes) and start instants aimed at the
transitions and month ends. CRONSTREAM_HYPOTHESIS_EXAMPLES sets the examples per test.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import cache, partial

import pytest
from hypothesis import Phase, assume, given, settings
from hypothesis import strategies as st

from cronstream.schemas.definition.cron import cron_times, parse_cron
from cronstream.schemas.definition.zones import load_zone, wall_instant_ms
from cronstream.schemas.errors import CronError
from tests import cron_reference as ref

EXAMPLES = int(os.environ.get("CRONSTREAM_HYPOTHESIS_EXAMPLES", "150"))
# No example database (nothing written to the work tree); no explain phase (it re-runs the
# slow reference many times after a failure has been shrunk).
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
)

ZONES = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Africa/Casablanca",
    "Antarctica/Troll",
    "Pacific/Apia",
    "Asia/Kolkata",
    "America/Havana",
]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST_S = int((datetime(2011, 1, 1, tzinfo=UTC) - EPOCH).total_seconds())
LAST_S = int((datetime(2030, 12, 31, tzinfo=UTC) - EPOCH).total_seconds())
FIRES = 5

# field -> (low, high, names, in order of their values from low)
BOUNDS: dict[str, tuple[int, int, tuple[str, ...]]] = {
    "second": (0, 59, ()),
    "minute": (0, 59, ()),
    "hour": (0, 23, ()),
    "dom": (1, 31, ()),
    "month": (1, 12, ref.MONTH_NAMES),
    "dow": (0, 7, ref.DAY_NAMES),
}
FIELDS_5 = ("minute", "hour", "dom", "month", "dow")


def _iso(ms: int | None) -> str | None:
    return None if ms is None else (EPOCH + timedelta(milliseconds=ms)).isoformat()


# ---------------------------------------------------------------------------- strategies


@st.composite
def _cased(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if flip else c for c, flip in zip(text, flips, strict=True))


@st.composite
def _value(draw: st.DrawFn, field: str, low: int | None = None) -> tuple[int, str]:
    """A value of the field (at least ``low``), as a number or, where it has one, a name."""
    first, high, names = BOUNDS[field]
    value = draw(st.integers(first if low is None else low, high))
    index = value - first
    if field == "dow" and value == 0 and draw(st.booleans()):
        return 7, "7"  # Sunday's other number
    if index < len(names) and draw(st.booleans()):
        return value, draw(_cased(names[index]))
    return value, str(value)


PLAIN_KINDS = ("*", "N", "A-B", "*/S", "A-B/S", "A/S")
RESTRICTED_KINDS = ("N", "A-B", "A-B/S", "A/S")


@st.composite
def _plain_item(draw: st.DrawFn, field: str, kinds: tuple[str, ...] = PLAIN_KINDS) -> str:
    low, high, _ = BOUNDS[field]
    step = draw(st.one_of(st.integers(1, 7), st.integers(1, high - low + 3)))
    a, a_text = draw(_value(field))
    _, b_text = draw(_value(field, low=a))
    forms = {
        "*": "*",
        "N": a_text,
        "A-B": f"{a_text}-{b_text}",
        "*/S": f"*/{step}",
        "A-B/S": f"{a_text}-{b_text}/{step}",
        "A/S": f"{a_text}/{step}",
    }
    return forms[draw(st.sampled_from(kinds))]


@st.composite
def _weekday_item(draw: st.DrawFn) -> str:
    _, day = draw(_value("dow"))
    kind = draw(st.sampled_from(["NL", "LN", "N#K"]))
    if kind == "N#K":
        return f"{day}#{draw(st.integers(1, 5))}"
    ell = draw(st.sampled_from("Ll"))
    return f"{day}{ell}" if kind == "NL" else f"{ell}{day}"


def _restricted_item(field: str) -> st.SearchStrategy[str]:
    """An item that does not begin with * or ?."""
    plain = _plain_item(field, RESTRICTED_KINDS)
    if field == "dom":
        return st.one_of(plain, st.sampled_from(["L", "l"]))
    if field == "dow":
        return st.one_of(plain, _weekday_item())
    return plain


def _starred_item(field: str) -> st.SearchStrategy[str]:
    """An item that begins with * or ? (which stars a day field it begins)."""
    plain = _plain_item(field, ("*", "*/S"))
    return st.one_of(plain, st.just("?")) if field in ("dom", "dow") else plain


def _field(field: str) -> st.SearchStrategy[str]:
    """Starred or restricted about half the time each; later items of any kind."""
    first = st.one_of(_starred_item(field), _restricted_item(field))
    rest = st.lists(st.one_of(_restricted_item(field), _starred_item(field)), max_size=2)
    return st.tuples(first, rest).map(lambda items: ",".join([items[0], *items[1]]))


@st.composite
def _joined(draw: st.DrawFn, fields: list[str]) -> str:
    """The fields separated by any whitespace, sometimes with some around them."""
    gaps = draw(
        st.lists(
            st.sampled_from([" ", "  ", "\t", " \t "]),
            min_size=len(fields) - 1,
            max_size=len(fields) - 1,
        )
    )
    head, tail = draw(st.sampled_from(["", " ", "\t"])), draw(st.sampled_from(["", " ", "\n"]))
    return head + fields[0] + "".join(g + f for g, f in zip(gaps, fields[1:], strict=True)) + tail


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """A valid expression (it may still never fire): an alias, or 5 or 6 random fields."""
    if draw(st.integers(0, 11)) == 0:
        return draw(st.sampled_from(sorted(ref.ALIASES)).flatmap(_cased))
    names = (("second",) if draw(st.booleans()) else ()) + FIELDS_5
    return draw(_joined([draw(_field(name)) for name in names]))


@st.composite
def _odd_item(draw: st.DrawFn, field: str) -> str:
    """A suspicious item, mostly refused: out of range, backwards, a zero step, ``?``, ``W``,
    ``L``, ``#``, a name of another field. Whether it is valid is for the reference to say."""
    low, high, _ = BOUNDS[field]
    a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
    out = draw(st.one_of(st.integers(high + 1, high + 30), st.just(low - 1)))
    name = draw(st.sampled_from(ref.MONTH_NAMES + ref.DAY_NAMES + ("MONDAY", "JANUARY")))
    forms = [
        str(out),
        f"{a}-{out}",
        f"{b}-{a}",
        f"{b + 1 if b < high else b}-{a}",
        "*/0",
        f"{a}-{b}/0",
        f"{a}/0",
        "?",
        f"?{a}",
        f"{a}W",
        "W",
        "LW",
        "L",
        f"{a}L",
        f"L{a}",
        f"{a}#{draw(st.integers(0, 6))}",
        f"#{a}",
        f"{a}#",
        name,
        f"{name}-{a}",
        f"{a},",
        f"-{a}",
        f"{a}-{b}-{high}",
        f"{a}/{b}/{high}",
        "L-2",
    ]
    return draw(st.sampled_from(forms).flatmap(_cased))


@st.composite
def invalid_expressions(draw: st.DrawFn) -> str:
    """A random expression with one suspicious item (alone or in a list), a bad alias,
    or a wrong number of fields."""
    kind = draw(st.integers(0, 7))
    if kind == 0:
        return draw(st.sampled_from(["@reboot", "@every", "@", "@daily * * * *", "@weekly 1"]))
    if kind == 1:
        count = draw(st.sampled_from([1, 2, 3, 4, 7, 8]))
        return " ".join(draw(st.lists(_field("minute"), min_size=count, max_size=count)))
    names = (("second",) if draw(st.booleans()) else ()) + FIELDS_5
    fields = [draw(_field(name)) for name in names]
    index = draw(st.integers(0, len(names) - 1))
    bad = draw(_odd_item(names[index]))
    fields[index] = draw(st.sampled_from([bad, f"{fields[index]},{bad}", f"{bad},{fields[index]}"]))
    return " ".join(fields)


@st.composite
def rare_days(draw: st.DrawFn) -> str:
    """Days that exist in some months only (29-31, fifth weekdays): rare, or never."""
    dom = draw(st.sampled_from(["29", "30", "31", "30,31", "29-31", "31,L", "L", "*", "?"]))
    month = draw(st.sampled_from(["2", "4", "6", "9", "11", "2,4", "FEB", "apr-jun/2", "*"]))
    dow = draw(st.sampled_from(["*", "?", "*/2", "MON", "5#5", "L6", "1-5", "?,2#5"]))
    return draw(_joined(["0", "0", dom, month, dow]))


@st.composite
def starts(draw: st.DrawFn, zone: str) -> int:
    """An instant (epoch ms) in 2011-2030: anywhere, just before one of the zone's
    transitions, or near a month's end."""
    kind = draw(st.sampled_from(["anywhere", "transition", "month-end"]))
    changes = _changes(zone)
    if kind == "transition" and changes:
        at = draw(st.sampled_from(changes)) * 1000
        return at - draw(
            st.one_of(
                st.integers(0, 2_000),
                st.integers(0, 3 * 3_600_000),
                st.integers(-3_600_000, 2 * 86_400_000),
            )
        )
    if kind == "month-end":
        year, month = draw(st.integers(2011, 2030)), draw(st.integers(1, 12))
        first = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        at = (first - EPOCH) // timedelta(milliseconds=1)
        return at - draw(st.integers(-14 * 3_600_000, 2 * 86_400_000))
    return draw(st.integers(FIRST_S * 1000, LAST_S * 1000))


@cache
def _changes(zone: str) -> list[int]:
    """The zone's transitions in 2011-2030 (UTC epoch seconds), by the reference."""
    return ref.zone_changes(ref.load_zone(zone), FIRST_S, LAST_S)


@st.composite
def walls(draw: st.DrawFn, zone: str) -> datetime:
    """A naive whole-second wall time in 2011-2030, often within hours of a transition."""
    changes, near = _changes(zone), draw(st.booleans())
    if changes and near:
        at = draw(st.sampled_from(changes))
        local = at + ref.offset_at(ref.load_zone(zone), at - 1)
        wall = local + draw(st.one_of(st.integers(-2, 2), st.integers(-3 * 3600, 3 * 3600)))
    else:
        wall = draw(st.integers(FIRST_S, LAST_S))
    return datetime(1970, 1, 1) + timedelta(seconds=wall)


# ---------------------------------------------------------------------------- helpers


def _reference_refusal(expr: str) -> str | None:
    try:
        ref.parse(expr)
    except ref.RefCronError as exc:
        return str(exc)
    return None


def _real_refusal(expr: str) -> str | None:
    try:
        parse_cron(expr)
    except CronError as exc:
        return str(exc)
    return None


def _five_fires(next_after: Callable[[int], int | None], start: int) -> list[str | None]:
    """The next FIRES fires from ``start``, each asked after the previous one."""
    out: list[str | None] = []
    t: int | None = start
    while t is not None and len(out) < FIRES:
        t = next_after(t)
        out.append(_iso(t))
    return out


# ---------------------------------------------------------------------------- properties


@SETTINGS
@given(expr=st.one_of(expressions(), rare_days()), zone=st.sampled_from(ZONES), data=st.data())
def test_next_five_fires_match_the_reference(expr: str, zone: str, data: st.DataObject) -> None:
    assume(_reference_refusal(expr) is None)
    start = data.draw(starts(zone), label="start")
    expected = _five_fires(partial(ref.next_after, ref.parse(expr), ref.load_zone(zone)), start)
    real = _five_fires(cron_times(expr, zone).next_after, start)
    assert real == expected, f"{expr!r} in {zone} after {_iso(start)}"


@SETTINGS
@given(
    expr=st.one_of(expressions(), rare_days()),
    zone=st.sampled_from(ZONES),
    jumps=st.lists(
        st.one_of(st.integers(0, 1_500), st.integers(0, 3 * 86_400_000)), min_size=12, max_size=12
    ),
    data=st.data(),
)
def test_next_after_matches_the_reference_after_random_jumps(
    expr: str, zone: str, jumps: list[int], data: st.DataObject
) -> None:
    # One question at a time, each asked just after the previous answer plus a jump (up to
    # three days): reaches far more of the calendar than consecutive fires.
    assume(_reference_refusal(expr) is None)
    t = data.draw(starts(zone), label="start")
    times, cron, tz = cron_times(expr, zone), ref.parse(expr), ref.load_zone(zone)
    for jump in jumps:
        expected = ref.next_after(cron, tz, t)
        assert _iso(times.next_after(t)) == _iso(expected), f"{expr!r} in {zone} after {_iso(t)}"
        if expected is None:
            break
        t = expected + jump


@SETTINGS
@given(expr=st.one_of(expressions(), invalid_expressions(), invalid_expressions(), rare_days()))
def test_parse_refuses_exactly_what_the_reference_refuses(expr: str) -> None:
    reference, real = _reference_refusal(expr), _real_refusal(expr)
    assert (real is None) == (reference is None), (
        f"{expr!r}: reference {'accepts' if reference is None else 'refuses: ' + reference}, "
        f"parse_cron {'accepts' if real is None else 'refuses: ' + real}"
    )


@SETTINGS
@given(zone=st.sampled_from(ZONES), data=st.data())
def test_wall_instant_is_the_first_occurrence_or_the_transition(
    zone: str, data: st.DataObject
) -> None:
    wall = data.draw(walls(zone), label="wall")
    expected = ref.wall_instant_ms(wall, ref.load_zone(zone))
    assert _iso(wall_instant_ms(wall, load_zone(zone))) == _iso(expected)


@pytest.mark.parametrize("expr", ["² * * * *", "0 0 ① * *", "0 0 * * 5#²", "*/³ * * * *"])
def test_unreadable_numbers_are_refused_with_a_cron_error(expr: str) -> None:
    # str.isdigit() holds for these, int() fails: parse_cron must still raise CronError.
    assert _reference_refusal(expr) is not None
    with pytest.raises(CronError):
        parse_cron(expr)


@pytest.mark.parametrize("zone", ZONES)
def test_zones_are_the_tzdata_package(zone: str) -> None:
    # The real zones must change offset exactly where the tzdata package's files say.
    real, reference = load_zone(zone), ref.load_zone(zone)
    for at in _changes(zone):
        for instant in (at - 1, at):
            moment = datetime.fromtimestamp(instant, UTC)
            assert moment.astimezone(real).utcoffset() == moment.astimezone(reference).utcoffset()
