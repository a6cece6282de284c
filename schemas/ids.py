"""Deterministic identities: run ids and the partition a key lands on.

A run is named by its job and the instant it was scheduled for, so every scheduler that
ever computes that slot names it the same way, and a worker, the history table and the
target's idempotency key all agree on it::

    nightly-report@2026-11-22T02:00:00.000Z        a scheduled (or catch-up) slot
    nightly-report@manual:deploy-4711               a manual run with an idempotency key
    on-orders@evt:acme.orders:3:1042                a record of a source topic:
                                                    topic, partition, offset
    daily-report@dep:2026-11-22                     the day its upstream jobs succeeded

An event run's id names its source record with ':' (never in a topic name, as '@' is
not), not '/': a flow's node runs are ``FLOW@<run part>/NODE``, and the flows' readers
find a node after the first '/' of the run part.

Retries keep the run id and increment ``attempt``.
"""

from __future__ import annotations

import struct
from datetime import date, datetime
from functools import lru_cache

from cronstream.schemas.events import from_ms, iso

MANUAL = "manual:"
EVENT = "evt:"
DEPENDENCY = "dep:"


def run_id_for(job_id: str, scheduled_at: datetime) -> str:
    return f"{job_id}@{iso(scheduled_at)}"


@lru_cache(maxsize=4096)  # the jobs firing at one instant share it
def slot_text(slot_ms: int) -> tuple[str, bytes]:
    """A slot's instant as the wire text of run ids and headers, and its bytes."""
    text = iso(from_ms(slot_ms))
    return text, text.encode()


def slot_run_id(job_id: str, slot_ms: int) -> tuple[str, bytes]:
    """``run_id_for`` from the slot's milliseconds, with the slot's instant as header
    bytes (the scheduler's fire path)."""
    text, encoded = slot_text(slot_ms)
    return f"{job_id}@{text}", encoded


def manual_run_id(job_id: str, idempotency_key: str) -> str:
    return f"{job_id}@{MANUAL}{idempotency_key}"


def event_run_id(job_id: str, topic: str, partition: int, offset: int) -> str:
    """The run a source record causes (the first record of a debounce window or a
    batch): the same whoever reads the record, however often."""
    return f"{job_id}@{EVENT}{topic}:{partition}:{offset}"


def event_source(run_id: str) -> tuple[str, int, int] | None:
    """The source record (topic, partition, offset) an event run id names (a flow's node
    run ``FLOW@evt:t:0:5/NODE`` its flow run's), or None for another kind of run id."""
    _, sep, part = run_id.rpartition(f"@{EVENT}")
    topic, _, coordinates = part.partition("/")[0].partition(":")
    partition, _, offset = coordinates.partition(":")
    if not (sep and topic and partition.isdigit() and offset.isdigit()):
        return None
    return topic, int(partition), int(offset)


def dependency_run_id(job_id: str, day: date) -> str:
    """The run of a dependent job for the day its upstream jobs succeeded."""
    return f"{job_id}@{DEPENDENCY}{day.isoformat()}"


def job_id_of(run_id: str) -> str:
    """The job a run id belongs to (job ids may contain '@'; the run part never does)."""
    job_id, sep, _ = run_id.rpartition("@")
    if not sep or not job_id:
        raise ValueError(f"{run_id!r} is not a cronstream run id (JOB_ID@WHEN)")
    return job_id


def slot_of(run_id: str) -> tuple[str, datetime | None]:
    """The job a run id belongs to and, for a scheduled run's id (a flow's node run's
    too: ``FLOW@<slot>/NODE``), its slot. ValueError: not a cronstream run id."""
    job = job_id_of(run_id)
    part = run_id[len(job) + 1 :].partition("/")[0]
    if not part[:1].isdigit():  # manual:, evt:, dep:
        return job, None
    try:
        slot = datetime.fromisoformat(part)
    except ValueError:
        return job, None
    return job, slot if slot.tzinfo is not None else None


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash (the Java client's and aiokafka's default partitioner), as
    an unsigned 32-bit int. Once per run of a kafka target (the worker's destination of
    it): the whole words unpacked at once, ~8 us for a run id."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length - length % 4
    for (word,) in struct.iter_unpack("<I", data[:whole]):
        k = (word * m) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * m) & 0xFFFFFFFF) ^ ((k * m) & 0xFFFFFFFF)
    tail = length - whole
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def partition_for(key: str, partitions: int) -> int:
    """The partition Java clients, aiokafka and our murmur2_random producers pick for key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
