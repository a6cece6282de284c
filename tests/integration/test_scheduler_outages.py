"""The scheduler processor through outages of what it depends on (found by the chaos
suite, ``make chaos``): a registry that is down when a definition arrives written with
a schema id the processor has not seen yet must not stop it (before: the
``RegistryUnavailable`` escaped ``step`` and the process died)."""

from __future__ import annotations

import io
import json
import time
from dataclasses import replace

import fastavro
import pytest

from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    EPOCH,
    IntervalSchedule,
    JobDefinition,
    Priority,
    Target,
    utc_now,
)
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.processor import Scheduler
from tests.integration.helpers import Outage, read_topic

pytestmark = pytest.mark.integration


def every_second(job_id: str) -> JobDefinition:
    return JobDefinition(
        job_id=job_id,
        target=Target(type="http", url="https://e.x/h"),
        updated_at=utc_now(),
        schedule=IntervalSchedule(every_ms=1000, anchor=EPOCH),
    )


def evolved_encoder(settings: Settings) -> tuple[int, object]:
    """A newer JobDefinition schema (one more optional field), registered on the jobs
    subject now: its id is one no processor has looked up yet."""
    schema = json.loads(schema_json(JobDefinition.AVRO_NAME))
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    with registry_client(settings, writer=True) as registry:
        schema_id = registry.register(f"{Topics(settings).jobs}-value", json.dumps(schema))
    return schema_id, fastavro.parse_schema(schema)


def drive(processor: Scheduler, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        processor.step()


def fired(settings: Settings, job_id: str, since_ms: int = 0) -> int:
    topic = Topics(settings).runs(Priority.NORMAL)
    return sum(
        1
        for r in read_topic(settings, topic)
        if r.headers.get("job_id") == job_id and r.timestamp_ms >= since_ms
    )


def test_a_definition_needing_the_registry_while_it_is_down_waits_and_loaded_jobs_keep_firing(
    ns: Settings,
) -> None:
    outage = Outage("127.0.0.1", ns.registry_port)
    through = replace(ns, registry_url=f"http://127.0.0.1:{outage.port}/apis/ccompat/v7")
    publisher = Publisher(ns)
    publisher.publish(Topics(ns).jobs, every_second("loaded"))
    publisher.flush()
    schema_id, evolved = evolved_encoder(ns)
    processor = Scheduler(
        through.as_role("scheduler"), SchedulerConfig(group=f"{ns.topic_prefix}.scheduler")
    )
    try:
        drive(processor, 8)  # assigned, loaded, live
        outage.down()
        down_at = int(time.time() * 1000)
        buf = io.BytesIO()
        buf.write(b"\x00" + schema_id.to_bytes(4, "big"))
        fastavro.schemaless_writer(buf, evolved, {**every_second("new").to_avro(), "note": "v2"})
        publisher.produce_raw(Topics(ns).jobs, "new", buf.getvalue(), [])
        publisher.flush()
        drive(processor, 5)  # before: RegistryUnavailable escaped step()
        up_at = int(time.time() * 1000)
        outage.up()
        drive(processor, 6)  # the backoff is at most 2 s by now
    finally:
        processor.close()
        publisher.close()
        outage.down()
    assert fired(ns, "loaded", down_at) - fired(ns, "loaded", up_at) >= 4, "loaded jobs stopped"
    assert fired(ns, "new", up_at) >= 3, "the held definition was not applied"
    assert fired(ns, "new") == fired(ns, "new", up_at)
    letters = read_topic(ns, Topics(ns).dlq)
    assert letters == [], "a good definition was dead-lettered for want of the registry"
