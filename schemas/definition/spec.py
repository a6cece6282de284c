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
    on: {topic: acme.orders, filter: 'value.amount > 100'}  # runs on a topic's records
    after: [extract, load]        # or: runs once these jobs succeeded for a day
                                  # (schemas.definition.triggers)

``problems`` (``schemas.definition.rules``) checks a JobDefinition built any other way
(the Python client, a tenant's command) by the same rules. Every problem found is
reported at once in one SpecError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from cronstream.schemas.definition.cron import parse_cron
from cronstream.schemas.definition.rules import problems, zone_problem
from cronstream.schemas.definition.triggers import read_after, read_on
from cronstream.schemas.definition.values import parse_backoff, parse_duration, parse_instant
from cronstream.schemas.errors import CronError, SpecError
from cronstream.schemas.events import (
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

T = TypeVar("T")
# A job's target part: what it runs and how (a flow's node says these too).
TARGET_KEYS = frozenset(
    {
        "target",
        "url",
        "method",
        "headers",
        "topic",
        "callable",
        "command",
        "payload",
        "priority",
        "max_attempts",
        "backoff",
        "timeout",
    }
)
KNOWN_KEYS = TARGET_KEYS | frozenset(
    {
        "id",
        "cron",
        "every",
        "anchor",
        "at",
        "tz",
        "misfire",
        "concurrency",
        "catchup",
        "catchup_window",
        "jitter",
        "start",
        "end",
        "paused",
        "tenant",
        "deadline",
        "on",
        "after",
    }
)


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
    unknown = sorted(str(k) for k in spec if k not in KNOWN_KEYS)  # YAML: keys of any type
    if unknown:
        read.problems.append(f"unknown keys {unknown}")
    zone = read.zone()
    schedule = read.schedule(zone)
    target = read.target()
    priority = read.choice("priority", Priority, Priority.NORMAL, "high, normal, low")
    backoff = read.parsed("backoff", parse_backoff, spec.get("backoff") or "1s..5m") or (
        1000,
        300_000,
    )
    max_attempts = read.whole("max_attempts", 3)
    misfire_kind = read.choice("misfire", MisfireKind, MisfireKind.ONCE, "skip, once, all")
    catchup = read.whole("catchup", 10)
    concurrency = read.choice(
        "concurrency", Concurrency, Concurrency.ALLOW, "allow, forbid, replace, queue"
    )
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
        on=read_on(spec.get("on"), read.problems),
        after=read_after(spec.get("after"), read.problems),
        updated_at=now or utc_now(),
    )
    found = [*read.problems, *problems(job, max_payload_bytes=max_payload_bytes)]
    if found:
        raise SpecError(f"job {job_id or '(no id)'}", found)
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
        problem = zone_problem(zone)
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
