"""Partitioning and the schema registry, against the real broker and registry."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import uuid

import fastavro
import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Message

from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.kafka.security import aiokafka_security
from cronstream.runtime.settings import Settings
from cronstream.schemas.avro import schema_json
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import JobDefinition, MisfirePolicy, Target, utc_now
from cronstream.schemas.ids import partition_for
from cronstream.schemas.output import RunOutput
from cronstream.schemas.registry import RegistryClient
from cronstream.schemas.serde import Codec
from tests.unit.test_avro_contract import EXAMPLES, OLD_JOB_SCHEMA

pytestmark = pytest.mark.integration

KEYS = [f"job-{i}" for i in range(200)] + ["nightly-report", "α-unicode", "a:b/c.d-e_f"]


def test_confluent_and_aiokafka_producers_put_a_key_on_the_same_partition(ns: Settings) -> None:
    topic = Topics(ns).jobs  # 12 partitions
    confluent_partitions: dict[str, int] = {}

    def delivered(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        confluent_partitions[msg.key().decode()] = msg.partition()

    producer = kafka_producer(ns)
    for key in KEYS:
        producer.produce(topic, value=b"c", key=key.encode(), on_delivery=delivered)
    assert producer.flush(30) == 0

    async def aiokafka_partitions() -> dict[str, int]:
        aio = AIOKafkaProducer(bootstrap_servers=ns.bootstrap_servers, **aiokafka_security(ns))
        await aio.start()
        try:
            out = {}
            for key in KEYS:
                meta = await aio.send_and_wait(topic, value=b"a", key=key.encode())
                out[key] = meta.partition
            return out
        finally:
            await aio.stop()

    aio_partitions = asyncio.run(aiokafka_partitions())
    assert confluent_partitions == aio_partitions
    assert {k: partition_for(k, 12) for k in KEYS} == aio_partitions
    assert len(set(aio_partitions.values())) == 12


def test_every_event_round_trips_through_the_registry(
    ns: Settings, registry: RegistryClient
) -> None:
    codec = Codec(registry)
    topic = f"{ns.topic_prefix}.roundtrip"
    for event in EXAMPLES:
        data = codec.encode(topic + type(event).__name__, event)
        assert data[0] == 0
        assert codec.decode(data, type(event)) == event


@pytest.mark.parametrize("kind", [JobDefinition, RunOutput])
def test_subjects_are_backward_compatible_and_refuse_breaking_changes(
    ns: Settings, registry: RegistryClient, kind: type[JobDefinition | RunOutput]
) -> None:
    topics = Topics(ns)
    topic = topics.jobs if kind is JobDefinition else topics.run_output
    subject = f"{topic}-value"  # registered by the ns fixture's bootstrap
    assert registry.lookup(subject, schema_json(kind.AVRO_NAME)) is not None
    current = json.loads(schema_json(kind.AVRO_NAME))
    breaking = dict(current, fields=[*current["fields"], {"name": "owner", "type": "string"}])
    assert registry.compatible(subject, json.dumps(breaking)) is False
    additive = dict(
        current,
        fields=[*current["fields"], {"name": "owner", "type": "string", "default": "ops"}],
    )
    assert registry.compatible(subject, json.dumps(additive)) is True


def test_a_record_written_with_an_older_registered_schema_decodes_today(
    ns: Settings, registry: RegistryClient
) -> None:
    subject = f"{ns.topic_prefix}.legacy-{uuid.uuid4().hex[:6]}-value"
    old_id = registry.register(subject, json.dumps(OLD_JOB_SCHEMA))
    buf = io.BytesIO()
    buf.write(struct.pack(">bI", 0, old_id))
    fastavro.schemaless_writer(
        buf,
        fastavro.parse_schema(OLD_JOB_SCHEMA),
        {
            "job_id": "legacy",
            "tenant": "t",
            "schedule": None,
            "timezone": "UTC",
            "paused": True,
            "target": Target(type="http", url="https://x.example").to_avro(),
            "payload": None,
            "updated_at": utc_now(),
        },
    )
    job = Codec(registry).decode(buf.getvalue(), JobDefinition)
    assert job.job_id == "legacy"
    assert job.paused is True
    assert job.misfire == MisfirePolicy()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "tombstone"),
        (b"\x00\x00", "too short"),
        (b"\x07\x00\x00\x00\x01abc", "unknown magic byte"),
        (b"\x00\x7f\xff\xff\xf0abc", "not in the registry"),
    ],
)
def test_undecodable_bytes_raise_decode_error(
    registry: RegistryClient, data: bytes | None, message: str
) -> None:
    with pytest.raises(DecodeError, match=message):
        Codec(registry).decode_any(data)


def test_a_corrupt_body_raises_decode_error(ns: Settings, registry: RegistryClient) -> None:
    codec = Codec(registry)
    good = codec.encode(Topics(ns).jobs, EXAMPLES[0])
    with pytest.raises(DecodeError, match="undecodable"):
        codec.decode(good[:12], JobDefinition)
