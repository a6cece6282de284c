"""Every event round-trips through its .avsc schema, and the schemas evolve compatibly
(a job definition, the admission's answer before and after refusal codes, a run's
output)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import fastavro
import pytest

from cronstream.schemas.avro import AVRO_DIR, parsed_schema, schema_json
from cronstream.schemas.events import (
    ControlAction,
    ControlCommand,
    CronSchedule,
    DeadLetter,
    Event,
    EventTrigger,
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
    TimerReason,
    TimerRequest,
    Trigger,
    iso,
    to_jsonable,
)
from cronstream.schemas.output import RunOutput
from cronstream.schemas.tenancy import RefusalCode, TenantAction, TenantResult

T0 = datetime(2026, 11, 22, 10, 0, 0, 123000, tzinfo=UTC)
HTTP = Target(type="http", url="https://example.com/h", headers={"X-A": "1"})
RUN = RunRequest(
    run_id="j@2026-11-22T10:00:00.123Z",
    job_id="j",
    scheduled_at=T0,
    fired_at=T0,
    target=HTTP,
    attempt=2,
    trigger=Trigger.RETRY,
    possible_duplicate=True,
    payload="{}",
    priority=Priority.HIGH,
    timeout_ms=5000,
    retry=RetryPolicy(max_attempts=4),
)

EXAMPLES: list[Event | RunOutput] = [
    JobDefinition(
        job_id="cron",
        target=HTTP,
        updated_at=T0,
        schedule=CronSchedule(expression="0 2 * * *"),
        timezone="Europe/Paris",
        start_at=T0,
        end_at=T0 + timedelta(days=1),
        jitter_ms=5,
        paused=True,
        payload='{"a":1}',
        priority=Priority.LOW,
        misfire=MisfirePolicy(policy=MisfireKind.ALL, max_catchup=4, catchup_window_ms=9),
    ),
    JobDefinition(
        job_id="every",
        target=Target(type="kafka", topic="out"),
        updated_at=T0,
        schedule=IntervalSchedule(every_ms=60_000, anchor=T0),
    ),
    JobDefinition(
        job_id="once",
        target=Target(type="python", callable="m:f"),
        updated_at=T0,
        schedule=OnceSchedule(at=T0),
    ),
    JobDefinition(job_id="manual", target=Target(type="shell", command="true"), updated_at=T0),
    JobDefinition(
        job_id="on-orders",
        target=HTTP,
        updated_at=T0,
        schedule=CronSchedule(expression="0 3 * * *"),
        on=EventTrigger(
            topic="acme.orders",
            filter='value.amount > 100 and headers["src"] == "web"',
            debounce_ms=60_000,
            key="value.customer.id",
            payload_fields={"order": "value.id", "who": "key"},
        ),
    ),
    JobDefinition(
        job_id="batched", target=HTTP, updated_at=T0, on=EventTrigger(topic="clicks", batch=500)
    ),
    JobDefinition(job_id="report", target=HTTP, updated_at=T0, after=("extract", "load")),
    RunRequest(
        run_id="on-orders@evt:acme.orders:3:1042",
        job_id="on-orders",
        scheduled_at=T0,
        fired_at=T0,
        target=HTTP,
        trigger=Trigger.EVENT,
        payload='{"order":7}',
    ),
    RunOutcome(
        run_id="report@dep:2026-11-22",
        job_id="report",
        status=RunStatus.SUCCEEDED,
        scheduled_at=T0,
        recorded_at=T0,
        trigger=Trigger.DEPENDENCY,
    ),
    RUN,
    RunOutcome(
        run_id=RUN.run_id,
        job_id="j",
        status=RunStatus.FAILED,
        scheduled_at=T0,
        recorded_at=T0,
        attempt=2,
        started_at=T0,
        finished_at=T0,
        duration_ms=12,
        error="boom",
        next_attempt_at=T0,
        target_type="http",
        worker="w1",
    ),
    TimerRequest(
        timer_id=f"{RUN.run_id}#2",
        job_id="j",
        due_at=T0,
        reason=TimerReason.RETRY,
        created_at=T0,
        run=RUN,
    ),
    ControlCommand(
        command_id="c1",
        action=ControlAction.CANCEL,
        run_id=RUN.run_id,
        job_id="j",
        issued_at=T0,
        reason="operator",
    ),
    DeadLetter(
        reason="bad bytes",
        stage="scheduler",
        source_topic="t",
        source_partition=3,
        source_offset=42,
        dead_at=T0,
        source_key=b"k",
        source_value=b"\x00\x01",
    ),
    RunOutput(
        run_id=RUN.run_id,
        job_id="j",
        tenant="acme",
        attempt=2,
        status="FAILED",
        scheduled_at=T0,
        recorded_at=T0,
        output="line 1\nexit 3 ✗\n",
        dropped="start",
        target_type="shell",
        worker="w1",
    ),
]


def write(schema: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    return buf.getvalue()


def read(data: bytes, writer: Any, reader: Any) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), writer, reader, return_record_name=True)


@pytest.mark.parametrize(
    "event", EXAMPLES, ids=lambda e: f"{type(e).__name__}-{getattr(e, 'key', lambda: '')()}"
)
def test_every_event_round_trips_through_its_schema(event: Event | RunOutput) -> None:
    schema = parsed_schema(event.AVRO_NAME)
    decoded = type(event).from_avro(read(write(schema, event.to_avro()), schema, schema))
    assert decoded == event


def test_schemas_are_self_contained_for_the_registry() -> None:
    for path in AVRO_DIR.glob("*.avsc"):
        fullname = path.stem
        text = schema_json(fullname)
        fastavro.parse_schema(json.loads(text))  # no dangling names
        assert json.loads(text)["name"] == fullname.split(".")[-1]


def test_keys_and_headers_are_readable_text() -> None:
    headers = dict(RUN.headers())
    assert RUN.key() == "j"
    assert headers["run_id"] == RUN.run_id.encode()
    assert headers["scheduled_at"] == iso(T0).encode() == b"2026-11-22T10:00:00.123Z"
    assert headers["attempt"] == b"2"
    assert headers["possible_duplicate"] == b"true"
    for event in EXAMPLES:
        for name, value in event.headers():
            value.decode("utf-8")
            assert name.isascii()


OLD_JOB_SCHEMA = {
    # JobDefinition as a first release might have had it: no jitter, misfire, start/end.
    "type": "record",
    "name": "JobDefinition",
    "namespace": "cronstream",
    "fields": [
        {"name": "job_id", "type": "string"},
        {"name": "tenant", "type": "string", "default": "default"},
        {
            "name": "schedule",
            "default": None,
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "CronSchedule",
                    "fields": [{"name": "expression", "type": "string"}],
                },
            ],
        },
        {"name": "timezone", "type": "string", "default": "UTC"},
        {"name": "paused", "type": "boolean", "default": False},
        {"name": "target", "type": json.loads(schema_json("cronstream.Target"))},
        {"name": "payload", "type": ["null", "string"], "default": None},
        {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def test_records_written_with_an_older_schema_read_with_defaults() -> None:
    old = fastavro.parse_schema(OLD_JOB_SCHEMA)
    record = {
        "job_id": "legacy",
        "tenant": "t",
        "schedule": ("cronstream.CronSchedule", {"expression": "* * * * *"}),
        "timezone": "UTC",
        "paused": False,
        "target": HTTP.to_avro(),
        "payload": None,
        "updated_at": T0,
    }
    job = JobDefinition.from_avro(
        read(write(old, record), old, parsed_schema(JobDefinition.AVRO_NAME))
    )
    assert job.jitter_ms == 0
    assert job.misfire == MisfirePolicy()
    assert job.retry == RetryPolicy()
    assert job.priority is Priority.NORMAL
    assert job.schedule == CronSchedule(expression="* * * * *")


def test_records_written_with_todays_schema_read_with_the_older_one() -> None:
    old = fastavro.parse_schema(OLD_JOB_SCHEMA)
    job = EXAMPLES[0]
    assert isinstance(job, JobDefinition)
    current = parsed_schema(JobDefinition.AVRO_NAME)
    back = read(write(current, job.to_avro()), current, old)
    assert back["job_id"] == "cron"
    assert "jitter_ms" not in back


REFUSED = TenantResult(
    command_id="c1",
    job_id="j",
    accepted=False,
    recorded_at=T0,
    source_offset=7,
    reason="job quota: ...",
    action=TenantAction.PUT,
    code=RefusalCode.QUOTA,
)


def _old_result_schema() -> dict[str, Any]:
    """TenantResult as it was before refusal codes: no ``code``."""
    current = json.loads(schema_json(TenantResult.AVRO_NAME))
    return {**current, "fields": [f for f in current["fields"] if f["name"] != "code"]}


def test_a_refusal_round_trips_with_its_code() -> None:
    schema = parsed_schema(TenantResult.AVRO_NAME)
    back = TenantResult.from_avro(read(write(schema, REFUSED.to_avro()), schema, schema))
    assert back == REFUSED


def test_answers_written_before_refusal_codes_read_without_one() -> None:
    old = fastavro.parse_schema(_old_result_schema())
    record = {k: v for k, v in REFUSED.to_avro().items() if k != "code"}
    current = parsed_schema(TenantResult.AVRO_NAME)
    back = TenantResult.from_avro(read(write(old, record), old, current))
    assert back == replace(REFUSED, code=None)


def test_answers_with_a_code_read_with_the_schema_before_codes() -> None:
    old = fastavro.parse_schema(_old_result_schema())
    current = parsed_schema(TenantResult.AVRO_NAME)
    back = read(write(current, REFUSED.to_avro()), current, old)
    assert (back["reason"], "code" in back) == ("job quota: ...", False)


def test_a_refusal_code_added_later_reads_as_invalid() -> None:
    newer = json.loads(schema_json(TenantResult.AVRO_NAME))
    code = next(f for f in newer["fields"] if f["name"] == "code")
    enum = code["type"][1]
    enum["symbols"] = [*enum["symbols"], "overloaded"]
    writer = fastavro.parse_schema(newer)
    record = {**REFUSED.to_avro(), "code": "overloaded"}
    current = parsed_schema(TenantResult.AVRO_NAME)
    back = TenantResult.from_avro(read(write(writer, record), writer, current))
    assert back.code is RefusalCode.INVALID  # the enum's default: the API's 422


def test_events_render_as_json() -> None:
    rendered = to_jsonable(EXAMPLES[1])
    assert rendered["schedule"] == {"kind": "interval", "every_ms": 60_000, "anchor": iso(T0)}
    assert "AVRO_NAME" not in rendered
    json.dumps([to_jsonable(e) for e in EXAMPLES])


# -- event triggers: a job's triggers (``on``, ``after``) and two Trigger symbols -------
TRIGGERED = next(e for e in EXAMPLES if isinstance(e, JobDefinition) and e.on is not None)
assert TRIGGERED is EXAMPLES[4]
assert TRIGGERED.on is not None


def _without_triggers() -> dict[str, Any]:
    """JobDefinition as it was before event triggers: no ``on``, no ``after``."""
    current = json.loads(schema_json(JobDefinition.AVRO_NAME))
    return {**current, "fields": [f for f in current["fields"] if f["name"] not in ("on", "after")]}


def _before_event_triggers(fullname: str) -> dict[str, Any]:
    """A schema whose Trigger enum is the one before event triggers (no EVENT, DEPENDENCY)."""
    schema: dict[str, Any] = json.loads(schema_json(fullname))
    (trigger,) = [f for f in schema["fields"] if f["name"] == "trigger"]
    trigger["type"]["symbols"] = ["SCHEDULE", "CATCHUP", "RETRY", "MANUAL", "FLOW", "DEADLINE"]
    return schema


def test_the_triggers_are_new_fields_with_defaults_before_updated_at() -> None:
    fields = json.loads(schema_json(JobDefinition.AVRO_NAME))["fields"]
    names = [f["name"] for f in fields]
    # schemas.timing cuts updated_at off the end of a stored definition: it stays last
    assert names[-3:] == ["on", "after", "updated_at"]
    assert [f["default"] for f in fields[-3:-1]] == [None, []]


def test_a_definition_written_before_triggers_reads_without_any() -> None:
    old = fastavro.parse_schema(_without_triggers())
    record = {k: v for k, v in TRIGGERED.to_avro().items() if k not in ("on", "after")}
    current = parsed_schema(JobDefinition.AVRO_NAME)
    job = JobDefinition.from_avro(read(write(old, record), old, current))
    assert job == replace(TRIGGERED, on=None)
    assert job.after == ()


def test_a_triggered_definition_reads_with_the_schema_before_triggers() -> None:
    """A scheduler older than event triggers loads the job by its schedule and ignores
    ``on``/``after`` (BACKWARD on the registry; this direction is what the enum's and
    the fields' defaults give older readers)."""
    old = fastavro.parse_schema(_without_triggers())
    current = parsed_schema(JobDefinition.AVRO_NAME)
    back = read(write(current, TRIGGERED.to_avro()), current, old)
    assert (back["job_id"], "on" in back, "after" in back) == ("on-orders", False, False)


def _example_run(name: str, *triggers: Trigger) -> RunRequest | RunOutcome:
    """The first run request or outcome of ``EXAMPLES`` with the schema ``name`` and one of
    ``triggers``."""
    return next(
        e
        for e in EXAMPLES
        if isinstance(e, RunRequest | RunOutcome) and name == e.AVRO_NAME and e.trigger in triggers
    )


@pytest.mark.parametrize("name", [RunRequest.AVRO_NAME, RunOutcome.AVRO_NAME])
def test_an_event_run_read_by_a_reader_before_the_new_symbols_is_a_scheduled_one(
    name: str,
) -> None:
    old = fastavro.parse_schema(_before_event_triggers(name))
    current = parsed_schema(name)
    event = _example_run(name, Trigger.EVENT, Trigger.DEPENDENCY)
    back = read(write(current, event.to_avro()), current, old)
    assert back["trigger"] == "SCHEDULE"  # the enum's default
    assert back["run_id"] == event.run_id


@pytest.mark.parametrize("name", [RunRequest.AVRO_NAME, RunOutcome.AVRO_NAME])
def test_runs_written_before_the_new_symbols_read_unchanged(name: str) -> None:
    old = fastavro.parse_schema(_before_event_triggers(name))
    current = parsed_schema(name)
    record = _example_run(name, Trigger.RETRY, Trigger.SCHEDULE).to_avro()
    assert read(write(old, record), old, current)["trigger"] == record["trigger"]


def _enums() -> list[type[StrEnum]]:
    """Every StrEnum of the wire contract that has an .avsc file of its own."""
    from cronstream.schemas import events, flows, tenancy

    found = []
    for module in (events, flows, tenancy):
        for value in vars(module).values():
            enum = isinstance(value, type) and issubclass(value, StrEnum) and value is not StrEnum
            if enum and (AVRO_DIR / f"cronstream.{value.__name__}.avsc").exists():
                found.append(value)
    return found


@pytest.mark.parametrize("enum", _enums(), ids=lambda e: e.__name__)
def test_python_enums_list_their_avro_symbols_in_order(enum: type[StrEnum]) -> None:
    """cronstream.schemas.templates writes a trigger by its index in the Python enum: a symbol
    added to one side only, or in another place, would write another trigger."""
    symbols = json.loads(schema_json(f"cronstream.{enum.__name__}"))["symbols"]
    assert [m.value for m in enum] == symbols


def test_a_run_output_is_its_own_record_and_its_optional_fields_have_defaults() -> None:
    """docs/run-output.md: the output is a record of its own, not a field of the outcome
    that every reader of history decodes; what a later writer may leave out reads back
    with its default."""
    assert "output" not in {
        f["name"] for f in json.loads(schema_json(RunOutcome.AVRO_NAME))["fields"]
    }
    current = json.loads(schema_json(RunOutput.AVRO_NAME))
    required = [f for f in current["fields"] if "default" not in f]
    assert [f["name"] for f in required] == [
        "run_id",
        "job_id",
        "status",
        "scheduled_at",
        "recorded_at",
        "output",
    ]
    oldest = fastavro.parse_schema({**current, "fields": required})
    record = {
        "run_id": "j@1",
        "job_id": "j",
        "status": "SUCCEEDED",
        "scheduled_at": T0,
        "recorded_at": T0,
        "output": "ok",
    }
    back = RunOutput.from_avro(
        read(write(oldest, record), oldest, parsed_schema(RunOutput.AVRO_NAME))
    )
    assert back == RunOutput(
        run_id="j@1", job_id="j", status="SUCCEEDED", scheduled_at=T0, recorded_at=T0, output="ok"
    )
    assert (back.tenant, back.attempt, back.dropped, back.worker) == ("default", 1, None, None)
