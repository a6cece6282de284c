"""Time buckets and shards of the history tables (pure: no Cassandra, no clock).

- ``runs_by_job``: one partition per job per UTC **day** of ``scheduled_at``.
- ``runs_by_tenant_status`` (and ``runs_by_status``, read for older hours): one
  partition per tenant per status per UTC **hour** of ``recorded_at`` per **shard**
  (``shard_of(run_id)``: a failure storm spreads over ``SHARDS`` partitions);
  ``history_tenants``: the tenants of each hour.
- ``runs_by_id``: one partition per run id.

A query over a time range visits the buckets newest first (``days_desc``, ``hours_desc``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import TypeVar

SHARDS = 8
HOUR = timedelta(hours=1)

# Added to recorded_at (in microseconds) to make a write's timestamp: of two records of
# one attempt written in the same millisecond, the later stage wins (a STARTED never
# hides the SUCCEEDED recorded in its millisecond).
STATUS_RANK = {
    "STARTED": 0,
    "FAILED": 1,
    "TIMED_OUT": 1,
    "SUCCEEDED": 2,
    "CANCELED": 2,
    "DEAD_LETTERED": 3,
    "MISSED": 2,
    "SKIPPED": 2,
    "DUPLICATE": 4,
}


def shard_of(run_id: str) -> int:
    """A stable shard for a run id (crc32: the same in every process and version)."""
    return zlib.crc32(run_id.encode()) % SHARDS


def day_of(instant: datetime) -> date:
    return instant.astimezone(UTC).date()


def hour_of(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def write_timestamp(recorded_at_ms: int, status: str) -> int:
    """USING TIMESTAMP for an outcome: recorded_at in microseconds plus its status rank.
    A redelivered outcome gets the same timestamp, so rewriting it changes nothing."""
    return recorded_at_ms * 1000 + STATUS_RANK.get(status, 0)


def days_desc(start: datetime, end: datetime) -> Iterator[date]:
    """The UTC days touching [start, end), newest first."""
    return _buckets_desc(start, end, day_of, timedelta(days=1))


def hours_desc(start: datetime, end: datetime) -> Iterator[datetime]:
    """The UTC hours touching [start, end), newest first."""
    return _buckets_desc(start, end, hour_of, HOUR)


B = TypeVar("B", date, datetime)


def _buckets_desc(
    start: datetime, end: datetime, bucket_of: Callable[[datetime], B], step: timedelta
) -> Iterator[B]:
    if end <= start:
        return
    bucket, first = bucket_of(end - timedelta(microseconds=1)), bucket_of(start)
    while bucket >= first:
        yield bucket
        bucket -= step
