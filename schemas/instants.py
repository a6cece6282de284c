"""Instants on the wire: UTC, whole milliseconds, one textual form."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any


def utc_now() -> datetime:
    """Now in UTC, truncated to the millisecond: what survives a trip through Avro."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(instant: datetime) -> int:
    """Exact integer milliseconds since the epoch (no float rounding)."""
    delta = instant - EPOCH
    return delta.days * 86_400_000 + delta.seconds * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@lru_cache(maxsize=4096)  # runs of many jobs share their scheduled instant
def iso(instant: datetime) -> str:
    """2026-11-22T10:00:00.000Z: the one textual form of an instant on the wire."""
    t = instant if instant.tzinfo is UTC else instant.astimezone(UTC)
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:"
        f"{t.second:02d}.{t.microsecond // 1000:03d}Z"
    )


def aware(value: Any) -> datetime:
    """An instant as fastavro hands it out (an aware or naive UTC datetime, or epoch
    milliseconds) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return from_ms(int(value))
