"""Time zones and wall time: the pinned zone database and the one wall-time rule.

**Zones** come from the pinned ``tzdata`` package only (``TZDATA_VERSION``), never the
host's files: every process computes the same slots, hence the same run ids.

**Wall time** becomes an instant by one rule, the same for every wall time cronstream
reads (cron slots, and ``--at``, ``--anchor``, ``--start``, ``--end`` without an
offset): a wall time that exists once is that instant; one repeated by a fall-back is
its first occurrence; one skipped by a spring-forward is the transition instant, the
first instant after the gap.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import lru_cache
from importlib import resources
from zoneinfo import ZoneInfo

import tzdata

from cronstream.schemas.definition.memo import Memo
from cronstream.schemas.errors import ZoneError

TZDATA_VERSION: str = tzdata.IANA_VERSION
_MISSING = object()


def wall_instant_ms(wall: datetime, zone: ZoneInfo) -> int:
    """The instant (epoch ms) of the naive wall time ``wall`` in ``zone``: the wall
    time's only instant; the first of two (fall-back); the transition instant, first
    after the gap, for a wall time the zone skips (spring-forward)."""
    # PEP 495: fold=0 reads a wall time with the offset in force before a transition,
    # fold=1 with the one after. Equal: the wall time exists once. Fold 0 larger: a
    # fall-back repeats it, and fold 0 is the first occurrence. Fold 0 smaller: a
    # spring-forward skipped it.
    before = zone.utcoffset(wall.replace(fold=0))
    after = zone.utcoffset(wall.replace(fold=1))
    assert before is not None
    assert after is not None
    local_ms = _ms_of(wall - _NAIVE_EPOCH - before)
    if before >= after:
        return local_ms
    # In the gap: fold=0 gave an instant after the gap, fold=1 one before it. Find the
    # transition between them.
    lo, hi = local_ms - _ms_of(after - before), local_ms
    while hi - lo > 1000:
        mid = (lo + hi) // 2 // 1000 * 1000
        if mid <= lo:
            break
        if _offset_ms(mid, zone) == _ms_of(after):
            hi = mid
        else:
            lo = mid
    return hi


def _ms_of(span: timedelta) -> int:
    return span.days * 86_400_000 + span.seconds * 1000 + span.microseconds // 1000


def _offset_ms(ms: int, zone: ZoneInfo) -> int:
    offset = datetime.fromtimestamp(ms / 1000, zone).utcoffset()
    assert offset is not None
    return int(offset.total_seconds() * 1000)


_NAIVE_EPOCH = datetime(1970, 1, 1)
_ONE_SECOND = timedelta(seconds=1)


# (epoch second, zone) -> the naive wall time one second later: the jobs of a partition
# are settled against the same few instants.
_SECOND_AFTER: Memo[tuple[int, str], datetime | None] = Memo(4096)


def second_after(epoch_s: int, zone: ZoneInfo) -> datetime | None:
    """The naive wall time, in ``zone``, one second after the instant ``epoch_s``."""
    key = (epoch_s, zone.key)
    found = _SECOND_AFTER.get(key, _MISSING)
    if found is _MISSING:
        wall = datetime.fromtimestamp(epoch_s, zone).replace(tzinfo=None, fold=0)
        found = _SECOND_AFTER.keep(key, plus_second(wall))
    return found  # type: ignore[return-value]


def plus_second(wall: datetime) -> datetime | None:
    """The naive wall time one second later; None past the last second of year 9999."""
    try:
        return wall + _ONE_SECOND
    except OverflowError:
        return None


_ZONE_NAME = re.compile(r"[A-Za-z0-9_+-]{1,30}(/[A-Za-z0-9_+-]{1,30}){0,2}")


@lru_cache(maxsize=1024)
def load_zone(name: str) -> ZoneInfo:
    """The zone ``name`` from the pinned tzdata package (whatever the host has)."""
    if not _ZONE_NAME.fullmatch(name):
        raise ZoneError(f"{name[:80]!r} is not an IANA time zone name (e.g. Europe/Paris)")
    try:
        source = resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
        with source.open("rb") as data:
            return ZoneInfo.from_file(data, key=name)
    except (OSError, ValueError) as exc:
        raise ZoneError(
            f"{name!r} is not an IANA time zone (tzdata {TZDATA_VERSION}): {type(exc).__name__}"
        ) from None
