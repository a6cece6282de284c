"""Hypothesis strategies for hostile records that are still schema-valid: every value a
field's Avro type admits, biased towards what breaks parsers and arithmetic (brackets in
URLs, control and bidi characters, empty and very long strings, the edges of int and
long, instants at the ends of what a datetime holds). Used by ``tests/unit/test_fuzz_*``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from cronstream.schemas.definition.spec import KNOWN_KEYS
from cronstream.schemas.events import (
    Concurrency,
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    MisfireKind,
    MisfirePolicy,
    OnceSchedule,
    Priority,
    RetryPolicy,
    RunOutcome,
    RunRequest,
    RunStatus,
    Target,
    Trigger,
)
from cronstream.schemas.flows import FlowEvent, FlowEventKind
from cronstream.schemas.tenancy import TenantAction, TenantCommand

# Each property: about 150 records, no deadline (the first example imports and warms up),
# no shrinking (a failure is printed as found: shrinking one took minutes of `make test`).
FUZZ = settings(
    max_examples=150,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def edgy(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers in [low, high], often one of its edges or a small number."""
    edges = [
        v for v in (low, high, low + 1, high - 1, -1, 0, 1, 2, 1000, 86_400_000) if low <= v <= high
    ]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


INT32 = edgy(INT32_MIN, INT32_MAX)
INT64 = edgy(INT64_MIN, INT64_MAX)

WEIRD = [
    "",
    " ",
    "\x00",
    "\n",
    "\r\nX-Injected: 1",
    "\t",
    "\x1b[31m",
    "\u202e",
    "\ufeff",
    "é",
    "例",
    "🙂",
    "..",
    "../..",
    "a/../../etc",
    "/",
    "\\",
    "%00",
    "%zz",
    "{{x}}",
    "${x}",
    "$(id)",
    "`id`",
    "'",
    '"',
    "<script>",
    "* * * * *",
    "default",
    "acme",
    "acme/x",
    "x@y",
    "@",
    ":",
    "a:b:c",
    "null",
    "None",
    "0",
    "-1",
    "1e309",
    "NaN",
    "[]",
    "{}",
]
TEXT = st.one_of(
    st.sampled_from(WEIRD),
    st.text(max_size=30),
    st.builds(
        lambda c, n: c * n, st.sampled_from(["x", "é", "/", "\x00", "a "]), st.integers(100, 5000)
    ),
)
BRACKETED = [
    "http://[zz]/",
    "http://[::1",
    "http://[::1]:99999/",
    "http://[::1]/",
    "http://[v1.x]/",
    "http://[::ffff:127.0.0.1]/",
    "https://[",
    "http://]/",
    "http://[fe80::1%25eth0]/",
    "http://[1:2:3:4:5:6:7:8:9]/",
]
# Names that pass the id checks, mostly (what lets a record reach the checks after them).
NAMES = st.one_of(
    st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True),
    st.sampled_from(["j", "nightly", "a.b-c_d", "x" * 64]),
    TEXT,
)
URLS = st.one_of(
    st.sampled_from(BRACKETED),
    st.sampled_from(
        [
            "https://a:b@c/x",
            "http://",
            "https://",
            "ftp://x/",
            "http://%zz/",
            "http://\x00/",
            "http://例え.jp/",
            "http://a:-1/",
            "http://a:65536/",
            "http://a:port/",
            "javascript:x",
            "http://127.0.0.1:9190/-/quit",
            "http://169.254.169.254/",
            "http://user@/",
            "http://" + "a" * 3000,
            "//host/p",
            "http:///p",
            "http://a b/",
            "HTTP://X/",
            "http://a/?token=s3cr3t",
            "http://0x7f.1/",
            "https://example.com/h",
        ]
    ),
    TEXT,
)
CRONS = st.one_of(
    st.sampled_from(
        [
            "* * * * *",
            "*/0 * * * *",
            "0 0 31 2 *",
            "60 * * * *",
            "* * * * * *",
            "@hourly",
            "@reboot",
            "0 0 * * 8",
            "0 0 L * *",
            "0 0 ? * *",
            "-1 * * * *",
            "1-0 * * * *",
            "*/1000000000000 * * * *",
            "0 0 29 2 1",
            "",
            "0-59/0 * * * *",
            "5,,5 * * * *",
        ]
    ),
    TEXT,
)
ZONES = st.one_of(
    st.sampled_from(
        [
            "UTC",
            "Europe/Paris",
            "America",
            "",
            "../../etc/passwd",
            "Etc/GMT+14",
            "posix/Europe/Paris",
            "right/UTC",
            "Factory",
            "localtime",
            "Europe/Paris\x00",
            "US/Pacific-New",
            "Asia/Kolkata",
        ]
    ),
    TEXT,
)
INSTANTS = st.one_of(
    st.sampled_from(
        [
            datetime(1, 1, 1, tzinfo=UTC),
            datetime(9999, 12, 31, 23, 59, tzinfo=UTC),
            datetime(1970, 1, 1, tzinfo=UTC),
            datetime(2026, 11, 26, 10, tzinfo=UTC),
            datetime(2038, 1, 19, 3, 14, 8, tzinfo=UTC),
        ]
    ),
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
)
TARGET_TYPES = st.one_of(
    st.sampled_from(["http", "kafka", "python", "shell", "flow", "none", "HTTP", ""]), TEXT
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


ANY_TARGET = st.builds(
    Target,
    type=TARGET_TYPES,
    url=optional(URLS),
    method=st.one_of(st.sampled_from(["GET", "POST", "", "get", "CONNECT", "X\r\nY: 1"]), TEXT),
    headers=st.dictionaries(
        TEXT, st.one_of(TEXT, st.sampled_from(["secret:x", "secret:"])), max_size=4
    ),
    topic=optional(TEXT),
    callable=optional(
        st.one_of(
            st.sampled_from(["os:system", "m:f", "m:", ":f", "a.b:c.d", "builtins:eval"]), TEXT
        )
    ),
    command=optional(TEXT),
)
# Mostly a target of a known type with its own field hostile (what reaches each type's
# checks), else anything.
TARGETS = st.one_of(
    ANY_TARGET.map(lambda t: replace(t, type="http", url=t.url or "")),
    ANY_TARGET.map(lambda t: replace(t, type="http", url=t.url or "")),
    ANY_TARGET.map(lambda t: replace(t, type="kafka", topic=t.topic or "")),
    ANY_TARGET.map(lambda t: replace(t, type="python", callable=t.callable or "")),
    ANY_TARGET.map(lambda t: replace(t, type="shell", command=t.command or "")),
    ANY_TARGET,
)
SCHEDULES = st.one_of(
    st.none(),
    st.builds(CronSchedule, expression=CRONS),
    st.builds(IntervalSchedule, every_ms=INT64, anchor=INSTANTS),
    st.builds(OnceSchedule, at=INSTANTS),
)
RETRIES = st.builds(RetryPolicy, max_attempts=INT32, initial_backoff_ms=INT64, max_backoff_ms=INT64)
MISFIRES = st.builds(
    MisfirePolicy, policy=st.sampled_from(MisfireKind), max_catchup=INT32, catchup_window_ms=INT64
)
PAYLOADS = optional(st.one_of(TEXT, st.sampled_from(['{"a": 1}', "[]", "{{run_id}}", "{"])))


def jobs(
    job_id: st.SearchStrategy[str] = NAMES, tenant: st.SearchStrategy[str] = NAMES
) -> st.SearchStrategy[JobDefinition]:
    return st.builds(
        JobDefinition,
        job_id=job_id,
        target=TARGETS,
        updated_at=INSTANTS,
        tenant=tenant,
        schedule=SCHEDULES,
        timezone=ZONES,
        start_at=optional(INSTANTS),
        end_at=optional(INSTANTS),
        jitter_ms=INT64,
        paused=st.booleans(),
        payload=PAYLOADS,
        priority=st.sampled_from(Priority),
        retry=RETRIES,
        timeout_ms=INT64,
        misfire=MISFIRES,
        concurrency=st.sampled_from(Concurrency),
        deadline_ms=optional(INT64),
    )


ANY_COMMAND = st.builds(
    TenantCommand,
    command_id=NAMES,
    action=st.sampled_from(TenantAction),
    job_id=NAMES,
    issued_at=INSTANTS,
    job=optional(jobs()),
    idempotency_key=optional(TEXT),
    run_id=optional(st.one_of(TEXT, st.sampled_from(["x@", "@", "x@manual:k", "acme/x@1"]))),
    reason=optional(TEXT),
    issued_by=optional(TEXT),
)
# Half of them a PUT with a definition (what reaches the definition checks).
COMMANDS = st.one_of(
    st.builds(lambda c, j: replace(c, action=TenantAction.PUT, job=j), ANY_COMMAND, jobs()),
    ANY_COMMAND,
)


def run_requests(job_id: str = "j") -> st.SearchStrategy[RunRequest]:
    """Run requests of ``job_id`` (the key they are read under): their run ids mostly
    the job's (``j@...``), sometimes not."""
    return st.just(job_id).flatmap(
        lambda j: st.builds(
            RunRequest,
            run_id=st.one_of(TEXT.map(lambda s: f"{j}@{s}"), TEXT),
            job_id=st.just(j),
            scheduled_at=INSTANTS,
            fired_at=INSTANTS,
            target=TARGETS,
            tenant=NAMES,
            attempt=INT32,
            trigger=st.sampled_from(Trigger),
            possible_duplicate=st.booleans(),
            due_at=optional(INSTANTS),
            payload=PAYLOADS,
            priority=st.just(Priority.NORMAL),
            timeout_ms=INT64,
            retry=RETRIES,
            concurrency=st.sampled_from(Concurrency),
        )
    )


OUTCOMES = NAMES.flatmap(
    lambda job: st.builds(
        RunOutcome,
        run_id=st.one_of(TEXT.map(lambda s: f"{job}@{s}"), TEXT),
        job_id=st.just(job),
        status=st.sampled_from(RunStatus),
        scheduled_at=INSTANTS,
        recorded_at=INSTANTS,
        tenant=NAMES,
        attempt=INT32,
        trigger=st.sampled_from(Trigger),
        started_at=optional(INSTANTS),
        finished_at=optional(INSTANTS),
        duration_ms=optional(INT64),
        error=optional(TEXT),
        next_attempt_at=optional(INSTANTS),
        target_type=optional(TEXT),
        worker=optional(TEXT),
    )
)

FLOW_EVENTS = st.builds(
    FlowEvent,
    flow_id=st.one_of(st.just("etl"), TEXT),
    flow_run_id=st.one_of(st.sampled_from(["etl@1", "etl@2", "etl@1/a"]), TEXT),
    kind=st.sampled_from(FlowEventKind),
    scheduled_at=INSTANTS,
    at=INSTANTS,
    tenant=NAMES,
    run_id=optional(
        st.one_of(st.sampled_from(["etl@1/a", "etl@1/b", "etl@1/a#2", "etl@2/c"]), TEXT)
    ),
    status=optional(st.one_of(st.sampled_from([s.value for s in RunStatus]), TEXT)),
    retrying=st.booleans(),
    error=optional(TEXT),
)

# A JSON job spec (``producers.spec.job_from_spec``: the API's and YAML's path) where any
# field may hold any JSON value: lists where strings are expected, numbers as text...
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), INT64, st.floats(allow_nan=True), TEXT, URLS),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=3)),
    max_leaves=6,
)
# Every key a job spec may have (``schemas.definition.spec``), the event trigger and
# dependency ones (``on``, ``after``) too
SPEC_KEYS = sorted(KNOWN_KEYS)
SPECS = st.fixed_dictionaries(
    {"id": st.one_of(st.just("job"), JSON_VALUES)},
    optional={
        key: st.one_of(
            JSON_VALUES, st.sampled_from(["http", "1s..5m", "30s", "all", "-1s", "1e9d", "0s"])
        )
        for key in SPEC_KEYS
        if key != "id"
    },
)
