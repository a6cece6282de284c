"""Job definitions as the scheduling core sees them.

Loading a partition turns every definition on it into a ``JobSchedule``: the timing
fields only (the schedule through ``schemas.events.schedule_from_avro``), with the raw
record kept as the body. The whole definition is decoded, and its run template built,
only when a job comes within the wheel's horizon (``prepare``): at a million schedules
that is most of what a restart costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from schemas.events import (
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    OnceSchedule,
    Schedule,
    schedule_from_avro,
    to_ms,
)
from schemas.serde import Codec, DecodeError
from schemas.templates import RunTemplate
from streams.core.schedule import JobSchedule, Misfire


@dataclass(slots=True)
class Prepared:
    """A job's body once it is within the horizon: raw definition plus its run template."""

    raw: bytes
    template: RunTemplate


class Definitions:
    """Reads definitions for one processor (misfire policies shared between jobs)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        self._misfires: dict[tuple[str, int, int], Misfire] = {}

    def schedule(self, key: str, raw: bytes) -> JobSchedule:
        """The core's view of the definition ``raw`` stored under ``key``. Raises
        DecodeError (or the core's CronError/ZoneError) for one that cannot be used."""
        d = self.codec.decode_record(raw, JobDefinition)
        if d["job_id"] != key:
            raise DecodeError(f"record key {key!r} differs from job_id {d['job_id']!r}")
        timing = schedule_timing(schedule_from_avro(d["schedule"]))
        m = d["misfire"]
        policy = (m["policy"], m["max_catchup"], m["catchup_window_ms"])
        misfire = self._misfires.get(policy)
        if misfire is None:
            misfire = self._misfires[policy] = Misfire(*policy)
        return JobSchedule(
            d["job_id"],
            timezone=d["timezone"],
            start_ms=_ms(d["start_at"]),
            end_ms=_ms(d["end_at"]),
            jitter_ms=d["jitter_ms"],
            paused=d["paused"],
            misfire=misfire,
            body=raw,
            **timing,
        )

    def prepare(self, job: JobSchedule) -> Prepared:
        """Decode ``job``'s whole definition and build its run template (once)."""
        body = job.body
        if type(body) is Prepared:
            return body
        definition = self.codec.decode(body, JobDefinition)
        prepared = Prepared(raw=body, template=RunTemplate(definition))
        job.body = prepared
        return prepared


def schedule_timing(schedule: Schedule | None) -> dict[str, Any]:
    """A schedule as ``JobSchedule``'s timing arguments (none: a manual job). Raises
    DecodeError for an interval that is not positive."""
    match schedule:
        case CronSchedule(expression=expression):
            return {"cron": expression}
        case IntervalSchedule(every_ms=every_ms, anchor=anchor):
            if every_ms <= 0:
                raise DecodeError(f"interval every_ms={every_ms} is not positive")
            return {"every_ms": every_ms, "anchor_ms": to_ms(anchor)}
        case OnceSchedule(at=at):
            return {"at_ms": to_ms(at)}
    return {}


def _ms(value: datetime | int | None) -> int | None:
    if value is None or isinstance(value, int):
        return value
    return to_ms(value)
