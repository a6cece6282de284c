"""Event triggers: a matching record to its run STARTED, at 1,000 records a
second, and the trigger processor's records per second with a filter on a decoded Avro
field.

- **latency**: a source topic of 6 partitions gets 1,000 Avro records a second for
  15 s, every one matching the job's filter (``value.amount >= 0``: 1,000 runs a second,
  the run path's load), through one `cronstream triggers` and one worker (no-op python
  target). Per run: its attempt's start (the outcome's ``started_at``) minus its
  record's timestamp (the run's ``scheduled_at``: the producer stamps it at produce),
  the first 5 s left out (the pipeline warming up).
- **throughput**: 200,000 Avro records written first, 1 % matching
  ``value.amount >= 9800 and value.customer.tier == "gold"``; one processor, in this
  process, reads them all: records decided per second, from its first record read to
  the last (decoding, the filter, the 2,000 run requests written, the checkpoints).

Source topics are written by the super user, outside the namespace's prefix (the
processor refuses cronstream's own), readable by the processor through
``trigger_source_acls``.

    python -m tests.bench --only triggers
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic

from cronstream.infra.kafka_access import admin_acls, delete_acls
from cronstream.infra.tenants import trigger_source_acls
from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import admin_security
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    EPOCH,
    EventTrigger,
    JobDefinition,
    Priority,
    RunOutcome,
    Trigger,
    to_ms,
    utc_now,
)
from cronstream.schemas.serde import Codec
from cronstream.streams.triggers.processor import TriggerConfig, TriggerProcessor
from tests.bench.common import NOOP_TARGET, namespace, pct, row
from tests.integration.helpers import CronstreamProcess, read_topic
from tests.orders import order, order_writer


@contextmanager
def source(settings: Settings, partitions: int) -> Iterator[tuple[str, Callable[[int], bytes]]]:
    """A source topic and an encoder of its ``n``-th Order (Confluent wire format)."""
    topic = f"csbench-src.{uuid.uuid4().hex[:8]}.orders"
    admin = kafka_admin(settings, superuser=True)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
    ).values():
        future.result(30)
    admin_acls(admin, trigger_source_acls(topic), 30)
    write = order_writer(settings, topic)

    def encode(n: int) -> bytes:
        tier = "gold" if n % 2 == 0 else "basic"  # with amount >= 9800: 1 record in 100
        return write(order(n, n % 10_000, tier))

    try:
        yield topic, encode
    finally:
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result()
        delete_acls(admin, trigger_source_acls(topic))


def put_trigger(
    settings: Settings, job_id: str, topic: str, expression: str, defined: datetime | None = None
) -> None:
    """A job on ``topic``'s records (``defined``: when; a trigger starts at the first
    record stamped then or later)."""
    job = JobDefinition(
        job_id=job_id,
        target=NOOP_TARGET,
        updated_at=defined or utc_now(),
        on=EventTrigger(topic=topic, filter=expression),
    )
    with JobClient(settings) as client:
        client.put(job)


def producer(settings: Settings) -> Producer:
    return Producer(
        {
            **admin_security(settings),
            "partitioner": "murmur2_random",
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )


def _latencies(settings: Settings, seconds: float) -> list[int]:
    with source(settings, 6) as (topic, encode):
        put_trigger(settings, "bench-orders", topic, "value.amount >= 0")
        logs = Path(tempfile.mkdtemp(prefix="csbench-triggers-"))
        worker = CronstreamProcess(
            settings,
            logs,
            "worker",
            "--concurrency",
            "32",
            "--python-allow",
            "tests.bench",
            command="worker",
        )
        triggers = CronstreamProcess(settings, logs, "triggers", command="triggers")
        try:
            worker.wait_live(1, timeout=120, text="assigned")
            triggers.wait_live(1, timeout=120, text="assigned")
            out = producer(settings)
            warm = to_ms(utc_now()) + 5000  # records written from then on are measured
            started = time.monotonic()
            for n in range(int(seconds * 1000)):  # 10 records every 10 ms
                if n % 10 == 0:
                    time.sleep(max(0.0, started + n / 1000 - time.monotonic()))
                out.produce(topic, value=encode(n), key=f"c-{n % 997}")
                out.poll(0)
            out.flush(30)
            time.sleep(5)  # the last runs started
        finally:
            triggers.stop()
            worker.stop()
        with registry_client(settings) as registry:
            codec = Codec(registry)
            outcomes = [
                codec.decode(r.value, RunOutcome)
                for r in read_topic(settings, Topics(settings).history)
                if r.value is not None and r.headers.get("status") != "STARTED"
            ]
        return [
            to_ms(o.started_at) - to_ms(o.scheduled_at)
            for o in outcomes
            if o.started_at is not None
            and o.trigger is Trigger.EVENT
            and to_ms(o.scheduled_at) >= warm
        ]


def _throughput(settings: Settings, records: int) -> float:
    with source(settings, 6) as (topic, encode):
        out = producer(settings)
        for n in range(records):
            out.produce(topic, value=encode(n), key=f"c-{n % 997}")
            if n % 10_000 == 0:
                out.poll(0)
        out.flush(60)
        # defined before the records (the epoch): its trigger starts at the beginning
        put_trigger(
            settings,
            "bench-gold",
            topic,
            'value.amount >= 9800 and value.customer.tier == "gold"',
            EPOCH,
        )
        config = TriggerConfig(
            group=f"{settings.topic_prefix}.triggers", name="bench", tenant_runs_per_second=0
        )
        processor = TriggerProcessor(settings.as_role("triggers"), config)
        try:
            found = processor.definitions.load()
            processor.store.catch_up()
            processor._apply(found)
            first, deadline = 0.0, time.monotonic() + 600
            while time.monotonic() < deadline:
                processor.step()
                read = sum(o.position for o in processor.owned.values())
                if not first and read:
                    first = time.monotonic()
                if read >= records:
                    break
            took = time.monotonic() - first
            assert read >= records, f"{read} of {records} records read"
            processor.checkpoint(list(processor.owned), wait=True)
            emitted = len(read_topic(settings, Topics(settings).runs(Priority.NORMAL)))
            assert emitted == records // 100, f"{emitted} runs for {records} records"
            return records / took
        finally:
            processor.member.close()
            processor.definitions.close()
            processor.store.close()
            processor.publisher.close()


def bench_triggers(base: Settings, runs: int, seconds: float, records: int) -> None:
    p50s, p99s, rates = [], [], []
    for _ in range(runs):
        with namespace(base) as settings:
            latencies = _latencies(settings, seconds)
        assert len(latencies) >= (seconds - 5) * 1000 * 0.95, f"{len(latencies)} runs"
        p50s.append(pct(latencies, 0.5))
        p99s.append(pct(latencies, 0.99))
        with namespace(base) as settings:
            rates.append(round(_throughput(settings, records)))
    row(
        "event record -> run STARTED p50 @1k matching records/s (ms)",
        f"{statistics.median(p50s):.0f}",
        "-",
        f"runs {p50s}",
    )
    row(
        "event record -> run STARTED p99 @1k matching records/s (ms)",
        f"{statistics.median(p99s):.0f}",
        "-",
        f"runs {p99s}",
    )
    row(
        "trigger processor, Avro filter, 1% matching (records/s)",
        f"{statistics.median(rates):.0f}",
        "-",
        f"runs {rates}, {records:,} records",
    )
