"""The reference cron (tests/cron_reference.py) on its own, against hand-checked examples.

Calendars: January 2026 starts on a Thursday, March 2026 on a Sunday, February 2036 on a
Friday (a leap year). Transitions are the zones' published ones (tzdata 2026f).
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from tests import cron_reference as ref

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(text: str) -> int:
    return (datetime.fromisoformat(text.replace("Z", "+00:00")) - EPOCH) // timedelta(
        milliseconds=1
    )


def _iso(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _walk(expr: str, zone: str, after: str, n: int) -> list[str]:
    cron, tz = ref.parse(expr), ref.load_zone(zone)
    t, out = _ms(after), []
    for _ in range(n):
        nxt = ref.next_after(cron, tz, t)
        assert nxt is not None
        out.append(_iso(nxt))
        t = nxt
    return out


def _fire_days(expr: str, first: str, last: str) -> list[date]:
    """The UTC dates of the fires in [first, last)."""
    cron = ref.parse(expr)
    fires = ref.fires_between(cron, ref.load_zone("UTC"), _ms(first) - 1, _ms(last) - 1)
    return [(EPOCH + timedelta(milliseconds=t)).date() for t in fires]


CASES = Path(__file__).with_name("cron_cases.txt")


def _cases(section: str) -> list[tuple[str, str, str, list[str]]]:
    """The cases of one ``[section]`` of cron_cases.txt: (expr, zone, after, fires)."""
    found: dict[str, list[tuple[str, str, str, list[str]]]] = {}
    current: list[tuple[str, str, str, list[str]]] = []
    for line in CASES.read_text().splitlines():
        if line.startswith("["):
            current = found.setdefault(line.strip("[]"), [])
        elif line.strip() and not line.startswith("#"):
            expr, zone, after, fires = (part.strip() for part in line.split("|"))
            current.append((expr, zone, after, fires.split()))
    return found[section]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), _cases("calendar"))
def test_reference_days_follow_the_vixie_day_rules(
    expr: str, zone: str, after: str, expected: list[str]
) -> None:
    assert _walk(expr, zone, after, len(expected)) == expected


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), _cases("dst"))
def test_reference_wall_times_follow_the_dst_rule(
    expr: str, zone: str, after: str, expected: list[str]
) -> None:
    assert _walk(expr, zone, after, len(expected)) == expected


def test_a_skipped_day_collapses_into_the_transition_instant() -> None:
    # Apia went from -10 to +14 at 2011-12-30T10:00Z: wall 2011-12-30 00:00-23:59 never
    # existed. By the gap rule its noon fires once, at the transition (local 2011-12-31
    # 00:00); no fire has the local date 2011-12-30; then 2011-12-31 12:00 local (+14).
    fires = _walk("0 12 * * *", "Pacific/Apia", "2011-12-29T12:00:00Z", 4)
    assert fires == [
        "2011-12-29T22:00:00Z",
        "2011-12-30T10:00:00Z",
        "2011-12-30T22:00:00Z",
        "2011-12-31T22:00:00Z",
    ]
    apia = ref.load_zone("Pacific/Apia")
    local = [datetime.fromisoformat(f.replace("Z", "+00:00")).astimezone(apia) for f in fires]
    assert [t.date().isoformat() for t in local] == [
        "2011-12-29",
        "2011-12-31",
        "2011-12-31",
        "2012-01-01",
    ]
    assert _walk("0 12 30 12 *", "Pacific/Apia", "2011-01-01T00:00:00Z", 2) == [
        "2011-12-30T10:00:00Z",
        "2012-12-29T22:00:00Z",
    ]


WALL_CASES = [
    ("UTC", "2026-03-01T00:00:00", "2026-03-01T00:00:00Z"),
    ("America/New_York", "2026-03-08T01:59:59", "2026-03-08T06:59:59Z"),
    ("America/New_York", "2026-03-08T02:00:00", "2026-03-08T07:00:00Z"),  # gap
    ("America/New_York", "2026-03-08T02:30:00", "2026-03-08T07:00:00Z"),  # gap
    ("America/New_York", "2026-03-08T03:00:00", "2026-03-08T07:00:00Z"),
    ("America/New_York", "2026-11-01T00:59:59", "2026-11-01T04:59:59Z"),
    ("America/New_York", "2026-11-01T01:30:00", "2026-11-01T05:30:00Z"),  # first of two
    ("America/New_York", "2026-11-01T02:00:00", "2026-11-01T07:00:00Z"),
    ("Australia/Lord_Howe", "2026-10-04T01:59:59", "2026-10-03T15:29:59Z"),
    ("Australia/Lord_Howe", "2026-10-04T02:29:59", "2026-10-03T15:30:00Z"),  # gap
    ("Australia/Lord_Howe", "2026-10-04T02:30:00", "2026-10-03T15:30:00Z"),
    ("Australia/Lord_Howe", "2026-04-05T01:45:00", "2026-04-04T14:45:00Z"),  # first of two
    ("Australia/Lord_Howe", "2026-04-05T02:00:00", "2026-04-04T15:30:00Z"),
    ("Pacific/Chatham", "2026-04-05T03:00:00", "2026-04-04T13:15:00Z"),  # +13:45, first
    ("Pacific/Chatham", "2026-09-27T02:45:00", "2026-09-26T14:00:00Z"),  # gap
    ("Pacific/Apia", "2011-12-29T23:59:59", "2011-12-30T09:59:59Z"),
    ("Pacific/Apia", "2011-12-30T12:00:00", "2011-12-30T10:00:00Z"),  # a whole day's gap
    ("Pacific/Apia", "2011-12-31T00:00:00", "2011-12-30T10:00:00Z"),
    ("Asia/Kolkata", "2026-06-01T05:30:00", "2026-06-01T00:00:00Z"),
]


@pytest.mark.parametrize(("zone", "wall", "expected"), WALL_CASES)
def test_reference_wall_instant_exists_first_or_transition(
    zone: str, wall: str, expected: str
) -> None:
    instant = ref.wall_instant_ms(datetime.fromisoformat(wall), ref.load_zone(zone))
    assert _iso(instant) == expected


FIELD_CASES = [
    ("0 0 * * 1/2", "dow", {0, 1, 3, 5}),  # 1, 3, 5, 7
    ("0 0 * * */2", "dow", {0, 2, 4, 6}),
    ("0 0 * * */7", "dow", {0}),
    ("0 0 * * sat-7", "dow", {6, 0}),
    ("0 0 * * Mon,wed-FRI", "dow", {1, 3, 4, 5}),
    ("0 0 * * 0,7", "dow", {0}),
    ("0 0 * jan-MAR/2 *", "months", {1, 3}),
    ("0 0 * NOV/1 *", "months", {11, 12}),
    ("0 10/20 * * *", "hours", {10}),
    ("5/20 * * * *", "minutes", {5, 25, 45}),
    ("*/25 * * * *", "minutes", {0, 25, 50}),
    ("0 0 0 * * *", "seconds", {0}),
    ("10-20/5,58 * * * * *", "seconds", {10, 15, 20, 58}),
    ("0 0 1-31/10 * *", "dom", {1, 11, 21, 31}),
]


@pytest.mark.parametrize(("expr", "field", "expected"), FIELD_CASES)
def test_reference_field_sets_are_unions_of_items(
    expr: str, field: str, expected: set[int]
) -> None:
    cron = ref.parse(expr)
    sets = {
        "seconds": cron.seconds,
        "minutes": cron.minutes,
        "hours": cron.hours,
        "dom": cron.dom.days,
        "months": cron.months,
        "dow": cron.dow.days,
    }
    assert sets[field] == expected


@pytest.mark.parametrize("spelling", ["5L", "L5", "FRIL", "LFRI", "fril", "lFri"])
def test_reference_last_weekday_has_two_spellings(spelling: str) -> None:
    assert ref.parse(f"0 0 * * {spelling}").dow == ref.parse("0 0 * * 5L").dow


@pytest.mark.parametrize(("alias", "expansion"), sorted(ref.ALIASES.items()))
def test_reference_aliases_expand_whole_and_case_blind(alias: str, expansion: str) -> None:
    a, b = ref.parse(f"  {alias.upper()} "), ref.parse(expansion)
    assert (a.times, a.dom, a.months, a.dow) == (b.times, b.dom, b.months, b.dow)


REFUSED = [
    "",
    "   ",
    "* * * *",
    "* * * * * * *",
    "@reboot",
    "@daily *",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 0 *",
    "* * * 13 *",
    "* * * * 8",
    "60 * * * * *",
    "1-60 * * * *",
    "5-1 * * * *",
    "* * * DEC-JAN *",
    "* * * * SAT-SUN",
    "*/0 * * * *",
    "1-5/0 * * * *",
    "*/ * * * *",
    "*/-1 * * * *",
    "? * * * *",
    "* ? * * *",
    "* * * ? *",
    "0 ? * * * *",
    "0 0 ?/2 * *",
    "0 0 15W * *",
    "0 0 LW * *",
    "0 0 W * *",
    "0 0 * * L",
    "0 0 * * l",
    "0 0 L-3 * *",
    "0 0 * * 5#0",
    "0 0 * * 5#6",
    "0 0 * * 8L",
    "0 0 * * 1#2/2",
    "0 0 * JAN-MON *",
    "0 0 * MON *",
    "0 0 * * JAN",
    "JAN * * * *",
    "0 0 1, * *",
    "0 0 ,1 * *",
    "0 0 1,,2 * *",
    "0 0 * * 5#",
    "0 0 * * #2",
    "0 0 5L * *",
    "0 0 1#2 * *",
    "0 0 * * MONDAY",
    "0 L * * *",
    "1-2-3 * * * *",
    "+5 * * * *",
    "٥ * * * *",
    "0 0 * * ５",  # numbers are ASCII digits
]


@pytest.mark.parametrize("expr", REFUSED)
def test_reference_refuses_what_the_spec_refuses(expr: str) -> None:
    with pytest.raises(ref.RefCronError):
        ref.parse(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 30 2 *",
        "0 0 31 4 *",
        "0 0 31 2,4,6,9,11 *",
        "0 0 30 2 */2",  # day-of-week starred: both must match
        "0 0 30,31 2 ?",
    ],
)
def test_reference_refuses_expressions_that_never_fire(expr: str) -> None:
    with pytest.raises(ref.RefCronError, match="never fires"):
        ref.parse(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 31 2 MON",  # both restricted: Mondays of February
        "0 0 29 2 *",
        "0 0 * 2 5#5",  # leap years starting on a Friday
        "0 0 L 2 *",
    ],
)
def test_reference_accepts_rare_but_real_days(expr: str) -> None:
    assert ref.parse(expr).text == expr


def test_the_28_year_probe_holds_every_kind_of_month() -> None:
    # ever_fires looks at 2001-2028 only: every (month, length, weekday of the 1st) of a
    # whole 400-year Gregorian cycle occurs there.
    def kinds(first: int, last: int) -> set[tuple[int, int, int]]:
        return {
            (month, calendar.monthrange(year, month)[1], calendar.monthrange(year, month)[0])
            for year in range(first, last + 1)
            for month in range(1, 13)
        }

    assert kinds(2001, 2028) == kinds(2001, 2400)


def test_reference_fires_only_on_odd_mondays_for_a_starred_day_step() -> None:
    days = _fire_days("0 0 */2 * MON", "2026-01-01T00:00:00Z", "2029-01-01T00:00:00Z")
    assert days
    assert all(d.weekday() == 0 and d.day % 2 == 1 for d in days)
    expected = [
        date(y, m, d)
        for y in (2026, 2027, 2028)
        for m in range(1, 13)
        for d in range(1, calendar.monthrange(y, m)[1] + 1)
        if date(y, m, d).weekday() == 0 and d % 2 == 1
    ]
    assert days == expected


@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        ("*/7 * * * *", "America/New_York"),
        ("45-53 * 1,10,31 * 2-3/2", "Australia/Lord_Howe"),
        ("30 */5 1-3 * * *", "Europe/Paris"),
        ("0,30 * * * *", "Pacific/Chatham"),
        ("0 12 * * *", "Pacific/Apia"),
    ],
)
def test_reference_walk_and_bulk_listing_agree(expr: str, zone: str) -> None:
    # next_after (bounded search) and fires_between (everything) are two ways to one set.
    windows = {
        "Pacific/Apia": ("2011-12-28T00:00:00Z", "2012-01-02T00:00:00Z"),
        "Pacific/Chatham": ("2026-04-03T00:00:00Z", "2026-04-07T00:00:00Z"),
        "Europe/Paris": ("2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z"),
        "Australia/Lord_Howe": ("2026-03-30T00:00:00Z", "2026-04-12T00:00:00Z"),
        "America/New_York": ("2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z"),
    }
    first, last = (_ms(t) for t in windows[zone])
    cron, tz = ref.parse(expr), ref.load_zone(zone)
    walked, t = [], first
    while (nxt := ref.next_after(cron, tz, t)) is not None and nxt <= last:
        walked.append(nxt)
        t = nxt
    assert walked
    assert walked == ref.fires_between(cron, tz, first, last)


def test_reference_zones_come_from_the_tzdata_package() -> None:
    import tzdata

    zone = ref.load_zone("Pacific/Apia")
    assert zone.key == "Pacific/Apia"
    assert tzdata.IANA_VERSION == "2026f"
    for bad in ("Mars/Olympus_Mons", "../zoneinfo", "", "Europe//Paris"):
        with pytest.raises(ValueError, match="zone"):
            ref.load_zone(bad)


def test_reference_takes_naive_whole_second_wall_times_only() -> None:
    with pytest.raises(ValueError, match="naive"):
        ref.wall_instant_ms(datetime(2026, 1, 1, tzinfo=UTC), ref.load_zone("UTC"))
    with pytest.raises(ValueError, match="whole seconds"):
        ref.wall_instant_ms(datetime(2026, 1, 1, 0, 0, 0, 5), ref.load_zone("UTC"))
