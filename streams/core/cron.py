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
