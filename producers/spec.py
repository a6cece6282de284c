"""Turn a job spec (CLI flags or a jobs.yaml entry) into a validated JobDefinition.

A spec is a plain mapping with the same names as the CLI flags::

    id: nightly-report
    cron: "0 2 * * *"            # or every: 15m [anchor: ISO8601, default the Unix epoch]
                                  # or at: ISO8601 (once); none of them: manual runs only
    tz: Europe/Paris
    target: http                  # a target type: http | kafka | python | shell | flow
                                  # or a plugin's (schemas.targets, docs/targets.md)
    url: https://example.com/hook # http; or topic: (kafka), callable: mod:func (python),
                                  # command: (shell)
    method: POST                  # http, optional
    headers: {X-Team: billing}    # http, optional
    payload: {"report": "daily"}  # a mapping/list is stored as JSON text
    priority: normal              # high | normal | low
    max_attempts: 3
    backoff: 1s..5m
    timeout: 30s
    misfire: once                 # skip | once | all
    concurrency: allow            # allow | forbid | replace | queue (another run executing)
    catchup: 10                   # misfire=all: at most this many missed slots run
    catchup_window: 1h
    jitter: 0s
    start: ISO8601, end: ISO8601, paused: false, tenant: default

validate_job() checks a JobDefinition built any other way (the Python client) by the same
rules. Every problem found is reported at once in one SpecError.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import yaml

from producers.errors import SpecError
from schemas.errors import CronError, ZoneError
from schemas.events import (
    EPOCH,
    Concurrency,
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    MisfireKind,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RetryPolicy,
    Schedule,
    Target,
    utc_now,
)
from schemas.limits import (
    MAX_INTERVAL_MS,
    MAX_JOB_ID,
    MAX_TENANT,
    deadline_problems,
    name_problems,
    retry_problems,
    timing_problems,
)
from schemas.redact import secret_name, sensitive
from schemas.targets import target_problems
from streams.core.cron import parse_cron
from streams.core.zones import load_zone, wall_instant_ms

T = TypeVar("T")
MIN_INTERVAL_MS = 1000
MAX_DURATION_MS = MAX_INTERVAL_MS
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
KNOWN_KEYS = frozenset(
    {
        "id", "cron", "every", "anchor", "at", "tz", "target", "url", "method", "headers",
        "topic", "callable", "command", "payload", "priority", "max_attempts", "backoff",
        "timeout", "misfire", "concurrency", "catchup", "catchup_window", "jitter", "start",
        "end", "paused", "tenant", "deadline",
    }
)  # fmt: skip


def parse_duration(text: str | int | float) -> int:
    """'90s', '1h30m', '500ms', '2d' (or a bare number of seconds) -> milliseconds."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, int | float):
        if not 0 <= text * 1000 <= MAX_DURATION_MS:  # also NaN
            raise ValueError(f"{text!r} is negative or longer than 100 years")
        return int(text * 1000)
    if not isinstance(text, str):
        raise ValueError(f"{str(text)[:80]!r} is not a duration")
    raw = text.strip().lower().replace(" ", "")
    if raw.isdigit() and len(raw) < 20:
        return parse_duration(int(raw))
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(raw):
        if match.start() != pos:
            break
        total += float(match[1]) * _UNIT_MS[match[2]]
        pos = match.end()
    if pos != len(raw) or not raw:
        raise ValueError(f"{text!r} is not a duration (use e.g. 500ms, 30s, 5m, 1h30m, 2d)")
    if total > MAX_DURATION_MS:
        raise ValueError(f"{text!r} is longer than any limit (100 years)")
    return int(total)


def parse_instant(text: str | datetime, zone: str = "UTC") -> datetime:
    """ISO 8601; a time without an offset is a wall time in ``zone``, read by the one
    wall-time rule (``streams.core.cron.wall_instant_ms``): in a spring-forward gap it
    is the transition instant, in a repeated hour its first occurrence."""
    if isinstance(text, datetime):
        value = text
    elif not isinstance(text, str):
        raise ValueError(f"{str(text)[:80]!r} is not an ISO 8601 instant")
    else:
        try:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"{text!r} is not an ISO 8601 instant (e.g. 2026-12-01T09:30:00+01:00)"
            ) from None
    try:
        if value.tzinfo is None:
            ms = wall_instant_ms(value.replace(microsecond=0), load_zone(zone))
            value = datetime.fromtimestamp(ms / 1000, UTC).replace(
                microsecond=value.microsecond // 1000 * 1000
            )
        value = value.astimezone(UTC)
    except (OverflowError, OSError):
        raise ValueError(f"{text!s} is out of the range of instants cronstream keeps") from None
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def parse_backoff(text: str) -> tuple[int, int]:
    """'1s..5m' -> (1000, 300000)."""
    low, sep, high = str(text).partition("..")
    if not sep:
        raise ValueError(f"{text!r} is not a backoff range (use MIN..MAX, e.g. 1s..5m)")
    return parse_duration(low), parse_duration(high)


def _check_zone(zone: str) -> str | None:
    try:
        load_zone(zone)
    except ZoneError:
        return f"unknown time zone {zone[:80]!r} (use an IANA name such as Europe/Paris)"
    return None


def _payload_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def job_from_spec(
    spec: Mapping[str, Any], *, max_payload_bytes: int, now: datetime | None = None
) -> JobDefinition:
    """Build and validate a JobDefinition from a spec; raises SpecError listing every problem."""
    read = _SpecReader(spec)
    job_id = str(spec.get("id") or "")
    unknown = sorted(set(spec) - KNOWN_KEYS)
    if unknown:
        read.problems.append(f"unknown keys {unknown}")
    zone = read.zone()
    schedule = read.schedule(zone)
    target = read.target()
    priority = read.choice("priority", Priority, Priority.NORMAL, "high, normal, low")
    backoff = read.parsed("backoff", parse_backoff, spec.get("backoff") or "1s..5m") or (
        1000, 300_000,
    )  # fmt: skip
    max_attempts = read.whole("max_attempts", 3)
    misfire_kind = read.choice("misfire", MisfireKind, MisfireKind.ONCE, "skip, once, all")
    catchup = read.whole("catchup", 10)
    concurrency = read.choice("concurrency", Concurrency, Concurrency.ALLOW,
                              "allow, forbid, replace, queue")  # fmt: skip
    start = read.instant("start", zone)
    end = read.instant("end", zone)
    paused = read.flag("paused")
    given = spec.get("deadline")
    deadline = None if given in (None, "") else read.parsed("deadline", parse_duration, given)
    job = JobDefinition(
        job_id=job_id,
        tenant=str(spec.get("tenant") or "default"),
        schedule=schedule,
        timezone=zone,
        start_at=start,
        end_at=end,
        jitter_ms=read.duration("jitter", 0, 0),
        paused=paused,
        target=target,
        payload=_payload_text(spec.get("payload")),
        priority=priority,
        retry=RetryPolicy(
            max_attempts=max_attempts, initial_backoff_ms=backoff[0], max_backoff_ms=backoff[1]
        ),
        timeout_ms=read.duration("timeout", "30s", 30_000),
        misfire=MisfirePolicy(
            policy=misfire_kind,
            max_catchup=catchup,
            catchup_window_ms=read.duration("catchup_window", "1h", 3_600_000),
        ),
        concurrency=concurrency,
        deadline_ms=deadline,
        updated_at=now or utc_now(),
    )
    problems = [*read.problems, *job_problems(job, max_payload_bytes=max_payload_bytes)]
    if problems:
        raise SpecError(f"job {job_id or '(no id)'}", problems)
    return job


E = TypeVar("E", bound=StrEnum)


class _SpecReader:
    """Reads a spec's fields, noting every problem instead of stopping at the first
    (a field that cannot be read takes its default, so the rest are still checked)."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.problems: list[str] = []

    def parsed(self, what: str, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except ValueError as exc:
            self.problems.append(f"{what}: {exc}")
            return None

    def zone(self) -> str:
        zone = str(self.spec.get("tz") or "UTC")
        problem = _check_zone(zone)
        if problem:
            self.problems.append(problem)
            return "UTC"
        return zone

    def schedule(self, zone: str) -> Schedule | None:
        spec = self.spec
        chosen = [k for k in ("cron", "every", "at") if spec.get(k) not in (None, "")]
        if len(chosen) > 1:
            self.problems.append(f"give one schedule, not {' and '.join(chosen)}")
        elif chosen == ["cron"]:
            try:
                return CronSchedule(expression=parse_cron(str(spec["cron"])).text)
            except CronError as exc:
                self.problems.append(str(exc))
        elif chosen == ["every"]:
            every = self.parsed("every", parse_duration, spec["every"])
            anchor = self.instant("anchor", zone) if spec.get("anchor") else EPOCH
            if every is not None and anchor is not None:
                return IntervalSchedule(every_ms=every, anchor=anchor)
        elif chosen == ["at"]:
            at = self.parsed("at", parse_instant, spec["at"], zone)
            if at is not None:
                return OnceSchedule(at=at)
        return None

    def target(self) -> Target:
        spec = self.spec
        headers = spec.get("headers") or {}
        if not isinstance(headers, Mapping) or not all(
            isinstance(v, str | int | float) for v in headers.values()
        ):
            self.problems.append("headers must be a mapping of name to text value")
            headers = {}
        return Target(
            type=str(spec.get("target") or ""),
            url=self.text("url"),
            method=str(spec.get("method") or "POST").upper(),
            headers={str(k): str(v) for k, v in headers.items()},
            topic=self.text("topic"),
            callable=self.text("callable"),
            command=self.text("command"),
        )

    def text(self, key: str) -> str | None:
        """A field that must be text when given (a list or a mapping is a problem, not
        a crash further on)."""
        value = self.spec.get(key)
        if value is None or isinstance(value, str):
            return value
        self.problems.append(f"{key} must be text, not {type(value).__name__}")
        return None

    def choice(self, key: str, enum: type[E], default: E, names: str) -> E:
        text = str(self.spec.get(key) or default.value).upper()
        if text not in enum.__members__:
            self.problems.append(f"{key} {text.lower()!r} is not one of {names}")
            return default
        return enum[text]

    def whole(self, key: str, default: int) -> int:
        value = self.spec.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            self.problems.append(f"{key} {value!r} is not a whole number")
            return default
        return value

    def flag(self, key: str) -> bool:
        value = self.spec.get(key, False)
        if not isinstance(value, bool):
            self.problems.append(f"{key} {value!r} is not true or false")
            return False
        return value

    def instant(self, key: str, zone: str) -> datetime | None:
        if not self.spec.get(key):
            return None
        return self.parsed(key, parse_instant, self.spec[key], zone)

    def duration(self, key: str, absent: str | int, fallback: int) -> int:
        """``key`` as milliseconds (``absent`` when not given; ``fallback`` when it
        cannot be read, with the problem noted). An explicit 0 stays 0 (and is judged
        by the rules), never the default."""
        given = self.spec.get(key)
        value = self.parsed(key, parse_duration, absent if given in (None, "") else given)
        return fallback if value is None else value


def job_problems(job: JobDefinition, *, max_payload_bytes: int) -> list[str]:
    """Every rule a JobDefinition must keep, however it was built."""
    return [
        *_identity_problems(job),
        *_schedule_problems(job),
        *target_problems(job.target),
        *_policy_problems(job, max_payload_bytes),
    ]


def _identity_problems(job: JobDefinition) -> list[str]:
    return [*name_problems("job id", job.job_id, MAX_JOB_ID),
            *name_problems("tenant", job.tenant, MAX_TENANT)]  # fmt: skip


def _schedule_problems(job: JobDefinition) -> list[str]:
    problems = []
    zone_problem = _check_zone(job.timezone)
    if zone_problem:
        problems.append(zone_problem)
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
        cron=schedule.expression if isinstance(schedule, CronSchedule) else None,
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
                "(CRONSTREAM_MAX_PAYLOAD_BYTES)"
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


def yaml_entries(path: Path, kind: str) -> list[dict[str, Any]]:
    """The entries of a YAML file of ``kind`` ("jobs", "flows"): a list, or a mapping
    with a ``kind`` list; SpecError when it cannot be read or is neither."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(str(path), [f"cannot read: {exc}"]) from None
    entries = doc.get(kind) if isinstance(doc, dict) else doc
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SpecError(str(path), [f"expected a list of {kind} (or '{kind}:' with a list)"])
    return entries


def load_jobs_file(path: Path, *, max_payload_bytes: int) -> list[JobDefinition]:
    """Read a jobs YAML file (a list, or a mapping with a 'jobs' list) and validate all."""
    entries = yaml_entries(path, "jobs")
    jobs, problems = [], []
    for index, entry in enumerate(entries):
        try:
            jobs.append(job_from_spec(entry, max_payload_bytes=max_payload_bytes))
        except SpecError as exc:
            problems.append(f"entry {index + 1} ({exc.subject}): {'; '.join(exc.problems)}")
    if problems:
        raise SpecError(str(path), problems)
    return jobs
