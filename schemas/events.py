"""The typed events every cronstream component exchanges.

One frozen, slotted, keyword-only dataclass per Avro record in ``schemas/avro``. Each
top-level event knows its Avro full name, its Kafka key and its readable headers, and
converts to and from the plain dicts fastavro reads and writes. No dict crosses a
module boundary: codecs hand out these types.

Instants are timezone-aware UTC ``datetime`` values; Avro carries them as
``timestamp-millis``, so they are truncated to the millisecond on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar, Self


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


def iso(instant: datetime) -> str:
    """2026-11-22T10:00:00.000Z: the one textual form of an instant on the wire."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{instant.microsecond // 1000:03d}Z"
    )


def _opt_dt(value: Any) -> datetime | None:
    return None if value is None else _aware(value)


def _aware(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return from_ms(int(value))


class Priority(StrEnum):
    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"


class Trigger(StrEnum):
    SCHEDULE = "SCHEDULE"
    CATCHUP = "CATCHUP"
    RETRY = "RETRY"
    MANUAL = "MANUAL"


class MisfireKind(StrEnum):
    SKIP = "SKIP"
    ONCE = "ONCE"
    ALL = "ALL"


class RunStatus(StrEnum):
    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELED = "CANCELED"
    DEAD_LETTERED = "DEAD_LETTERED"
    MISSED = "MISSED"
    SKIPPED = "SKIPPED"
    DUPLICATE = "DUPLICATE"


class TimerReason(StrEnum):
    RETRY = "RETRY"
    DELAY = "DELAY"


class ControlAction(StrEnum):
    CANCEL = "CANCEL"


TARGET_TYPES = ("http", "kafka", "python", "shell")


# -- nested values ----------------------------------------------------------------------
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


def _schedule_to_avro(schedule: Schedule | None) -> Any:
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


def _schedule_from_avro(value: Any) -> Schedule | None:
    if value is None:
        return None
    name, rec = value
    short = name.rsplit(".", 1)[-1]
    if short == "CronSchedule":
        return CronSchedule(expression=rec["expression"])
    if short == "IntervalSchedule":
        return IntervalSchedule(every_ms=rec["every_ms"], anchor=_aware(rec["anchor"]))
    if short == "OnceSchedule":
        return OnceSchedule(at=_aware(rec["at"]))
    raise ValueError(f"unknown schedule type {name!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    type: str
    url: str | None = None
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    topic: str | None = None
    callable: str | None = None
    command: str | None = None

    def to_avro(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "url": self.url,
            "method": self.method,
            "headers": dict(self.headers),
            "topic": self.topic,
            "callable": self.callable,
            "command": self.command,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            type=d["type"],
            url=d.get("url"),
            method=d.get("method", "POST"),
            headers=dict(d.get("headers") or {}),
            topic=d.get("topic"),
            callable=d.get("callable"),
            command=d.get("command"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    max_attempts: int = 3
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 300_000

    def to_avro(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "initial_backoff_ms": self.initial_backoff_ms,
            "max_backoff_ms": self.max_backoff_ms,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            max_attempts=d["max_attempts"],
            initial_backoff_ms=d["initial_backoff_ms"],
            max_backoff_ms=d["max_backoff_ms"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MisfirePolicy:
    policy: MisfireKind = MisfireKind.ONCE
    max_catchup: int = 10
    catchup_window_ms: int = 3_600_000

    def to_avro(self) -> dict[str, Any]:
        return {
            "policy": self.policy.value,
            "max_catchup": self.max_catchup,
            "catchup_window_ms": self.catchup_window_ms,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            policy=MisfireKind(d["policy"]),
            max_catchup=d["max_catchup"],
            catchup_window_ms=d["catchup_window_ms"],
        )


# -- top-level events -------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition:
    AVRO_NAME: ClassVar[str] = "cronstream.JobDefinition"

    job_id: str
    target: Target
    updated_at: datetime
    tenant: str = "default"
    schedule: Schedule | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter_ms: int = 0
    paused: bool = False
    payload: str | None = None
    priority: Priority = Priority.NORMAL
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_ms: int = 30_000
    misfire: MisfirePolicy = field(default_factory=MisfirePolicy)

    def key(self) -> str:
        return self.job_id

    def headers(self) -> list[tuple[str, bytes]]:
        return job_headers(self.job_id, op="put", detail=self.describe_schedule())

    def describe_schedule(self) -> str:
        return self.schedule.describe() if self.schedule else "manual"

    def to_avro(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "tenant": self.tenant,
            "schedule": _schedule_to_avro(self.schedule),
            "timezone": self.timezone,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "jitter_ms": self.jitter_ms,
            "paused": self.paused,
            "target": self.target.to_avro(),
            "payload": self.payload,
            "priority": self.priority.value,
            "retry": self.retry.to_avro(),
            "timeout_ms": self.timeout_ms,
            "misfire": self.misfire.to_avro(),
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            job_id=d["job_id"],
            tenant=d["tenant"],
            schedule=_schedule_from_avro(d["schedule"]),
            timezone=d["timezone"],
            start_at=_opt_dt(d["start_at"]),
            end_at=_opt_dt(d["end_at"]),
            jitter_ms=d["jitter_ms"],
            paused=d["paused"],
            target=Target.from_avro(d["target"]),
            payload=d["payload"],
            priority=Priority(d["priority"]),
            retry=RetryPolicy.from_avro(d["retry"]),
            timeout_ms=d["timeout_ms"],
            misfire=MisfirePolicy.from_avro(d["misfire"]),
            updated_at=_aware(d["updated_at"]),
        )


def job_headers(job_id: str, *, op: str, detail: str | None = None) -> list[tuple[str, bytes]]:
    """Headers of a jobs-topic record; a tombstone gets them too (op=delete)."""
    headers = [("event", b"JobDefinition"), ("job_id", job_id.encode()), ("op", op.encode())]
    if detail:
        headers.append(("schedule", detail.encode()))
    return headers


def _run_headers(
    event: str,
    *,
    run_id: str,
    job_id: str,
    scheduled_at: datetime,
    attempt: int,
    status: str,
) -> list[tuple[str, bytes]]:
    return [
        ("event", event.encode()),
        ("job_id", job_id.encode()),
        ("run_id", run_id.encode()),
        ("scheduled_at", iso(scheduled_at).encode()),
        ("attempt", str(attempt).encode()),
        ("status", status.encode()),
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    AVRO_NAME: ClassVar[str] = "cronstream.RunRequest"

    run_id: str
    job_id: str
    scheduled_at: datetime
    fired_at: datetime
    target: Target
    tenant: str = "default"
    attempt: int = 1
    trigger: Trigger = Trigger.SCHEDULE
    possible_duplicate: bool = False
    payload: str | None = None
    priority: Priority = Priority.NORMAL
    timeout_ms: int = 30_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def key(self) -> str:
        return self.job_id

    def headers(self) -> list[tuple[str, bytes]]:
        headers = _run_headers(
            "RunRequest",
            run_id=self.run_id,
            job_id=self.job_id,
            scheduled_at=self.scheduled_at,
            attempt=self.attempt,
            status="REQUESTED",
        )
        headers.append(("trigger", self.trigger.value.encode()))
        if self.possible_duplicate:
            headers.append(("possible_duplicate", b"true"))
        return headers

    def to_avro(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job_id": self.job_id,
            "tenant": self.tenant,
            "attempt": self.attempt,
            "scheduled_at": self.scheduled_at,
            "fired_at": self.fired_at,
            "trigger": self.trigger.value,
            "possible_duplicate": self.possible_duplicate,
            "target": self.target.to_avro(),
            "payload": self.payload,
            "priority": self.priority.value,
            "timeout_ms": self.timeout_ms,
            "retry": self.retry.to_avro(),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            run_id=d["run_id"],
            job_id=d["job_id"],
            tenant=d["tenant"],
            attempt=d["attempt"],
            scheduled_at=_aware(d["scheduled_at"]),
            fired_at=_aware(d["fired_at"]),
            trigger=Trigger(d["trigger"]),
            possible_duplicate=d["possible_duplicate"],
            target=Target.from_avro(d["target"]),
            payload=d["payload"],
            priority=Priority(d["priority"]),
            timeout_ms=d["timeout_ms"],
            retry=RetryPolicy.from_avro(d["retry"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome:
    AVRO_NAME: ClassVar[str] = "cronstream.RunOutcome"

    run_id: str
    job_id: str
    status: RunStatus
    scheduled_at: datetime
    recorded_at: datetime
    tenant: str = "default"
    attempt: int = 1
    trigger: Trigger = Trigger.SCHEDULE
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    error: str | None = None
    next_attempt_at: datetime | None = None
    target_type: str | None = None
    worker: str | None = None

    def key(self) -> str:
        return self.job_id

    def headers(self) -> list[tuple[str, bytes]]:
        return _run_headers(
            "RunOutcome",
            run_id=self.run_id,
            job_id=self.job_id,
            scheduled_at=self.scheduled_at,
            attempt=self.attempt,
            status=self.status.value,
        )

    def to_avro(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "job_id": self.job_id,
            "tenant": self.tenant,
            "attempt": self.attempt,
            "status": self.status.value,
            "trigger": self.trigger.value,
            "scheduled_at": self.scheduled_at,
            "recorded_at": self.recorded_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "error": self.error,
            "next_attempt_at": self.next_attempt_at,
            "target_type": self.target_type,
            "worker": self.worker,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            run_id=d["run_id"],
            job_id=d["job_id"],
            tenant=d["tenant"],
            attempt=d["attempt"],
            status=RunStatus(d["status"]),
            trigger=Trigger(d["trigger"]),
            scheduled_at=_aware(d["scheduled_at"]),
            recorded_at=_aware(d["recorded_at"]),
            started_at=_opt_dt(d["started_at"]),
            finished_at=_opt_dt(d["finished_at"]),
            duration_ms=d["duration_ms"],
            error=d["error"],
            next_attempt_at=_opt_dt(d["next_attempt_at"]),
            target_type=d["target_type"],
            worker=d["worker"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerRequest:
    AVRO_NAME: ClassVar[str] = "cronstream.TimerRequest"

    timer_id: str
    job_id: str
    due_at: datetime
    reason: TimerReason
    created_at: datetime
    run: RunRequest

    def key(self) -> str:
        return self.job_id

    def headers(self) -> list[tuple[str, bytes]]:
        headers = _run_headers(
            "TimerRequest",
            run_id=self.run.run_id,
            job_id=self.job_id,
            scheduled_at=self.run.scheduled_at,
            attempt=self.run.attempt,
            status=f"{self.reason.value}_PENDING",
        )
        headers.append(("due_at", iso(self.due_at).encode()))
        return headers

    def to_avro(self) -> dict[str, Any]:
        return {
            "timer_id": self.timer_id,
            "job_id": self.job_id,
            "due_at": self.due_at,
            "reason": self.reason.value,
            "created_at": self.created_at,
            "run": self.run.to_avro(),
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            timer_id=d["timer_id"],
            job_id=d["job_id"],
            due_at=_aware(d["due_at"]),
            reason=TimerReason(d["reason"]),
            created_at=_aware(d["created_at"]),
            run=RunRequest.from_avro(d["run"]),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlCommand:
    AVRO_NAME: ClassVar[str] = "cronstream.ControlCommand"

    command_id: str
    action: ControlAction
    run_id: str
    issued_at: datetime
    job_id: str | None = None
    reason: str | None = None

    def key(self) -> str:
        return self.run_id

    def headers(self) -> list[tuple[str, bytes]]:
        headers = [
            ("event", b"ControlCommand"),
            ("action", self.action.value.encode()),
            ("run_id", self.run_id.encode()),
        ]
        if self.job_id:
            headers.append(("job_id", self.job_id.encode()))
        return headers

    def to_avro(self) -> dict[str, Any]:
        return {
            "command_id": self.command_id,
            "action": self.action.value,
            "run_id": self.run_id,
            "job_id": self.job_id,
            "issued_at": self.issued_at,
            "reason": self.reason,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            command_id=d["command_id"],
            action=ControlAction(d["action"]),
            run_id=d["run_id"],
            job_id=d["job_id"],
            issued_at=_aware(d["issued_at"]),
            reason=d["reason"],
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    AVRO_NAME: ClassVar[str] = "cronstream.DeadLetter"

    reason: str
    stage: str
    source_topic: str
    source_partition: int
    source_offset: int
    dead_at: datetime
    source_key: bytes | None = None
    source_value: bytes | None = None
    job_id: str | None = None
    run_id: str | None = None
    attempt: int | None = None

    def key(self) -> str:
        return self.job_id or (self.source_key or b"").decode("utf-8", "replace")

    def headers(self) -> list[tuple[str, bytes]]:
        headers = [
            ("event", b"DeadLetter"),
            ("stage", self.stage.encode()),
            (
                "source",
                f"{self.source_topic}/{self.source_partition}@{self.source_offset}".encode(),
            ),
            ("reason", self.reason[:200].encode()),
        ]
        if self.job_id:
            headers.append(("job_id", self.job_id.encode()))
        if self.run_id:
            headers.append(("run_id", self.run_id.encode()))
        if self.attempt is not None:
            headers.append(("attempt", str(self.attempt).encode()))
        return headers

    def to_avro(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "stage": self.stage,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "source_key": self.source_key,
            "source_value": self.source_value,
            "job_id": self.job_id,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "dead_at": self.dead_at,
        }

    @classmethod
    def from_avro(cls, d: Mapping[str, Any]) -> Self:
        return cls(
            reason=d["reason"],
            stage=d["stage"],
            source_topic=d["source_topic"],
            source_partition=d["source_partition"],
            source_offset=d["source_offset"],
            source_key=d["source_key"],
            source_value=d["source_value"],
            job_id=d["job_id"],
            run_id=d["run_id"],
            attempt=d["attempt"],
            dead_at=_aware(d["dead_at"]),
        )


Event = JobDefinition | RunRequest | RunOutcome | TimerRequest | ControlCommand | DeadLetter

__all__ = [
    "TARGET_TYPES",
    "ControlAction",
    "ControlCommand",
    "CronSchedule",
    "DeadLetter",
    "Event",
    "IntervalSchedule",
    "JobDefinition",
    "MisfireKind",
    "MisfirePolicy",
    "OnceSchedule",
    "Priority",
    "RetryPolicy",
    "RunOutcome",
    "RunRequest",
    "RunStatus",
    "Schedule",
    "Target",
    "TimerReason",
    "TimerRequest",
    "Trigger",
    "from_ms",
    "iso",
    "job_headers",
    "text_headers",
    "to_jsonable",
    "to_ms",
    "utc_now",
]


def text_headers(headers: Any) -> dict[str, str]:
    """Kafka record headers as text (the form cronstream writes them in)."""
    out = {}
    for name, value in headers or []:
        out[name] = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else ""
    return out


def to_jsonable(value: Any) -> Any:
    """An event (or any part of one) as plain JSON values: instants in ISO 8601 UTC."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, CronSchedule | IntervalSchedule | OnceSchedule):
            out = {"kind": type(value).__name__.removesuffix("Schedule").lower(), **out}
        return out
    return value
