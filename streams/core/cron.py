"""Cron expressions: the only module that imports croniter.

Syntax: 5 fields (minute hour day-of-month month day-of-week) or 6 fields with seconds
first (second minute hour day-of-month month day-of-week), as Quartz and Spring write
them. croniter's extensions are accepted where it supports them: ``L`` (last day of the
month), ``#`` (nth weekday of the month), names of months and days, ``@hourly`` style
aliases. Expressions are read in the job's IANA time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterBadDateError, CroniterError

_PROBE_START = datetime(2000, 1, 1, tzinfo=UTC)
ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


class CronError(ValueError):
    """An expression that cron cannot read; the message says which part and why."""


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A validated expression, normalised to croniter's order (seconds last)."""

    text: str
    fields: tuple[str, ...]
    has_seconds: bool

    @property
    def croniter_form(self) -> str:
        if not self.has_seconds:
            return " ".join(self.fields)
        sec, *rest = self.fields
        return " ".join([*rest, sec])


@lru_cache(maxsize=65536)
def parse_cron(text: str) -> CronExpr:
    """Validate ``text``; the result is cached because many jobs share an expression."""
    stripped = " ".join(text.split())
    if not stripped:
        raise CronError("empty cron expression")
    if stripped.lower() in ALIASES:
        return CronExpr(stripped, (stripped.lower(),), has_seconds=False)
    fields = tuple(stripped.split(" "))
    if len(fields) not in (5, 6):
        raise CronError(
            f"{text!r} has {len(fields)} fields; cron takes 5 "
            "(minute hour day month weekday) or 6 with seconds first"
        )
    expr = CronExpr(stripped, fields, has_seconds=len(fields) == 6)
    try:
        # Also proves the expression ever fires ('0 0 30 2 *' parses but never does).
        croniter(expr.croniter_form, _PROBE_START, max_years_between_matches=8).get_next()
    except CroniterBadDateError:
        raise CronError(f"{text!r} never fires (no such date)") from None
    except (CroniterError, ValueError, KeyError, IndexError) as exc:
        raise CronError(f"{text!r} is not a valid cron expression: {exc}") from None
    return expr


class CronTimes:
    """Fire instants of one (expression, time zone), with cronstream's DST policy.

    The expression is matched against *wall-clock* time in ``zone`` and each wall time
    is mapped to one instant:

    - a wall time that exists once fires at that instant;
    - a wall time repeated by a fall-back transition fires once, at its first
      occurrence (the earlier instant); the repeat is not a slot;
    - a wall time skipped by a spring-forward transition fires once, right after the
      gap (at the transition instant). Several skipped wall times collapse into that one
      instant, together with a slot that falls exactly on it.

    This is Debian cron's policy. ``next_after`` results are memoised, so every job with
    this expression and zone shares one computation per slot (the hot path of a tick).
    """

    __slots__ = ("_cache", "_form", "expr", "zone")
    CACHE_LIMIT = 8192

    def __init__(self, expr: CronExpr, zone: ZoneInfo) -> None:
        self.expr = expr
        self.zone = zone
        self._form = expr.croniter_form
        self._cache: dict[int, int | None] = {}

    def next_after(self, after_ms: int) -> int | None:
        """The first fire instant strictly after ``after_ms`` (epoch ms), None if never."""
        cached = self._cache.get(after_ms, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        result = self._compute(after_ms)
        if len(self._cache) >= self.CACHE_LIMIT:
            self._cache.clear()
        self._cache[after_ms] = result
        return result

    def _compute(self, after_ms: int) -> int | None:
        wall = datetime.fromtimestamp(after_ms / 1000, self.zone).replace(tzinfo=None, fold=0)
        # Whole seconds: a start with a fraction must still yield the slot at the next
        # whole second, and croniter treats the start as exclusive.
        wall = wall.replace(microsecond=0)
        try:
            it = croniter(self._form, wall, max_years_between_matches=8)
            for _ in range(_MAX_STEPS):
                candidate = _instant_ms(it.get_next(datetime), self.zone)
                if candidate > after_ms:
                    return candidate
        except CroniterBadDateError:
            return None
        raise CronError(f"{self.expr.text!r}: no fire time found after {after_ms}")


_MISSING = object()
# A repeated hour walked at one-second resolution is 3,600 candidates that map to
# instants already passed; allow for a longer DST shift than exists anywhere.
_MAX_STEPS = 4 * 3600


def _instant_ms(wall: datetime, zone: ZoneInfo) -> int:
    """The instant of a naive wall time in ``zone`` under the DST policy above."""
    first = wall.replace(tzinfo=zone, fold=0)
    utc = first.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == wall:
        return _ms(utc)  # exists; for a repeated wall time fold=0 is the first occurrence
    # In a gap: fold=0 used the offset before the transition (an instant after the gap),
    # fold=1 the offset after it (an instant before the gap). Find the transition.
    lo = _ms(wall.replace(tzinfo=zone, fold=1).astimezone(UTC))
    hi = _ms(utc)
    after_offset = _offset_ms(hi, zone)
    while hi - lo > 1000:
        mid = (lo + hi) // 2 // 1000 * 1000
        if mid <= lo:
            break
        if _offset_ms(mid, zone) == after_offset:
            hi = mid
        else:
            lo = mid
    return hi


def _offset_ms(ms: int, zone: ZoneInfo) -> int:
    offset = datetime.fromtimestamp(ms / 1000, zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds() * 1000)


def _ms(instant: datetime) -> int:
    delta = instant - _EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=4096)
def cron_times(text: str, zone: str) -> CronTimes:
    """The shared CronTimes of (expression, zone); raises CronError or ZoneError."""
    return CronTimes(parse_cron(text), load_zone(zone))


class ZoneError(ValueError):
    """Not an IANA time zone name this machine knows."""


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ZoneError(f"{name!r} is not an IANA time zone: {exc}") from None
