"""A slow, obviously-correct reference of cronstream's cron dialect and DST policy.

Written from the spec alone and importing nothing of cronstream's, so that the real parser
and matcher (``schemas.definition.cron``) can be checked against it. Clarity over speed: the
calendar is walked one day at a time, the matching times of a day are enumerated in order,
and each wall time is mapped to its instant from the zone's UTC offsets, sampled hourly and
bisected to the second (no use of ``fold``).

The dialect: 5 fields ``minute hour day-of-month month day-of-week``, or 6 with ``second``
first, separated by any whitespace; the ``@yearly`` style aliases. A field is a union of
comma-separated items: ``*``, ``?`` (day fields only), ``N``, ``A-B``, ``*/S``, ``A-B/S``,
``A/S`` (A through the field's maximum), names of months and days anywhere a value goes
(not in a step). Day-of-month also takes ``L`` (the last day); day-of-week takes ``NL`` /
``LN`` (the last weekday N of the month) and ``N#K`` (the K-th weekday N). ``W`` is
refused, so are ``?/S`` and every other form not listed. Days follow Vixie cron: if either
day field is starred (its text begins with ``*`` or ``?``) a day must match both, otherwise
either. An expression that never fires is refused.

The DST rule, for a wall time in the job's zone: a wall time that exists once is that
instant; one repeated by a fall-back is its first occurrence; one skipped by a
spring-forward is the transition instant (the first instant after the gap).
"""

from __future__ import annotations

import calendar
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache, lru_cache
from importlib import resources
from itertools import pairwise
from typing import NamedTuple
from zoneinfo import ZoneInfo


class RefCronError(ValueError):
    """An expression the spec refuses."""


ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
NUMBER = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    names: dict[str, int]
    question: bool  # whether '?' (same as '*') is allowed


SECOND = Field("second", 0, 59, {}, question=False)
MINUTE = Field("minute", 0, 59, {}, question=False)
HOUR = Field("hour", 0, 23, {}, question=False)
DOM = Field("day-of-month", 1, 31, {}, question=True)
MONTH = Field("month", 1, 12, {n: i for i, n in enumerate(MONTH_NAMES, 1)}, question=False)
DOW = Field("day-of-week", 0, 7, {n: i for i, n in enumerate(DAY_NAMES)}, question=True)


# ---------------------------------------------------------------------------- parsing


def _value(token: str, field: Field) -> int:
    """A number or a (case-insensitive) name, within the field's bounds."""
    if NUMBER.fullmatch(token):
        value = int(token)
    elif token.upper() in field.names:
        value = field.names[token.upper()]
    else:
        raise RefCronError(f"{field.name}: {token!r} is not a value")
    if not field.low <= value <= field.high:
        raise RefCronError(f"{field.name}: {value} is outside {field.low}-{field.high}")
    return value


def _count(token: str, field: Field, low: int, high: int) -> int:
    """A step or an ordinal: digits only, within ``low..high``."""
    if not NUMBER.fullmatch(token) or not low <= int(token) <= high:
        raise RefCronError(f"{field.name}: {token!r} is not in {low}..{high}")
    return int(token)


def _plain(item: str, field: Field) -> set[int]:
    """The values of one ordinary item: ``*``, ``?``, ``N``, ``A-B``, ``*/S``, ``A-B/S``,
    ``A/S``."""
    if item == "*" or (item == "?" and field.question):
        return set(range(field.low, field.high + 1))
    base, slash, step_text = item.partition("/")
    step = _count(step_text, field, 1, 10**9) if slash else 1
    if base == "*":
        low, high = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _value(first, field), _value(last, field)
        if low > high:
            raise RefCronError(f"{field.name}: range {item!r} runs backwards")
    else:
        low = _value(base, field)
        high = field.high if slash else low
    return set(range(low, high + 1, step))


def _items(text: str, field: Field) -> list[str]:
    items = text.split(",")
    if "" in items:
        raise RefCronError(f"{field.name}: empty item in {text!r}")
    return items


def _starred(text: str) -> bool:
    return text.startswith(("*", "?"))


def _simple_field(text: str, field: Field) -> frozenset[int]:
    return frozenset(v for item in _items(text, field) for v in _plain(item, field))


@dataclass(frozen=True)
class DaysOfMonth:
    days: frozenset[int]
    last: bool  # L
    starred: bool


@dataclass(frozen=True)
class DaysOfWeek:
    days: frozenset[int]  # 0-6, Sunday 0 (7 folded onto 0)
    last: frozenset[int]  # NL / LN: the last weekday N of the month
    nth: frozenset[tuple[int, int]]  # N#K: (weekday, K)
    starred: bool


def _days_of_month(text: str) -> DaysOfMonth:
    days: set[int] = set()
    last = False
    for item in _items(text, DOM):
        if "W" in item.upper():
            raise RefCronError("day-of-month: W is not supported")
        if item.upper() == "L":
            last = True
        else:
            days |= _plain(item, DOM)
    return DaysOfMonth(frozenset(days), last, _starred(text))


def _days_of_week(text: str) -> DaysOfWeek:
    days: set[int] = set()
    last: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for item in _items(text, DOW):
        upper = item.upper()
        if upper == "L":
            raise RefCronError("day-of-week: a bare L is refused")
        if "#" in upper:
            weekday, _, k = upper.partition("#")
            nth.add((_value(weekday, DOW) % 7, _count(k, DOW, 1, 5)))
        elif upper.startswith("L"):
            last.add(_value(upper[1:], DOW) % 7)
        elif upper.endswith("L"):
            last.add(_value(upper[:-1], DOW) % 7)
        else:
            days |= {v % 7 for v in _plain(item, DOW)}
    return DaysOfWeek(frozenset(days), frozenset(last), frozenset(nth), _starred(text))


@dataclass(frozen=True)
class Cron:
    text: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    dom: DaysOfMonth
    months: frozenset[int]
    dow: DaysOfWeek
    times: tuple[int, ...]  # the matching seconds of a day (0..86399), ascending

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        length = calendar.monthrange(day.year, day.month)[1]
        weekday = day.isoweekday() % 7  # Sunday 0
        in_dom = day.day in self.dom.days or (self.dom.last and day.day == length)
        in_dow = (
            weekday in self.dow.days
            or (weekday in self.dow.last and day.day + 7 > length)
            or (weekday, (day.day - 1) // 7 + 1) in self.dow.nth
        )
        if self.dom.starred or self.dow.starred:
            return in_dom and in_dow
        return in_dom or in_dow


def _fields(text: str) -> list[str]:
    """Six fields, seconds first: aliases expanded, a 5-field expression at second 0."""
    fields = text.split()
    if len(fields) == 1 and fields[0].startswith("@"):
        if fields[0].lower() not in ALIASES:
            raise RefCronError(f"unknown alias {fields[0]!r}")
        fields = ALIASES[fields[0].lower()].split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise RefCronError(f"{text!r} has {len(text.split())} fields, not 5 or 6")
    return fields


@lru_cache(maxsize=4096)
def parse(text: str) -> Cron:
    """The expression ``text``, or RefCronError if the spec refuses it."""
    second, minute, hour, dom, month, dow = _fields(text)
    seconds = _simple_field(second, SECOND)
    minutes = _simple_field(minute, MINUTE)
    hours = _simple_field(hour, HOUR)
    times = tuple(
        h * 3600 + m * 60 + s
        for h in sorted(hours)
        for m in sorted(minutes)
        for s in sorted(seconds)
    )  # ascending: nested loops over ascending values
    cron = Cron(
        text,
        seconds,
        minutes,
        hours,
        _days_of_month(dom),
        _simple_field(month, MONTH),
        _days_of_week(dow),
        times,
    )
    if not ever_fires(cron):
        raise RefCronError(f"{text!r} never fires")
    return cron


def calendar_days(start: date, months: frozenset[int]) -> Iterator[date]:
    """Every day from ``start`` through 9999-12-31 that lies in one of ``months``."""
    year, month, first = start.year, start.month, start.day
    while year <= 9999:
        if month in months:
            for day in range(first, calendar.monthrange(year, month)[1] + 1):
                yield date(year, month, day)
        first = 1
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)


def ever_fires(cron: Cron) -> bool:
    """Whether any day matches. Whether a day matches depends only on its month, its day,
    its weekday and its month's length; 2001-2028 is one whole 28-year cycle without a
    skipped leap year, so it holds every month of the Gregorian calendar in each of its
    lengths starting on each weekday (tests/unit/test_cron_reference.py checks that)."""
    for day in calendar_days(date(2001, 1, 1), cron.months):
        if day.year > 2028:
            return False
        if cron.matches_day(day):
            return True
    return False


# ---------------------------------------------------------------------------- zones

DAY = 86_400
HOUR_S = 3_600
MAX_OFFSET = 16 * HOUR_S  # no zone is 16 hours off UTC in the years the tests use
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
FIRST_INSTANT = (date(1, 1, 2).toordinal() - EPOCH_ORDINAL) * DAY
LAST_INSTANT = (date(9999, 12, 30).toordinal() - EPOCH_ORDINAL) * DAY


@cache
def load_zone(name: str) -> ZoneInfo:
    """The zone from the tzdata package's own files, never the host's /usr/share/zoneinfo."""
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{name!r} is not a zone name")
    path = resources.files("tzdata.zoneinfo").joinpath(*parts)
    if not path.is_file():
        raise ValueError(f"{name!r} is not a zone of the tzdata package")
    with path.open("rb") as file:
        return ZoneInfo.from_file(file, key=name)


def offset_at(zone: ZoneInfo, instant: int) -> int:
    """The zone's UTC offset (seconds east) at ``instant`` (UTC epoch seconds); at the
    edges of datetime's range (years 1 and 9999), the offset a day inside them."""
    instant = min(max(instant, FIRST_INSTANT), LAST_INSTANT)
    offset = datetime.fromtimestamp(instant, UTC).astimezone(zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds())


@lru_cache(maxsize=200_000)
def _changes_on_utc_day(zone: ZoneInfo, day: int) -> tuple[tuple[int, int], ...]:
    """(instant, new offset) of each change of the zone's offset in the UTC day ``day``
    (days since 1970-01-01), in (start, end]. Sampled hourly and bisected to the second:
    assumes no two changes within an hour, true of every zone in these years."""
    changes = []
    samples = [day * DAY + hour * HOUR_S for hour in range(25)]
    offsets = [offset_at(zone, t) for t in samples]
    for (lo, before), (hi, after) in pairwise(zip(samples, offsets, strict=True)):
        if before != after:
            change = _first_changed(zone, lo, hi, before)
            changes.append((change, offset_at(zone, change)))
    return tuple(changes)


def _first_changed(zone: ZoneInfo, lo: int, hi: int, before: int) -> int:
    """The first second in (lo, hi] whose offset is not ``before`` (offset(lo) is)."""
    while hi - lo > 1:  # offset(lo) == before != offset(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if offset_at(zone, mid) == before else (lo, mid)
    return hi


class Segment(NamedTuple):
    start: int  # UTC epoch seconds, inclusive
    end: int  # exclusive
    offset: int  # seconds east of UTC, constant over [start, end)


@lru_cache(maxsize=100_000)
def segments(zone: ZoneInfo, day: int) -> tuple[Segment, ...]:
    """The zone's constant-offset stretches over the UTC days ``day - 2`` .. ``day + 2``:
    every wall time of the calendar day ``day`` (and the transition ending a gap it falls
    in) lies in them."""
    start = (day - 2) * DAY
    offset = offset_at(zone, start)
    out = []
    for d in range(day - 2, day + 3):
        for instant, new in _changes_on_utc_day(zone, d):
            out.append(Segment(start, instant, offset))
            start, offset = instant, new
    out.append(Segment(start, (day + 3) * DAY, offset))
    assert all(abs(s.offset) < MAX_OFFSET for s in out)
    return tuple(out)


def instant_of(zone: ZoneInfo, wall: int) -> int:
    """The instant (UTC epoch seconds) of the wall time ``wall`` (seconds since the wall
    time 1970-01-01T00:00) under the DST rule."""
    stretches = segments(zone, wall // DAY)
    occurrences = [wall - s.offset for s in stretches if s.start <= wall - s.offset < s.end]
    if occurrences:
        return min(occurrences)  # exists once, or repeated by a fall-back: the first
    for before, after in pairwise(stretches):
        if before.end + before.offset <= wall < after.start + after.offset:
            return after.start  # skipped by this spring-forward: the transition instant
    raise AssertionError(f"wall time {wall} neither exists nor falls in a gap")


def wall_instant_ms(wall: datetime, zone: ZoneInfo) -> int:
    """The instant (epoch ms) of a naive wall time, whole seconds, under the DST rule."""
    if wall.tzinfo is not None or wall.microsecond:
        raise ValueError("a wall time is naive and whole seconds")
    day = wall.toordinal() - EPOCH_ORDINAL
    return instant_of(zone, day * DAY + wall.hour * HOUR_S + wall.minute * 60 + wall.second) * 1000


# ---------------------------------------------------------------------------- fire times


def _midnight(day: date) -> int:
    return (day.toordinal() - EPOCH_ORDINAL) * DAY


def _first_day(instant: int) -> date:
    """A day early enough to hold every wall time whose instant is after ``instant``."""
    return date.fromordinal(instant // DAY - 2 + EPOCH_ORDINAL)


def _best_on_day(
    cron: Cron, zone: ZoneInfo, midnight: int, after: int, best: int | None
) -> int | None:
    """The earliest of ``best`` and the fires after ``after`` of the day at ``midnight``."""
    offsets = [s.offset for s in segments(zone, midnight // DAY)]
    lowest, highest = min(offsets), max(offsets)
    # A wall time w of this day maps into [w - highest, w - lowest].
    index = bisect_right(cron.times, after + lowest - midnight)
    while index < len(cron.times):
        wall = midnight + cron.times[index]
        if best is not None and wall - highest >= best:
            break
        instant = instant_of(zone, wall)
        if instant > after and (best is None or instant < best):
            best = instant
        index += 1
    return best


def next_after(cron: Cron, zone: ZoneInfo, after_ms: int) -> int | None:
    """The first fire instant (epoch ms) strictly after ``after_ms``, None if none."""
    after = after_ms // 1000  # fires are whole seconds: t * 1000 > after_ms iff t > after
    best: int | None = None
    for day in calendar_days(_first_day(after), cron.months):
        midnight = _midnight(day)
        if best is not None and midnight - MAX_OFFSET >= best:
            break  # every later wall time maps to midnight - MAX_OFFSET or after
        if cron.matches_day(day):
            best = _best_on_day(cron, zone, midnight, after, best)
    return None if best is None else best * 1000


def fires_between(cron: Cron, zone: ZoneInfo, after_ms: int, until_ms: int) -> list[int]:
    """Every fire instant (epoch ms) in ``(after_ms, until_ms]``, ascending: the matching
    days are walked once and all their times mapped (wall times collapsed into one instant
    by a gap fire once)."""
    after, until = after_ms // 1000, until_ms // 1000
    instants: set[int] = set()
    for day in calendar_days(_first_day(after), cron.months):
        midnight = _midnight(day)
        if midnight - MAX_OFFSET > until:
            break
        if cron.matches_day(day):
            instants.update(instant_of(zone, midnight + t) for t in cron.times)
    return sorted(t * 1000 for t in instants if after < t <= until)


def zone_changes(zone: ZoneInfo, after: int, until: int) -> list[int]:
    """The instants (UTC epoch seconds) in ``(after, until]`` where the zone's offset
    changes; days are screened by their end points (so a change undone within one UTC day
    is missed: none exists). Only used to aim test inputs at transitions."""
    out: list[int] = []
    for day in range(after // DAY, until // DAY + 1):
        if offset_at(zone, day * DAY) != offset_at(zone, (day + 1) * DAY):
            out.extend(t for t, _ in _changes_on_utc_day(zone, day) if after < t <= until)
    return out
