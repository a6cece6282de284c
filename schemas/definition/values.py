"""The text forms of a definition's values: durations, instants and backoff ranges,
as a spec, the CLI's flags and the API write them."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from cronstream.schemas.definition.zones import load_zone, wall_instant_ms
from cronstream.schemas.limits import MAX_DURATION_TEXT, MAX_INTERVAL_MS

MAX_DURATION_MS = MAX_INTERVAL_MS
# Read part by part with ``match`` at the end of the last part, never ``finditer``: a
# search restarted at every digit of a long run of digits without a unit, and read the
# run again from each (a 64 KiB "every" took 330 s of the API's time; now microseconds).
_DURATION_PART = re.compile(r"(\d++(?:\.\d++)?+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration(text: str | int | float) -> int:
    """'90s', '1h30m', '500ms', '2d' (or a bare number of seconds) -> milliseconds."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        if not 0 <= text * 1000 <= MAX_DURATION_MS:  # also NaN
            raise ValueError(f"{text!r} is negative or longer than 100 years")
        return int(text * 1000)
    if not isinstance(text, str):
        raise ValueError(f"{str(text)[:80]!r} is not a duration")
    if len(text) > MAX_DURATION_TEXT:  # before anything reads it
        raise ValueError(f"a duration of {len(text)} characters, over {MAX_DURATION_TEXT}")
    raw = text.strip().lower().replace(" ", "")
    if raw.isdigit() and len(raw) < 20:
        return parse_duration(int(raw))
    pos, total = 0, 0.0
    while (match := _DURATION_PART.match(raw, pos)) is not None:
        total += float(match[1]) * _UNIT_MS[match[2]]
        pos = match.end()
    if pos != len(raw) or not raw:
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 30s, 5m, 1h30m, 2d)")
    if total > MAX_DURATION_MS:
        raise ValueError(f"{text!r} is longer than any limit (100 years)")
    return int(total)


def parse_instant(text: str | datetime, zone: str = "UTC") -> datetime:
    """ISO 8601; a time without an offset is a wall time in ``zone``, read by the one
    wall-time rule (``schemas.definition.zones.wall_instant_ms``): in a spring-forward gap it
    is the transition instant, in a repeated hour its first occurrence."""
    if isinstance(text, datetime):
        value = text
    elif not isinstance(text, str):
        raise ValueError(f"{str(text)[:80]!r} is not an ISO 8601 instant")
    else:
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{text!r} is not an ISO 8601 instant (e.g. 2026-12-01T09:30:00+01:00)"
            ) from None
    try:
        if value.tzinfo is None:
            ms = wall_instant_ms(value.replace(microsecond=0), load_zone(zone))
            value = datetime.fromtimestamp(ms / 1000, UTC).replace(
                microsecond=value.microsecond // 1000 * 1000
            )
        value = value.astimezone(UTC)
    except (OverflowError, OSError):
        raise ValueError(f"{text!s} is out of the range of instants cronstream keeps") from None
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def parse_backoff(text: str) -> tuple[int, int]:
    """'1s..5m' -> (1000, 300000)."""
    low, sep, high = str(text).partition("..")
    if not sep:
        raise ValueError(f"{text!r} is not a backoff range (use MIN..MAX, e.g. 1s..5m)")
    return parse_duration(low), parse_duration(high)
