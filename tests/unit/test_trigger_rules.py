"""Which event triggers the trigger processor refuses when it reads a definition (issue
38): whatever wrote it, the one check, the tenants' rule and cronstream's own topics."""

from __future__ import annotations

from dataclasses import replace

from cronstream.runtime.settings import Settings
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import EventTrigger, JobDefinition
from cronstream.streams.triggers.rules import own_topic, refusal_of

SETTINGS = Settings.from_env({"CRONSTREAM_TOPIC_PREFIX": "cronstream"})


def job(topic: str, **spec: object) -> JobDefinition:
    return job_from_spec(
        {"id": "big-orders", "target": "http", "url": "https://x.example/h", "on": topic, **spec},
        max_payload_bytes=65536,
    )


def refused(key: str, definition: JobDefinition, allow: tuple[str, ...] = ()) -> str | None:
    return refusal_of(
        SETTINGS, key, definition, allow_topics=frozenset(allow), max_payload_bytes=65536
    )


def test_an_operators_job_may_use_any_topic_but_cronstreams_own() -> None:
    assert refused("big-orders", job("orders")) is None
    assert own_topic(SETTINGS, "cronstream.history")
    assert own_topic(SETTINGS, "cronstream.t.acme.in")
    assert not own_topic(SETTINGS, "cronstreamx.history")  # a prefix, not a start of text
    why = refused("big-orders", job("cronstream.history"))
    assert why is not None
    assert "one of cronstream's own topics" in why
    assert refused("big-orders", job("cronstream.history"), ("cronstream.history",)) is None


def test_a_tenants_job_may_use_its_own_topics_only() -> None:
    mine = replace(job("acme.orders"), job_id="acme/big", tenant="acme")
    assert refused("acme/big", mine) is None
    theirs = replace(mine, on=EventTrigger(topic="acmex.orders"))
    why = refused("acme/big", theirs)
    assert why is not None
    assert "trigger policy: on.topic 'acmex.orders'" in why


def test_a_definition_the_one_check_refuses_is_refused_with_every_problem() -> None:
    bad = replace(job("orders"), on=EventTrigger(topic="orders", filter="value.x >", batch=0))
    why = refused("other-key", bad)
    assert why is not None
    assert "record key 'other-key' differs from job_id 'big-orders'" in why
    assert "on.filter:" in why
    assert "on.batch 0 is out of range" in why
