"""The rules every job definition keeps, however it was built: ``problems`` is the one
check, called by the client (``jobs put``, ``jobs apply``, ``JobClient``), the API, the
admission and the flows' schedules; ``loading_problems`` is its part the scheduler
checks on a stored record's timing head (``streams.scheduler.definitions``: records may come from
any producer)."""

from __future__ import annotations

from cronstream.schemas.definition.cron import parse_cron
from cronstream.schemas.definition.triggers import trigger_problems
from cronstream.schemas.definition.zones import load_zone
from cronstream.schemas.errors import CronError, ZoneError
from cronstream.schemas.events import CronSchedule, IntervalSchedule, JobDefinition, OnceSchedule
from cronstream.schemas.limits import (
    MAX_DEFINITION_BYTES,
    MAX_JOB_ID,
    MAX_TENANT,
    cron_problems,
    deadline_problems,
    name_problems,
    retry_problems,
    timing_problems,
    unencodable,
)
from cronstream.schemas.redact import secret_name, sensitive
from cronstream.schemas.targets import target_problems
from cronstream.schemas.timing import JobTiming

MIN_INTERVAL_MS = 1000


def problems(job: JobDefinition, *, max_payload_bytes: int) -> list[str]:
    """Every rule a JobDefinition must keep, however it was built."""
    unsendable = unencodable(job)  # a url, payload, header, id, filter... (JSON's "\udcff")
    if unsendable:  # alone: the other rules' reasons would quote text no answer can carry
        return unsendable
    return [
        *_identity_problems(job),
        *_schedule_problems(job),
        *target_problems(job.target),
        *_policy_problems(job, max_payload_bytes),
        *trigger_problems(job),
    ]


def _identity_problems(job: JobDefinition) -> list[str]:
    return [
        *name_problems("job id", job.job_id, MAX_JOB_ID),
        *name_problems("tenant", job.tenant, MAX_TENANT),
    ]


def _schedule_problems(job: JobDefinition) -> list[str]:
    problems = []
    zone = zone_problem(job.timezone)
    if zone:
        problems.append(zone)
    match job.schedule:
        case CronSchedule(expression=expr):
            try:
                parse_cron(expr)
            except CronError as exc:
                problems.append(str(exc))
        case IntervalSchedule(every_ms=every):
            if every < MIN_INTERVAL_MS:
                problems.append(f"interval {every}ms is shorter than the 1s minimum")
        case OnceSchedule() | None:
            pass
    if job.start_at and job.end_at and job.end_at <= job.start_at:
        problems.append("end must be after start")
    schedule = job.schedule
    problems += timing_problems(
        every_ms=schedule.every_ms if isinstance(schedule, IntervalSchedule) else 0,
        jitter_ms=job.jitter_ms,
        max_catchup=job.misfire.max_catchup,
        catchup_window_ms=job.misfire.catchup_window_ms,
    )
    return problems


def _policy_problems(job: JobDefinition, max_payload_bytes: int) -> list[str]:
    problems = []
    if job.payload is not None:
        size = len(job.payload.encode())
        if size > max_payload_bytes:
            problems.append(
                f"payload is {size} bytes, over the {max_payload_bytes}-byte limit "
                "(the max payload setting)"
            )
    return problems + retry_problems(job.retry, job.timeout_ms) + deadline_problems(job.deadline_ms)


def literal_secrets(job: JobDefinition) -> list[str]:
    """Warnings for header values that look like credentials written out in full: they
    travel in every run request and dead letter (``secret:NAME`` would not)."""
    return [
        f"job {job.job_id}: header {name} holds a literal value; it travels in every run "
        f"request and dead letter: store it on the workers and write 'secret:NAME'"
        for name, value in job.target.headers.items()
        if sensitive(name) and secret_name(value) is None
    ]


def zone_problem(zone: str) -> str | None:
    try:
        load_zone(zone)
    except ZoneError:
        return f"unknown time zone {zone[:80]!r} (use an IANA name such as Europe/Paris)"
    return None


def loading_problems(t: JobTiming, size: int) -> list[str]:
    """The rules (``schemas.limits``) a stored definition from any producer must keep to
    be loaded, read from its timing head: its id, its timing fields and its encoded
    size (its zone and cron expression are refused by the core as it reads them)."""
    problems = name_problems("job id", t.job_id, MAX_JOB_ID)
    problems += cron_problems(t.schedule.get("cron"))
    problems += timing_problems(
        every_ms=t.schedule.get("every_ms", 0),
        jitter_ms=t.jitter_ms,
        max_catchup=t.misfire[1],
        catchup_window_ms=t.misfire[2],
    )
    if size > MAX_DEFINITION_BYTES:
        problems.append(f"definition of {size} bytes, over {MAX_DEFINITION_BYTES}")
    return problems
