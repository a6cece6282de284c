"""Cron expressions in cronstream's dialect, and their fire instants in a time zone.

**Dialect.** Vixie / POSIX cron, plus a seconds field and the common extensions:

- 5 fields ``minute hour day-of-month month day-of-week``, or 6 with ``second`` first
  (as Quartz and Spring write them). Aliases: ``@yearly`` (``@annually``),
  ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.
- A field is a comma-separated list whose items are *united*: ``*``, ``N``, ``A-B``,
  ``*/S``, ``A-B/S``, ``A/S`` (A to the field's end); month and day names (``JAN``,
  ``MON``) wherever a number goes; ``?`` is ``*`` in the two day fields. Day of week
  0-7, 0 and 7 both Sunday.
- Day of month: ``L``, the last day of the month (``31,L`` is the 31st and every last
  day). ``W`` is not supported (refused).
- Day of week: ``5L`` or ``L5`` (also ``FRIL``), the last Friday of the month; ``5#2``,
  the second Friday. They mix with other items: ``1,5L``.
- **Day fields (Vixie):** a field whose text begins with ``*`` or ``?`` is
  *unrestricted* (``*/2`` too). When either day field is unrestricted a day must match
  both; when both are restricted, a day matching either fires: ``0 0 1,15 * MON`` is the
  1st, the 15th and every Monday; ``0 0 */2 * MON`` the Mondays that are odd days.
- An expression that never fires (``0 0 30 2 *``) is refused.

Day matching, month ends included, is decided here, by walking the calendar month by
month (croniter 5.0.1, which faust-streaming's mode pins below 6, loses some March-1
slots; nothing here uses it).

**Wall time.** An expression is matched against wall-clock time in the job's IANA zone
(from the pinned zone database), and a matching wall time becomes an instant by the
one wall-time rule of ``schemas.definition.zones``: a repeated wall time is its first
occurrence (the repeat is not a slot), a skipped one the transition instant.

**Cost.** Reading an expression is mostly lookups: each field's text is read once
(``_FIELDS``), the two day fields together once (``DayRule``), and a rule's firing days
once per month (``_MONTH_DAYS``), so a million distinct expressions cost about what
their few hundred distinct fields do. Slot results are memoised per (expression, zone).
"""

from __future__ import annotations

import calendar
import itertools
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TypeVar
from zoneinfo import ZoneInfo

from cronstream.schemas.definition.memo import Memo
from cronstream.schemas.definition.zones import (
    load_zone,
    plus_second,
    second_after,
    wall_instant_ms,
)
from cronstream.schemas.errors import CronError
from cronstream.schemas.limits import cron_problems

T = TypeVar("T")
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
MONTH_NAMES = {m: i for i, m in enumerate(MONTHS, 1)}
DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
MAX_YEAR = 9999
_DIGITS = re.compile(r"[0-9]{1,9}")  # ASCII digits only (str.isdigit takes others)
# A Gregorian calendar repeats every 400 years: an expression with no day in one cycle
# never fires.
_CYCLE_MONTHS = 400 * 12


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None
    question: bool = False  # '?' stands for '*' (the day fields)


SECOND = _Field("second", 0, 59)
MINUTE = _Field("minute", 0, 59)
HOUR = _Field("hour", 0, 23)
DAY = _Field("day of month", 1, 31, question=True)
MONTH = _Field("month", 1, 12, MONTH_NAMES)
WEEKDAY = _Field("day of week", 0, 7, DAY_NAMES, question=True)


@dataclass(frozen=True, slots=True)
class DayRule:
    """Which days of a month fire: the two day fields read together. Expressions that
    write their day fields alike share one rule, and with it the firing days of each
    month (``_MONTH_DAYS``), however their times of day differ."""

    days: frozenset[int]
    last_day: bool  # ``L`` in the day of month
    weekdays: frozenset[int]  # 0 = Sunday
    last_weekdays: frozenset[int]  # ``5L``: the last such weekday of the month
    nth_weekdays: frozenset[tuple[int, int]]  # ``5#2``: (weekday, n)
    either: bool  # both day fields restricted: a day matching either one fires
    by_date: tuple[int, ...] | None  # the day field alone decides (weekday is '*')
    key: int = field(default=0, compare=False)  # unique per rule: the month cache's key

    def month_days(self, year: int, month: int) -> tuple[int, ...]:
        """The days of ``month`` that fire (the month itself not checked)."""
        first, length = calendar.monthrange(year, month)
        dom = {d for d in self.days if d <= length}
        if self.last_day:
            dom.add(length)
        if self.by_date is not None:
            return tuple(sorted(dom))
        day1 = (first + 1) % 7  # the weekday of the 1st; calendar counts from Monday
        dow: set[int] = set()
        for weekday in self.weekdays:
            dow.update(range(1 + (weekday - day1) % 7, length + 1, 7))
        for weekday in self.last_weekdays:
            start = 1 + (weekday - day1) % 7
            dow.add(start + (length - start) // 7 * 7)
        for weekday, n in self.nth_weekdays:
            day = 1 + (weekday - day1) % 7 + 7 * (n - 1)
            if day <= length:
                dow.add(day)
        return tuple(sorted(dom | dow if self.either else dom & dow))


@dataclass(slots=True)
class CronExpr:
    """A parsed expression: the values of each time field, the months and the day rule
    (not frozen: a million of them are built at a restart, and a frozen dataclass
    builds slowly; nothing changes one after parsing)."""

    text: str  # as written, whitespace folded
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    day: DayRule
    first_time: tuple[int, int, int]  # a day's first firing (hour, minute, second)


def parse_cron(text: str) -> CronExpr:
    """Read ``text`` (cached: many jobs share an expression). Raises CronError.

    A text over ``MAX_CRON`` characters is refused before it is read or remembered: the
    caches below hold only texts within the limit, whoever calls (client, API,
    admission, scheduler). Each field's text is read once and remembered (``_FIELDS``):
    a million distinct expressions are a few hundred distinct fields, so reading one is
    mostly lookups."""
    too_long = cron_problems(text)
    if too_long:
        raise CronError(too_long[0])
    return _read(text)


# At most 65,536 expressions of at most MAX_CRON characters: ~780 bytes an entry with
# its key, its folded text, its CronExpr and the field memos' share, ~51 MB at worst
# (tracemalloc, 65,536 distinct 256-character expressions).
@lru_cache(maxsize=65536)
def _read(text: str) -> CronExpr:
    fields = text.split()
    if not fields:
        raise CronError("empty cron expression")
    folded = " ".join(fields)
    if folded.startswith("@"):
        alias = ALIASES.get(folded.lower())
        if alias is None:
            raise CronError(f"{text!r}: unknown alias (use one of {', '.join(ALIASES)})")
        fields = alias.split(" ")
    if len(fields) not in (5, 6):
        raise CronError(
            f"{text!r} has {len(fields)} fields; cron takes 5 "
            "(minute hour day month weekday) or 6 with seconds first"
        )
    if len(fields) == 5:
        fields.insert(0, "0")
    try:
        expr = _build(folded, fields)
    except CronError as exc:
        raise CronError(f"{text!r} is not a valid cron expression: {exc}") from None
    if not _fires_ever(expr.day, expr.months):
        raise CronError(f"{text!r} never fires (no such date)")
    return expr


def _build(folded: str, fields: list[str]) -> CronExpr:
    sec, minute, hour, dom, month, dow = fields
    seconds = _field(sec, SECOND)
    minutes = _field(minute, MINUTE)
    hours = _field(hour, HOUR)
    return CronExpr(
        text=folded,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        months=_months(month),
        day=_day_rule(dom, dow),
        first_time=_shared((hours[0], minutes[0], seconds[0])),
    )


# (field text, field name) -> its sorted values; (day of month, day of week) -> DayRule.
_FIELD_CACHE_LIMIT = 65536
_FIELDS: Memo[tuple[str, str], tuple[int, ...]] = Memo(_FIELD_CACHE_LIMIT)
_DAY_RULES: Memo[tuple[str, str], DayRule] = Memo(_FIELD_CACHE_LIMIT)
_MONTH_SETS: Memo[str, frozenset[int]] = Memo(_FIELD_CACHE_LIMIT)
_RULE_KEYS = itertools.count(1)


def _field(text: str, spec: _Field) -> tuple[int, ...]:
    """The sorted values of one time or month field (remembered; raises CronError)."""
    key = (text, spec.name)
    values = _FIELDS.get(key)
    if values is None:
        values = _FIELDS.keep(key, _shared(tuple(sorted(_values(text, spec)))))
    return values


def _months(text: str) -> frozenset[int]:
    found = _MONTH_SETS.get(text)
    if found is None:
        found = _MONTH_SETS.keep(text, _shared(frozenset(_field(text, MONTH))))
    return found


def _day_rule(dom: str, dow: str) -> DayRule:
    """The day rule of two day fields (one object for equal texts; raises CronError)."""
    found = _DAY_RULES.get((dom, dow))
    if found is not None:
        return found
    days, last_day = _days_of_month(dom)
    weekdays, last_weekdays, nth = _days_of_week(dow)
    dom_star, dow_star = dom[0] in "*?", dow[0] in "*?"
    every_weekday = len(weekdays) == 7 and dow_star  # the weekday field is all of '*'
    rule = DayRule(
        days=frozenset(days),
        last_day=last_day,
        weekdays=frozenset(weekdays),
        last_weekdays=frozenset(last_weekdays),
        nth_weekdays=frozenset(nth),
        either=not (dom_star or dow_star),
        by_date=tuple(sorted(days)) if every_weekday else None,
        key=next(_RULE_KEYS),
    )
    return _DAY_RULES.keep((dom, dow), rule)


_SHARED: dict[object, object] = {}


def _shared(value: T) -> T:
    """One object for equal field values: a million expressions hold a few thousand
    distinct sets between them (bounded: past 100,000 a value is kept as it is)."""
    found = _SHARED.get(value)
    if found is not None:
        return found  # type: ignore[return-value]
    if len(_SHARED) < 100_000:
        _SHARED[value] = value
    return value


def _values(text: str, field: _Field) -> set[int]:
    out: set[int] = set()
    for item in text.split(","):
        out |= _item(item, field)
    return out


def _item(item: str, field: _Field) -> set[int]:
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not _DIGITS.fullmatch(step_text) or int(step_text) < 1:
            raise CronError(f"{field.name} step {step_text!r} must be a whole number >= 1")
        step = int(step_text)
    if base == "*" or (base == "?" and field.question and not slash):
        low, high = field.low, field.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _number(first, field), _number(last, field)
        if low > high:
            raise CronError(f"{field.name} range {base!r} runs backwards")
    else:
        low = _number(base, field)
        high = field.high if slash else low
    return set(range(low, high + 1, step))


def _number(token: str, field: _Field) -> int:
    upper = token.upper()
    if field.names is not None and upper in field.names:
        return field.names[upper]
    if not _DIGITS.fullmatch(token):
        raise CronError(
            f"{field.name} {token!r} is not a number" + (" or a name" if field.names else "")
        )
    value = int(token)
    if not field.low <= value <= field.high:
        raise CronError(f"{field.name} {value} is outside {field.low}-{field.high}")
    return value


def _days_of_month(text: str) -> tuple[set[int], bool]:
    days: set[int] = set()
    last = False
    for item in text.split(","):
        upper = item.upper()
        if "W" in upper:
            raise CronError(f"day of month {item!r}: W (nearest weekday) is not supported")
        if upper == "L":
            last = True
        else:
            days |= _item(item, DAY)
    return days, last


def _days_of_week(text: str) -> tuple[set[int], set[int], set[tuple[int, int]]]:
    plain: set[int] = set()
    last: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for item in text.split(","):
        upper = item.upper()
        if "#" in upper:
            day, _, n = upper.partition("#")
            if not _DIGITS.fullmatch(n) or not 1 <= int(n) <= 5:
                raise CronError(f"day of week {item!r}: the n of DAY#n is 1-5")
            nth.add((_number(day, WEEKDAY) % 7, int(n)))
        elif upper == "L":
            raise CronError(
                "day of week 'L' alone is ambiguous: write 5L (or L5) for the "
                "last Friday of the month"
            )
        elif upper.endswith("L") or upper.startswith("L"):
            day = upper[:-1] if upper.endswith("L") else upper[1:]
            last.add(_number(day, WEEKDAY) % 7)
        else:
            plain |= {v % 7 for v in _item(item, WEEKDAY)}
    return plain, last, nth


def _fires_ever(day: DayRule, months: frozenset[int]) -> bool:
    """Whether any day of a whole 400-year cycle fires (remembered per rule and months)."""
    key = (day.key, months)
    found = _FIRES.get(key)
    if found is None:
        found = _FIRES.keep(key, _fires_in_cycle(day, months))
    return found


_FIRES: Memo[tuple[int, frozenset[int]], bool] = Memo(_FIELD_CACHE_LIMIT)


def _fires_in_cycle(day: DayRule, months: frozenset[int]) -> bool:
    """Most expressions are settled at once: days 1-28 exist in every month, every
    weekday four times; the others walk the months of a whole 400-year cycle."""
    dates = day.last_day or any(d <= 28 for d in day.days)
    weekdays = bool(day.weekdays or day.last_weekdays or any(n <= 4 for _, n in day.nth_weekdays))
    if day.either and (dates or weekdays):
        return True
    if (day.by_date is not None and dates) or (len(day.days) == 31 and weekdays):
        return True
    year, month = 2000, 1
    for _ in range(_CYCLE_MONTHS):
        if month in months and day.month_days(year, month):
            return True
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return False


class CronTimes:
    """Fire instants of one (expression, time zone), by the wall-time rule above.

    ``next_after`` remembers its last answer: the jobs sharing this expression and zone
    ask for the slot after the same instant one after the other (at a tick, and when a
    partition is loaded), so they share one computation. One entry, not a table: with
    a million distinct expressions each object serves one job, and a table each would
    cost a few hundred bytes apiece for nothing."""

    __slots__ = ("_last_after", "_last_slot", "expr", "zone")

    def __init__(self, expr: CronExpr, zone: ZoneInfo) -> None:
        self.expr = expr
        self.zone = zone
        self._last_after: int | None = None
        self._last_slot: int | None = None

    def next_after(self, after_ms: int) -> int | None:
        """The first fire instant strictly after ``after_ms`` (epoch ms), None if never."""
        if after_ms == self._last_after:
            return self._last_slot
        slot = self._compute(after_ms)
        self._last_after, self._last_slot = after_ms, slot
        return slot

    def _compute(self, after_ms: int) -> int | None:
        # Whole seconds: the wall time of the instant, its fraction dropped (a slot at
        # the next whole second is still after it).
        start = second_after(after_ms // 1000, self.zone)
        for _ in range(_MAX_STEPS):
            found = None if start is None else self._next_wall_from(start)
            if found is None:
                return None
            candidate = wall_instant_ms(found, self.zone)
            if candidate > after_ms:
                return candidate
            start = plus_second(found)
        raise CronError(f"{self.expr.text!r}: no fire time found after {after_ms}")

    def _next_wall_from(self, start: datetime) -> datetime | None:
        """The first matching wall time at or after the naive, whole-second ``start``."""
        year, month, day = start.year, start.month, start.day
        clock: tuple[int, int, int] | None = (start.hour, start.minute, start.second)
        months = self.expr.months
        for _ in range(_CYCLE_MONTHS):
            if month in months:
                days = self._month_days(year, month)
                for i in range(bisect_left(days, day), len(days)):
                    if days[i] == day and clock is not None:
                        time = self._time_from(*clock)
                    else:
                        time = self.expr.first_time
                    if time is not None:
                        return datetime(year, month, days[i], *time)
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
            if year > MAX_YEAR:
                return None
            day, clock = 1, None
        return None

    def _month_days(self, year: int, month: int) -> tuple[int, ...]:
        rule = self.expr.day
        key = (rule.key, year * 12 + month)
        days = _MONTH_DAYS.get(key)
        if days is None:
            days = _MONTH_DAYS.keep(key, _shared(rule.month_days(year, month)))
        return days

    def _time_from(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        """The first firing time of day at or after hour:minute:second, None if none."""
        hours, minutes, seconds = self.expr.hours, self.expr.minutes, self.expr.seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour, minute, seconds[k]
                j += 1
            if j < len(minutes):
                return hour, minutes[j], seconds[0]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0], seconds[0]
        return None


# (day rule, month) -> its firing days: shared by every expression, zone and job of the rule.
_MONTH_DAYS: Memo[tuple[int, int], tuple[int, ...]] = Memo(65536)
# A repeated hour walked at one-second resolution is 3,600 candidates that map to
# instants already passed; allow for a longer DST shift than exists anywhere.
_MAX_STEPS = 4 * 3600


# Keyed by what parse_cron and load_zone accepted (it calls them first, and a call that
# raises is not remembered): ~220 bytes an entry beyond parse_cron's, ~14 MB at worst.
@lru_cache(maxsize=65536)
def cron_times(text: str, zone: str) -> CronTimes:
    """The shared CronTimes of (expression, zone); raises CronError or ZoneError."""
    return CronTimes(parse_cron(text), load_zone(zone))
