"""A job's triggers in its spec (schemas.definition.triggers): ``on:`` and ``after:`` read
from YAML and the client's mappings, every refusal with its reason, the same rules for a
definition built any other way, and the tenancy rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cronstream.producers.flows import flow_schedule
from cronstream.producers.spec import load_jobs_file
from cronstream.schemas.definition import job_from_spec, problems
from cronstream.schemas.definition.triggers import source_problems
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import CronSchedule, EventTrigger, JobDefinition, Target

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
BASE: dict[str, Any] = {"id": "job-1", "target": "http", "url": "https://example.com/h"}


def build(**spec: Any) -> JobDefinition:
    return job_from_spec({**BASE, **spec}, max_payload_bytes=1024, now=NOW)


def refusals(**spec: Any) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build(**spec)
    return caught.value.problems


def test_a_full_on_builds_the_event_trigger() -> None:
    job = build(
        on={
            "topic": "acme.orders",
            "filter": "value.amount > 100",
            "debounce": "5m",
            "key": "value.customer.id",
            "fields": {"order": "value.id", "who": "key"},
        }
    )
    assert job.on == EventTrigger(
        topic="acme.orders",
        filter="value.amount > 100",
        debounce_ms=300_000,
        key="value.customer.id",
        payload_fields={"order": "value.id", "who": "key"},
    )
    assert job.schedule is None  # runs only on records (and by hand)
    assert job.describe_schedule() == (
        "on acme.orders if value.amount > 100 debounce 300000ms per value.customer.id"
    )


def test_on_may_be_a_topic_alone_and_fields_a_list_of_paths() -> None:
    assert build(on="orders").on == EventTrigger(topic="orders")
    fields = build(on={"topic": "t", "fields": ["value.id", 'headers["x"]']}).on
    assert fields is not None
    assert fields.payload_fields == {"value.id": "value.id", 'headers["x"]': 'headers["x"]'}
    assert build(on={"topic": "t", "batch": 100}).on == EventTrigger(topic="t", batch=100)


def test_on_beside_a_schedule_runs_on_both() -> None:
    job = build(cron="0 3 * * *", on="orders")
    assert job.schedule == CronSchedule(expression="0 3 * * *")
    assert job.describe_schedule() == "cron 0 3 * * * + on orders"


def test_after_names_the_jobs_a_dependent_job_waits_for() -> None:
    assert build(after=["extract", "load"]).after == ("extract", "load")
    assert build(after="extract").after == ("extract",)
    assert build(after=["a", "b"]).describe_schedule() == "after a, b"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (
            {"on": {"topic": "t", "every": 5}},
            "on: unknown keys ['every'] (known: topic, filter, debounce, batch, key, fields)",
        ),
        (
            {"on": ["t"]},
            "on must be a topic or a mapping of topic, filter, debounce, batch, key, fields",
        ),
        ({"on": {"filter": "true"}}, "on: a topic is required"),
        (
            {"on": "orders/eu"},
            "on.topic 'orders/eu' is not a Kafka topic name (1-249 letters, digits, '.', '_' and '-')",
        ),
        ({"on": "t" * 250}, "is not a Kafka topic name"),
        ({"on": ".."}, "is not a Kafka topic name"),
        (
            {"on": "__consumer_offsets"},
            "on.topic '__consumer_offsets' is one of Kafka's internal topics",
        ),
        (
            {"on": {"topic": "t", "filter": "value.a =="}},
            "on.filter: expected a literal or a path, found the end at column 11",
        ),
        ({"on": {"topic": "t", "filter": "amount > 1"}}, "on.filter: unknown name 'amount'"),
        ({"on": {"topic": "t", "debounce": "soon"}}, "on.debounce: 'soon' is not a duration"),
        (
            {"on": {"topic": "t", "debounce": "0s"}},
            "on.debounce 0 ms is out of range (positive, at most 30 days)",
        ),
        ({"on": {"topic": "t", "debounce": "31d"}}, "on.debounce 2678400000 ms is out of range"),
        ({"on": {"topic": "t", "batch": 0}}, "on.batch 0 is out of range (1 to 10,000)"),
        ({"on": {"topic": "t", "batch": "10"}}, "on.batch '10' is not a whole number"),
        ({"on": {"topic": "t", "batch": True}}, "on.batch 'True' is not a whole number"),
        (
            {"on": {"topic": "t", "batch": 5, "debounce": "1m"}},
            "on: give debounce or batch, not both",
        ),
        ({"on": {"topic": "t", "key": "value.id"}}, "on.key groups records for debounce or batch"),
        (
            {"on": {"topic": "t", "batch": 5, "key": "value.id == 1"}},
            "on.key: expected the end of the path",
        ),
        (
            {"on": {"topic": "t", "fields": {"a": 1}}},
            "on.fields must be a path, a list of paths or a mapping",
        ),
        (
            {"on": {"topic": "t", "fields": {"a": "value.a[x]"}}},
            "on.fields['a']: expected a field name in quotes",
        ),
        (
            {"on": {"topic": "t", "fields": [f"value.f{i}" for i in range(65)]}},
            "on.fields: 65 fields, over 64",
        ),
        (
            {"on": {"topic": "t", "fields": {"": "value.a"}}},
            "on.fields: a name must be 1-128 characters",
        ),
        (
            {"after": ["a"], "cron": "0 3 * * *"},
            "a job with after: runs when the jobs it names succeeded: give it no schedule (cron, every, at) and no on:",
        ),
        ({"after": ["a"], "on": "t"}, "give it no schedule (cron, every, at) and no on:"),
        ({"after": ["a", "a"]}, "after names a job twice"),
        ({"after": ["job-1"]}, "after names the job itself"),
        ({"after": ["bad id"]}, "after: job id 'bad id' must be 1-200 characters"),
        ({"after": [f"j{i}" for i in range(33)]}, "after names 33 jobs, over 32"),
        ({"after": {"a": 1}}, "after must be a job id or a list of job ids"),
    ],
)
def test_a_bad_trigger_is_refused_with_its_reason(spec: dict[str, Any], reason: str) -> None:
    assert any(reason in p for p in refusals(**spec)), refusals(**spec)


def test_every_problem_of_a_trigger_is_reported_at_once() -> None:
    found = refusals(on={"topic": "a b", "filter": "(", "debounce": "0s", "batch": 0}, after=["x"])
    assert [p.split(" ")[0] for p in found] == [
        "on.topic",
        "on.filter:",
        "on:",
        "on.debounce",
        "on.batch",
        "a",  # (after with on:)
    ]


def test_a_definition_built_without_a_spec_is_judged_by_the_same_rules() -> None:
    job = JobDefinition(
        job_id="j",
        target=Target(type="http", url="https://example.com/h"),
        updated_at=NOW,
        on=EventTrigger(topic="t", filter="value.a ==", debounce_ms=5, batch=2),
    )
    found = problems(job, max_payload_bytes=1024)
    assert [p.split(":")[0] for p in found] == ["on.filter", "on"]
    assert problems(replace(job, on=None, after=("j",)), max_payload_bytes=1024) == [
        "after names the job itself"
    ]


def test_a_tenant_triggers_only_from_its_own_topics_and_jobs() -> None:
    def job(topic: str | None = None, after: tuple[str, ...] = ()) -> JobDefinition:
        on = EventTrigger(topic=topic) if topic else None
        return JobDefinition(
            job_id="acme/j",
            tenant="acme",
            target=Target(type="http"),
            updated_at=NOW,
            on=on,
            after=after,
        )

    assert source_problems("acme", job("acme.orders")) == []
    assert source_problems("acme", job(after=("acme/extract", "acme/load"))) == []
    (why,) = source_problems("acme", job("beta.orders"))
    assert why == (
        "trigger policy: on.topic 'beta.orders' is not one of the tenant's own topics (acme.*)"
    )
    assert source_problems("acme", job("acmex.orders"))  # a prefix of another name: not its own
    assert source_problems("acme", job("cronstream.history"))
    (why,) = source_problems("acme", job(after=("acme/extract", "beta/load", "load")))
    assert why.endswith("not the tenant's own: beta/load, load")
    assert source_problems("default", job("beta.orders", ("beta/load",))) == []  # operators


def test_a_jobs_file_reads_on_as_a_key_and_keeps_on_as_a_value(tmp_path: Path) -> None:
    """YAML 1.1 reads a bare ``on`` as true: as a key it is the trigger all the same."""
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "- id: on-orders\n  target: http\n  url: https://example.com/h\n  paused: on\n"
        "  on:\n    topic: acme.orders\n    filter: 'value.amount > 100'\n    batch: 10\n"
        "- id: report\n  target: http\n  url: https://example.com/h\n  after: [a, b]\n"
    )
    on_orders, report = load_jobs_file(path, max_payload_bytes=1024)
    assert on_orders.on == EventTrigger(topic="acme.orders", filter="value.amount > 100", batch=10)
    assert on_orders.paused is True
    assert report.after == ("a", "b")


def test_a_spec_key_yaml_read_as_a_boolean_is_an_unknown_key() -> None:
    with pytest.raises(SpecError) as caught:
        # YAML reads ``yes:`` or ``on:`` as a boolean key: the wrong type is the input.
        job_from_spec({**BASE, True: 1}, max_payload_bytes=1024)  # type: ignore[dict-item]
    assert caught.value.problems == ["unknown keys ['True']"]


def test_a_flow_takes_triggers_on_its_schedule_job() -> None:
    spec = {
        "id": "etl",
        "on": {"topic": "files", "filter": 'value.kind == "csv"'},
        "nodes": [{"name": "a", "target": "http", "url": "https://example.com/h"}],
    }
    job = flow_schedule(spec, max_payload_bytes=1024)
    assert (job.job_id, job.target.type, job.on) == (
        "etl",
        "flow",
        EventTrigger(topic="files", filter='value.kind == "csv"'),
    )
    after = flow_schedule({**spec, "on": None, "after": ["ingest"]}, max_payload_bytes=1024)
    assert after.after == ("ingest",)
