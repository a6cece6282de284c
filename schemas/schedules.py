"""When a job runs: the three kinds of schedule (cron, interval, once) and the Avro union
of ``JobDefinition.schedule`` they travel in (null: a job run only by a trigger)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronstream.schemas.instants import aware, iso


@dataclass(frozen=True, slots=True, kw_only=True)
class CronSchedule:
    expression: str

    def describe(self) -> str:
        return f"cron {self.expression}"


@dataclass(frozen=True, slots=True, kw_only=True)
class IntervalSchedule:
    every_ms: int
    anchor: datetime

    def describe(self) -> str:
        return f"every {self.every_ms}ms from {iso(self.anchor)}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OnceSchedule:
    at: datetime

    def describe(self) -> str:
        return f"once at {iso(self.at)}"


Schedule = CronSchedule | IntervalSchedule | OnceSchedule


def schedule_to_avro(schedule: Schedule | None) -> Any:
    match schedule:
        case None:
            return None
        case CronSchedule(expression=expr):
            return ("cronstream.CronSchedule", {"expression": expr})
        case IntervalSchedule(every_ms=every, anchor=anchor):
            return ("cronstream.IntervalSchedule", {"every_ms": every, "anchor": anchor})
        case OnceSchedule(at=at):
            return ("cronstream.OnceSchedule", {"at": at})
    raise TypeError(f"not a schedule: {schedule!r}")


def schedule_from_avro(value: Any) -> Schedule | None:
    """The schedule union as fastavro reads it ((record name, fields), or None) as a
    typed value; the scheduler reads definitions' schedules through this too."""
    if value is None:
        return None
    name, rec = value
    short = name.rsplit(".", 1)[-1]
    if short == "CronSchedule":
        return CronSchedule(expression=rec["expression"])
    if short == "IntervalSchedule":
        return IntervalSchedule(every_ms=rec["every_ms"], anchor=aware(rec["anchor"]))
    if short == "OnceSchedule":
        return OnceSchedule(at=aware(rec["at"]))
    raise ValueError(f"unknown schedule type {name!r}")
