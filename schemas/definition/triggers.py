"""What makes a job run besides its schedule (docs/event-triggers.md): the
records of a topic (``on:``) or other jobs having succeeded (``after:``)::

    on:                               # or just  on: acme.orders
      topic: acme.orders              # a Kafka topic (a tenant's: one of its <tenant>.*)
      filter: 'value.amount > 100 and headers["source"] == "web"'  # default: every record
      debounce: 5m                    # at most one run per 5 minutes (per key) ...
      batch: 100                      # ... or one run per 100 matching records (per key)
      key: value.customer.id          # what groups records for debounce or batch
      fields: {order: value.id, customer: value.customer.id}  # or a list of paths;
                                      # default: the whole record is the run's payload
    after: [extract, load]            # a dependent job: runs once both succeeded for a day

``read_on`` and ``read_after`` read a spec's text (``job_from_spec``); ``trigger_problems``
is the part of the one check (``rules.problems``) that judges them, however the
definition was built. Decided here, and why:

- ``on:`` may stand beside a schedule: the job then runs on its slots and on each
  matching record, under different run ids (``JOB@<slot>``, ``JOB@evt:...``);
- ``after:`` stands alone: a dependent job has no schedule and no ``on:`` (its runs are
  its upstream jobs' days; a schedule beside it would be a second, unrelated reason
  to run, and "wait for the schedule, then for the upstream" is not what it says);
- ``debounce`` and ``batch`` exclude each other, and ``key`` needs one of them (it
  groups records for them; a filter on the record's key is ``filter: key == "x"``).

The tenancy rule (a tenant's source topic is one of its own ``<tenant>.*`` topics, its
upstream jobs its own) is ``source_problems``, applied by the admission as a policy
refusal and again by the processor that reads the topic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cronstream.schemas.definition.filters import parse_filter, parse_path
from cronstream.schemas.definition.values import parse_duration
from cronstream.schemas.errors import FilterError
from cronstream.schemas.events import EventTrigger, JobDefinition
from cronstream.schemas.limits import (
    MAX_AFTER,
    MAX_BATCH,
    MAX_JOB_ID,
    MAX_PAYLOAD_FIELDS,
    MAX_TOPIC,
    name_problems,
)
from cronstream.schemas.tenancy import OPERATORS, unqualify

ON_KEYS = ("topic", "filter", "debounce", "batch", "key", "fields")
MAX_DEBOUNCE_MS = 30 * 86_400_000
MAX_FIELD_NAME = 128
# Kafka's own rule for a topic name; "__" starts its internal topics (offsets,
# transactions), which no job reads.
_TOPIC = re.compile(r"[A-Za-z0-9._-]+\Z")


def read_on(value: Any, problems: list[str]) -> EventTrigger | None:
    """A spec's ``on:`` (a topic, or a mapping of ``ON_KEYS``) as an EventTrigger,
    noting in ``problems`` what cannot be read (``trigger_problems`` judges the rest)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = {"topic": value}
    if not isinstance(value, Mapping):
        problems.append(f"on must be a topic or a mapping of {', '.join(ON_KEYS)}")
        return None
    unknown = sorted(str(k) for k in value if k not in ON_KEYS)
    if unknown:
        problems.append(f"on: unknown keys {unknown} (known: {', '.join(ON_KEYS)})")
    given = value.get("debounce")
    debounce = None
    if given is not None and given != "":
        try:
            debounce = parse_duration(given)
        except ValueError as exc:
            problems.append(f"on.debounce: {exc}")
    return EventTrigger(
        topic=_text(value.get("topic")) or "",
        filter=_text(value.get("filter")),
        debounce_ms=debounce,
        batch=_whole(value.get("batch"), problems),
        key=_text(value.get("key")),
        payload_fields=_fields(value.get("fields"), problems),
    )


def _text(value: Any) -> str | None:
    """Text as given; a number or a list as its text, for the rules to judge and name."""
    return None if value is None else value if isinstance(value, str) else str(value)


def _whole(value: Any, problems: list[str]) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    problems.append(f"on.batch {str(value)[:40]!r} is not a whole number")
    return None


def _fields(value: Any, problems: list[str]) -> dict[str, str]:
    """``fields:`` as name -> path: a mapping as given, a path or a list of paths
    named by themselves."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return {v: v for v in value}
    if isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values()):
        return {str(k): v for k, v in value.items()}
    problems.append("on.fields must be a path, a list of paths or a mapping of name to path")
    return {}


def read_after(value: Any, problems: list[str]) -> tuple[str, ...]:
    """A spec's ``after:`` (a job id or a list of them)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    problems.append("after must be a job id or a list of job ids")
    return ()


def trigger_problems(job: JobDefinition) -> list[str]:
    """The rules on a job's ``on`` and ``after`` (part of ``rules.problems``)."""
    problems = [] if job.on is None else on_problems(job.on)
    if job.after:
        problems += after_problems(job.job_id, job.after)
        if job.schedule is not None or job.on is not None:
            problems.append(
                "a job with after: runs when the jobs it names succeeded: give it "
                "no schedule (cron, every, at) and no on:"
            )
    return problems


def topic_problems(topic: str) -> list[str]:
    if not topic:
        return ["on: a topic is required"]
    if len(topic) > MAX_TOPIC or not _TOPIC.match(topic) or topic in (".", ".."):
        return [
            f"on.topic {topic[:80]!r} is not a Kafka topic name (1-{MAX_TOPIC} letters, "
            "digits, '.', '_' and '-')"
        ]
    if topic.startswith("__"):
        return [f"on.topic {topic[:80]!r} is one of Kafka's internal topics"]
    return []


def on_problems(on: EventTrigger) -> list[str]:
    problems = topic_problems(on.topic)
    if on.filter is not None:
        problems += _parsed("on.filter", parse_filter, on.filter)
    if on.key is not None:
        problems += _parsed("on.key", parse_path, on.key)
        if on.debounce_ms is None and on.batch is None:
            problems.append(
                "on.key groups records for debounce or batch: give one of them "
                '(to run only for some keys, filter: key == "...")'
            )
    if on.debounce_ms is not None and on.batch is not None:
        problems.append("on: give debounce or batch, not both")
    if on.debounce_ms is not None and not 1 <= on.debounce_ms <= MAX_DEBOUNCE_MS:
        problems.append(
            f"on.debounce {on.debounce_ms} ms is out of range (positive, at most 30 days)"
        )
    if on.batch is not None and not 1 <= on.batch <= MAX_BATCH:
        problems.append(f"on.batch {on.batch} is out of range (1 to {MAX_BATCH:,})")
    if len(on.payload_fields) > MAX_PAYLOAD_FIELDS:
        problems.append(f"on.fields: {len(on.payload_fields)} fields, over {MAX_PAYLOAD_FIELDS}")
        return problems
    for name, path in on.payload_fields.items():
        if not name or len(name) > MAX_FIELD_NAME:
            problems.append(f"on.fields: a name must be 1-{MAX_FIELD_NAME} characters")
        problems += _parsed(f"on.fields[{name[:40]!r}]", parse_path, path)
    return problems


def _parsed(what: str, parse: Any, text: str) -> list[str]:
    try:
        parse(text)
    except FilterError as exc:
        return [f"{what}: {exc}"]
    return []


def after_problems(job_id: str, after: tuple[str, ...]) -> list[str]:
    if len(after) > MAX_AFTER:
        return [f"after names {len(after)} jobs, over {MAX_AFTER}"]
    problems = [
        p for upstream in after for p in name_problems("after: job id", upstream, MAX_JOB_ID)
    ]
    if len(set(after)) != len(after):
        problems.append("after names a job twice")
    if job_id in after:
        problems.append("after names the job itself")
    return problems


def source_problems(tenant: str, job: JobDefinition) -> list[str]:
    """Why ``tenant`` may not have ``job``'s triggers (empty: it may): its source topic
    must be one of its own (``<tenant>.*``, where its login's ACLs are), and the jobs it
    comes after its own (stored ids ``<tenant>/...``). Operators' jobs: always empty."""
    if tenant == OPERATORS:
        return []
    problems = []
    if job.on is not None and not job.on.topic.startswith(f"{tenant}."):
        problems.append(
            f"trigger policy: on.topic {job.on.topic[:80]!r} is not one of the "
            f"tenant's own topics ({tenant}.*)"
        )
    others = [a for a in job.after if unqualify(tenant, a) is None]
    if others:
        problems.append(
            f"trigger policy: after names jobs that are not the tenant's own: "
            f"{', '.join(o[:80] for o in others[:5])}"
        )
    return problems
