"""Malformed and hostile records for the flood scenario, written straight to the jobs
and runs topics as any Kafka client could (no validation on the way).

Kinds, cycled: bytes that are not the wire format, unknown schema ids, truncated bodies,
values out of range (instants past year 9999, a 70-bit attempt varint, negative
numbers), limits exceeded (a 20 KB cron, a 1 MB definition), keys that lie (a definition
under another job's key, a non-UTF-8 key, no key), bad updates of jobs that are firing
(the previous definition must stay in force), and targets a worker must refuse (private
addresses, cronstream's own topics, shell, a python callable outside the examples).
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any

import fastavro

from cronstream.runtime.kafka.publisher import Publisher
from cronstream.schemas.avro import parsed_schema
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import (
    CronSchedule,
    IntervalSchedule,
    JobDefinition,
    MisfirePolicy,
    Priority,
    Target,
    Trigger,
    utc_now,
)
from cronstream.schemas.wire import avro_string, zigzag

Record = tuple[bytes | None, bytes | None]  # key, value
HOSTILE_TARGETS = (
    Target(type="http", url="http://169.254.169.254/latest/meta-data"),
    Target(type="http", url="http://[64:ff9b::7f00:1]:8080/"),
    Target(type="python", callable="os:getpid"),
    Target(type="shell", command="sh -c 'echo pwned'"),
    Target(type="kafka", topic="__consumer_offsets"),
)


def _avro(codec_prefix: bytes, name: str, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(codec_prefix)
    fastavro.schemaless_writer(buf, parsed_schema(name), record)
    return buf.getvalue()


def malformed(prefix: bytes, good: bytes, i: int) -> Record | None:
    """Kinds that break any record type (``good``, a valid value, and ``prefix``, its
    wire header, are the material); None for the type-specific ones."""
    key = f"hostile-{i}".encode()
    kinds: list[Callable[[], Record]] = [
        lambda: (key, os.urandom(1 + i % 200)),
        lambda: (key, b"\x01" + good[1:]),
        lambda: (key, b"\x00" + struct.pack(">I", 900_000 + i % 1000) + good[5:]),
        lambda: (key, good[: len(good) // 2]),
        lambda: (key, prefix),
        lambda: (b"\xff\xfe" + key, good),
        lambda: (None, good),
    ]
    k = i % (len(kinds) + 8)
    return kinds[k]() if k < len(kinds) else None


def bad_updates(base: JobDefinition, now: datetime) -> list[JobDefinition]:
    """Eight invalid versions of ``base``: a cron field out of range, a 20 KB cron, a
    negative interval, a zone that is not one, a jitter and a catch-up past every limit,
    a 600 KB payload, a job id with a control character."""
    return [
        replace(base, schedule=CronSchedule(expression="61 * * * *")),
        replace(base, schedule=CronSchedule(expression="* " * 10_000)),
        replace(base, schedule=IntervalSchedule(every_ms=-5, anchor=now)),
        replace(base, timezone="America"),
        replace(base, jitter_ms=2**62),
        replace(base, misfire=MisfirePolicy(max_catchup=2**31 - 1, catchup_window_ms=2**62)),
        replace(base, payload="x" * 600_000),
        replace(base, job_id=f"{base.job_id}\n"),
    ]


def job_records(
    publisher: Publisher,
    topics: Topics,
    firing: list[str],
    count: int,
    definition: Callable[[str], JobDefinition],
) -> Iterator[Record]:
    """``count`` hostile records for the jobs topic. A bad update of a firing job starts
    from its real ``definition``, so one the scheduler (wrongly) accepted would keep its
    slots: what the suite counts stays the job's own."""
    prefix = publisher.codec.wire_prefix(topics.jobs, JobDefinition)
    name = JobDefinition.AVRO_NAME
    now = utc_now()
    for i in range(count):
        victim = firing[i % len(firing)]
        base = definition(victim)
        good = _avro(prefix, name, base.to_avro())
        generic = malformed(prefix, good, i)
        if generic is not None:
            yield generic
            continue
        bad = bad_updates(base, now)[i % 8]
        yield victim.encode(), _avro(prefix, name, bad.to_avro())
        if i % 50 == 0:  # a job that fires every second at a target the worker refuses
            evil = replace(
                base,
                job_id=f"hostile-fires-{i}",
                target=HOSTILE_TARGETS[i % 5],
                schedule=IntervalSchedule(every_ms=1000, anchor=now),
            )
            yield evil.job_id.encode(), _avro(prefix, name, evil.to_avro())


def run_records(publisher: Publisher, topics: Topics, count: int, url: str) -> Iterator[Record]:
    """``count`` hostile records for a runs topic."""
    from cronstream.schemas.events import RunRequest

    prefix = publisher.codec.wire_prefix(topics.runs(Priority.NORMAL), RunRequest)
    name = RunRequest.AVRO_NAME
    now = utc_now()
    for i in range(count):
        job_id = f"hostile-run-{i}"
        run = RunRequest(
            run_id=f"{job_id}@x",
            job_id=job_id,
            scheduled_at=now,
            fired_at=now,
            target=Target(type="http", url=url),
            trigger=Trigger.MANUAL,
        )
        fields = run.to_avro()
        good = _avro(prefix, name, fields)
        generic = malformed(prefix, good, i)
        if generic is not None:
            yield generic
            continue
        head = avro_string(run.run_id) + avro_string(job_id) + avro_string("default")
        rest = good[5 + len(head) + 1 :]  # after attempt (1, one byte)
        kind = i % 8
        if kind == 0:  # a 70-bit attempt varint
            value = prefix + head + zigzag(2**69) + rest
        else:
            value = _avro(prefix, name, {**fields, **_run_changes(kind, i)})
        yield job_id.encode(), value


def _run_changes(kind: int, i: int) -> dict[str, Any]:
    return [
        {},
        {"scheduled_at": 2**62},
        {"fired_at": -(2**62)},
        {"timeout_ms": -1},
        {"timeout_ms": 10**15},
        {"target": HOSTILE_TARGETS[i % 5].to_avro()},
        {"attempt": 2**31 - 1},
        {"run_id": "r" * 100_000},
    ][kind]


def flood(publisher: Publisher, topic: str, records: Iterator[Record], *, per_s: int) -> int:
    """Write ``records`` at about ``per_s`` a second; returns how many were written."""
    import time

    written = 0
    started = time.monotonic()
    for key, value in records:
        publisher.producer.produce(topic, key=key, value=value, headers=[("event", b"hostile")])
        publisher.producer.poll(0)
        written += 1
        ahead = written / per_s - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    publisher.flush(timeout=60)
    return written
