"""Calendar walks, not examples: every fire of 2026-2028 from schemas.definition.cron equals the
reference's (tests/cron_reference.py), for day-of-month steps and lists that cross short
months (croniter 5.0.1 lost the March 1 slots of some of them), in four zones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache

import pytest

from cronstream.schemas.definition.cron import cron_times
from tests import cron_reference as ref

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FROM = (datetime(2026, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
UNTIL = (datetime(2029, 1, 1, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"]

# expression -> (a day of March the day set holds, the first time of day that fires)
EXPRESSIONS: dict[str, tuple[int, tuple[int, int]]] = {
    "0 0 */10 * *": (1, (0, 0)),  # 1, 11, 21, 31
    "0 0 */15 * *": (1, (0, 0)),  # 1, 16, 31
    "0 0 */5 * *": (1, (0, 0)),
    "0 0 */3 * *": (1, (0, 0)),
    "0 0 1,31 * *": (1, (0, 0)),
    "0 0 2,31 * *": (2, (0, 0)),
    "0 0 1,15,30 * *": (1, (0, 0)),
    "0 0 1,15,31 * *": (1, (0, 0)),
    "0 0 1,30 * *": (1, (0, 0)),
    "0 0 1-31/10 * *": (1, (0, 0)),
    # both day fields restricted: the 1st, 10th and 31st, or a Tuesday (2-3/2 is 2)
    "45-53 * 1,10,31 * 2-3/2": (1, (0, 45)),
}
CASES = [(expr, zone) for expr in EXPRESSIONS for zone in ZONES]


def _iso(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat()


@cache
def _real_fires(expr: str, zone: str) -> tuple[int, ...]:
    """Every fire in [FROM, UNTIL), walked with next_after."""
    times, out, t = cron_times(expr, zone), [], FROM - 1
    while (nxt := times.next_after(t)) is not None and nxt < UNTIL:
        out.append(nxt)
        t = nxt
    return tuple(out)


@cache
def _reference_fires(expr: str, zone: str) -> tuple[int, ...]:
    cron, tz = ref.parse(expr), ref.load_zone(zone)
    return tuple(ref.fires_between(cron, tz, FROM - 1, UNTIL - 1))


def _differences(real: tuple[int, ...], expected: tuple[int, ...]) -> str:
    missing = sorted(set(expected) - set(real))[:5]
    extra = sorted(set(real) - set(expected))[:5]
    return (
        f"{len(real)} fires, the reference {len(expected)}; missing "
        f"{[_iso(t) for t in missing]}, extra {[_iso(t) for t in extra]}"
    )


@pytest.mark.parametrize(("expr", "zone"), CASES)
def test_every_fire_of_three_years_matches_the_reference(expr: str, zone: str) -> None:
    real, expected = _real_fires(expr, zone), _reference_fires(expr, zone)
    assert real == expected, _differences(real, expected)


@pytest.mark.parametrize(("expr", "zone"), CASES)
def test_march_fires_after_a_short_february(expr: str, zone: str) -> None:
    day, (hour, minute) = EXPRESSIONS[expr]
    for year in (2026, 2027, 2028):
        wall = datetime(year, 3, day, hour, minute)
        instant = ref.wall_instant_ms(wall, ref.load_zone(zone))
        assert instant in _reference_fires(expr, zone), f"reference: {wall} {zone}"
        assert instant in _real_fires(expr, zone), f"no fire at {wall} {zone} ({_iso(instant)})"
