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
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Protocol, TypedDict

from cronstream.schemas.avro import AvroRecord, KeyedByJob
from cronstream.schemas.headers import (
    NamesRun,
    job_headers,
    record_headers,
    run_headers,
    run_request_headers,
    text_headers,
)
from cronstream.schemas.instants import EPOCH, from_ms, iso, to_ms, utc_now
from cronstream.schemas.schedules import (
    CronSchedule,
    IntervalSchedule,
    OnceSchedule,
    Schedule,
)


class Priority(StrEnum):
    HIGH = "HIGH"
    NORMAL = "NORMAL"
    LOW = "LOW"


class Concurrency(StrEnum):
    """What a new run of a job does while another run of it executes (on the worker
    owning the job's partition)."""

    ALLOW = "ALLOW"
    FORBID = "FORBID"
    REPLACE = "REPLACE"
    QUEUE = "QUEUE"


class Trigger(StrEnum):
    SCHEDULE = "SCHEDULE"
    CATCHUP = "CATCHUP"
    RETRY = "RETRY"
    MANUAL = "MANUAL"
    FLOW = "FLOW"  # a node of a flow run
    DEADLINE = "DEADLINE"  # not a run: the check that the run succeeded by its deadline
    EVENT = "EVENT"  # a record of the job's source topic (``JobDefinition.on``)
    DEPENDENCY = "DEPENDENCY"  # the jobs it comes after succeeded for a date (``after``)


class MisfireKind(StrEnum):
    SKIP = "SKIP"
    ONCE = "ONCE"
    ALL = "ALL"


# Why a run emitted ahead was cancelled (a paused job's: SKIPPED, as its slots are).
JOB_PAUSED, JOB_DELETED = "job paused", "job deleted"


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
    UPSTREAM_FAILED = "UPSTREAM_FAILED"  # a flow node not run: a node before it failed


class TimerReason(StrEnum):
    RETRY = "RETRY"
    DELAY = "DELAY"
    DEADLINE = "DEADLINE"  # the check of a scheduled run's deadline


class ControlAction(StrEnum):
    CANCEL = "CANCEL"


# -- Avro conversion --------------------------------------------------------------------
# -- nested values ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Target(AvroRecord):
    type: str
    url: str | None = None
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    topic: str | None = None
    callable: str | None = None
    command: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy(AvroRecord):
    max_attempts: int = 3
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 300_000


class Execution(TypedDict):
    """What a run executes and how, the same for every run of one job or flow node:
    ``execution`` copies it from a job, a flow node or a run into a run or a flow node."""

    target: Target
    payload: str | None
    priority: Priority
    timeout_ms: int
    retry: RetryPolicy


class Executes(Protocol):
    """A job, a flow node or a run request: each says what its runs execute."""

    @property
    def target(self) -> Target: ...
    @property
    def payload(self) -> str | None: ...
    @property
    def priority(self) -> Priority: ...
    @property
    def timeout_ms(self) -> int: ...
    @property
    def retry(self) -> RetryPolicy: ...


def execution(of: Executes) -> Execution:
    """What ``of``'s runs execute, to give a run (``RunRequest(..., **execution(job))``)."""
    return Execution(
        target=of.target,
        payload=of.payload,
        priority=of.priority,
        timeout_ms=of.timeout_ms,
        retry=of.retry,
    )


class RunIdentity(TypedDict):
    """Which attempt of which run a record is about: ``run_identity`` copies it from a
    run into each record about it (its context, its outcomes, its output)."""

    run_id: str
    job_id: str
    tenant: str
    attempt: int
    scheduled_at: datetime


class IdentifiesRun(NamesRun, Protocol):
    """A run request, outcome or output: each says which attempt of which run it is."""

    @property
    def tenant(self) -> str: ...


def run_identity(of: IdentifiesRun) -> RunIdentity:
    """Which attempt of which run ``of`` is, to give a record about it
    (``RunOutput(..., **run_identity(run))``)."""
    return RunIdentity(
        run_id=of.run_id,
        job_id=of.job_id,
        tenant=of.tenant,
        attempt=of.attempt,
        scheduled_at=of.scheduled_at,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class MisfirePolicy(AvroRecord):
    policy: MisfireKind = MisfireKind.ONCE
    max_catchup: int = 10
    catchup_window_ms: int = 3_600_000


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTrigger(AvroRecord):
    """Runs caused by the records of a topic (a job's ``on:``; docs/event-triggers.md).
    ``filter`` and ``key`` are texts of ``schemas.definition.filters``."""

    topic: str
    filter: str | None = None  # None: every record
    debounce_ms: int | None = None  # at most one run per window (per key)
    batch: int | None = None  # one run per this many records (per key)
    key: str | None = None  # the path that groups records for debounce and batch
    payload_fields: dict[str, str] = field(default_factory=dict)  # {}: the whole record

    def describe(self) -> str:
        parts = [f"on {self.topic}"]
        if self.filter is not None:
            parts.append(f"if {self.filter}")
        if self.debounce_ms is not None:
            parts.append(f"debounce {self.debounce_ms}ms")
        if self.batch is not None:
            parts.append(f"batch {self.batch}")
        if self.key is not None:
            parts.append(f"per {self.key}")
        return " ".join(parts)


# -- top-level events -------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition(KeyedByJob):
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
    concurrency: Concurrency = Concurrency.ALLOW
    deadline_ms: int | None = None  # slot -> success, else an alert
    on: EventTrigger | None = None  # runs caused by a topic's records, beside the schedule
    after: tuple[str, ...] = ()  # runs once these jobs succeeded for a date (no schedule)

    def headers(self) -> list[tuple[str, bytes]]:
        return job_headers(self.job_id, op="put", detail=self.describe_schedule())

    def describe_schedule(self) -> str:
        """What makes the job run: its schedule, its source topic, the jobs it comes
        after ("manual": only a trigger by hand)."""
        parts = [self.schedule.describe()] if self.schedule else []
        if self.on is not None:
            parts.append(self.on.describe())
        if self.after:
            parts.append("after " + ", ".join(self.after))
        return " + ".join(parts) or "manual"

    def run_request(
        self, *, run_id: str, scheduled_at: datetime, fired_at: datetime, trigger: Trigger
    ) -> RunRequest:
        """The first attempt of one run of this job (what it executes comes from here)."""
        return RunRequest(
            run_id=run_id,
            job_id=self.job_id,
            tenant=self.tenant,
            scheduled_at=scheduled_at,
            fired_at=fired_at,
            trigger=trigger,
            concurrency=self.concurrency,
            **execution(self),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest(KeyedByJob):
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
    due_at: datetime | None = None
    payload: str | None = None
    priority: Priority = Priority.NORMAL
    timeout_ms: int = 30_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: Concurrency = Concurrency.ALLOW

    def headers(self) -> list[tuple[str, bytes]]:
        due = self.due_at
        return run_request_headers(
            self.job_id.encode(),
            self.run_id.encode(),
            iso(self.scheduled_at).encode(),
            attempt=str(self.attempt).encode(),
            trigger=self.trigger.value.encode(),
            possible_duplicate=self.possible_duplicate,
            due_at=iso(due).encode() if due is not None and due > self.fired_at else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutcome(KeyedByJob):
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

    def headers(self) -> list[tuple[str, bytes]]:
        return run_headers("RunOutcome", self, status=self.status.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerRequest(KeyedByJob):
    AVRO_NAME: ClassVar[str] = "cronstream.TimerRequest"

    timer_id: str
    job_id: str
    due_at: datetime
    reason: TimerReason
    created_at: datetime
    run: RunRequest

    def headers(self) -> list[tuple[str, bytes]]:
        headers = run_headers("TimerRequest", self.run, status=f"{self.reason.value}_PENDING")
        headers.append(("due_at", iso(self.due_at).encode()))
        return headers


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlCommand(AvroRecord):
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
        always = (("action", self.action.value), ("run_id", self.run_id))
        return record_headers("ControlCommand", *always, job_id=self.job_id)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter(AvroRecord):
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
        return record_headers(
            "DeadLetter",
            ("stage", self.stage),
            ("source", f"{self.source_topic}/{self.source_partition}@{self.source_offset}"),
            ("reason", self.reason[:200]),
            job_id=self.job_id,
            run_id=self.run_id,
            attempt=None if self.attempt is None else str(self.attempt),
        )


Event = JobDefinition | RunRequest | RunOutcome | TimerRequest | ControlCommand | DeadLetter

__all__ = [
    "EPOCH",
    "Concurrency",
    "ControlAction",
    "ControlCommand",
    "CronSchedule",
    "DeadLetter",
    "Event",
    "EventTrigger",
    "Execution",
    "IdentifiesRun",
    "IntervalSchedule",
    "JobDefinition",
    "MisfireKind",
    "MisfirePolicy",
    "OnceSchedule",
    "Priority",
    "RetryPolicy",
    "RunIdentity",
    "RunOutcome",
    "RunRequest",
    "RunStatus",
    "Schedule",
    "Target",
    "TimerReason",
    "TimerRequest",
    "Trigger",
    "execution",
    "from_ms",
    "iso",
    "job_headers",
    "run_identity",
    "text_headers",
    "to_jsonable",
    "to_ms",
    "utc_now",
]


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
