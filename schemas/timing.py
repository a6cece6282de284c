"""The scheduling fields of a job definition, read without decoding the whole record.

A scheduler restart reads every definition of its partitions, a million of them, and
needs only their timing: the schedule, zone, bounds, jitter, paused flag and misfire
policy (``JobTiming``). The whole definition is decoded later, for the few jobs that
come within the wheel's horizon.

``TimingReader`` reads a body written with exactly our JobDefinition schema the way
``RunRequestReader`` reads run requests. The head (job_id, tenant, schedule, timezone,
start_at, end_at, jitter_ms, paused: JobDefinition.avsc's first eight fields) is read
by hand. The misfire policy is in the *tail* (target, payload, priority, retry,
timeout_ms, misfire), which is the same bytes for every job that shares a target and
policies; a tail is looked up among those decoded before, and an unseen one is decoded
whole once, by fastavro (``slow``), which also checks every field of it. The last
field, ``updated_at``, differs per record: it is cut off the tail by reading its varint
from the end. A unit test holds the reader's result equal to fastavro's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cronstream.schemas.errors import HeadError, InvalidTiming
from cronstream.schemas.instants import to_ms
from cronstream.schemas.schedules import CronSchedule, IntervalSchedule, OnceSchedule, Schedule
from cronstream.schemas.schedules import schedule_from_avro as _schedule_from_avro
from cronstream.schemas.wire import Tails, last_varint_start, read_instant, read_long, read_string

_CRON, _INTERVAL, _ONCE = 1, 2, 3  # the schedule union's branches (0: null, manual)


@dataclass(frozen=True, slots=True)
class JobTiming:
    """What the scheduling core needs of a definition; ``timing_args()`` is
    ``JobSchedule``'s keyword arguments."""

    job_id: str
    schedule: dict[str, Any]  # cron=... | every_ms=..., anchor_ms=... | at_ms=... | {}
    timezone: str = "UTC"
    start_ms: int | None = None
    end_ms: int | None = None
    jitter_ms: int = 0
    paused: bool = False
    misfire: tuple[str, int, int] = ("ONCE", 10, 3_600_000)
    tenant: str = "default"

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> JobTiming:
        """From fastavro's dict in our schema's shape (``Codec.decode_record``)."""
        m = record["misfire"]
        return cls(
            job_id=record["job_id"],
            schedule=schedule_args(_schedule_from_avro(record["schedule"])),
            timezone=record["timezone"],
            start_ms=_ms(record["start_at"]),
            end_ms=_ms(record["end_at"]),
            jitter_ms=record["jitter_ms"],
            paused=record["paused"],
            misfire=(m["policy"], m["max_catchup"], m["catchup_window_ms"]),
            tenant=sys.intern(record["tenant"]),
        )


def schedule_args(schedule: Schedule | None) -> dict[str, Any]:
    """A schedule as ``JobSchedule``'s timing arguments (none: a manual job). Raises
    InvalidTiming for an interval that is not positive."""
    match schedule:
        case CronSchedule(expression=expression):
            return {"cron": expression}
        case IntervalSchedule(every_ms=every_ms, anchor=anchor):
            return _interval(every_ms, to_ms(anchor))
        case OnceSchedule(at=at):
            return {"at_ms": to_ms(at)}
    return {}


def _interval(every_ms: int, anchor_ms: int) -> dict[str, Any]:
    if every_ms <= 0:
        raise InvalidTiming(f"interval every_ms={every_ms} is not positive")
    return {"every_ms": every_ms, "anchor_ms": anchor_ms}


def _ms(value: Any) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return to_ms(value)


class TimingReader:
    """Reads JobDefinition bodies written with our schema (see the module's text).
    Raises HeadError, IndexError or UnicodeDecodeError for a head that does not parse,
    InvalidTiming for an interval that is not positive; ``slow`` raises what it raises."""

    def __init__(self) -> None:
        self._tails: Tails[tuple[str, int, int]] = Tails()

    def read(self, body: bytes, slow: Callable[[], JobTiming]) -> JobTiming:
        job_id, pos = read_string(body, 0)
        tenant, pos = read_string(body, pos)
        schedule, pos = _read_schedule(body, pos)
        timezone, pos = read_string(body, pos)
        start_ms, pos = _read_optional_instant(body, pos)
        end_ms, pos = _read_optional_instant(body, pos)
        jitter_ms, pos = read_long(body, pos)
        paused = body[pos]
        if paused > 1:
            raise HeadError(f"boolean byte {paused} out of range")
        updated_at = last_varint_start(body, pos + 1)
        read_instant(body, updated_at)  # in range, as fastavro would insist
        tail = body[pos + 1 : updated_at]
        misfire = self._tails.get(tail)
        if misfire is None:
            timing = slow()
            self._tails.put(tail, timing.misfire)
            return timing
        return JobTiming(
            job_id=job_id,
            schedule=schedule,
            timezone=timezone,
            start_ms=start_ms,
            end_ms=end_ms,
            jitter_ms=jitter_ms,
            paused=paused == 1,
            misfire=misfire,
            tenant=sys.intern(tenant),  # one string per tenant, however many jobs
        )


def _read_schedule(body: bytes, pos: int) -> tuple[dict[str, Any], int]:
    branch, pos = read_long(body, pos)
    if branch == _CRON:
        expression, pos = read_string(body, pos)
        return {"cron": expression}, pos
    if branch == _INTERVAL:
        every_ms, pos = read_long(body, pos)
        anchor_ms, pos = read_instant(body, pos)
        return _interval(every_ms, anchor_ms), pos
    if branch == _ONCE:
        at_ms, pos = read_instant(body, pos)
        return {"at_ms": at_ms}, pos
    if branch == 0:
        return {}, pos
    raise HeadError(f"schedule union branch {branch} out of range")


def _read_optional_instant(body: bytes, pos: int) -> tuple[int | None, int]:
    branch, pos = read_long(body, pos)
    if branch == 0:
        return None, pos
    if branch != 1:
        raise HeadError(f"optional field union branch {branch} out of range")
    return read_instant(body, pos)
