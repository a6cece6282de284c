"""`cronstream scheduler --state-dir DIR --check-index`: every partition store under DIR
checked against the jobs topic, the source of truth.

For each store, the jobs partition is read up to the offset the store covers; the
latest usable definition of each job gives what the store must say (``index_view``):
the same definition offset, and an entry at or before the job's first due after the
store's fired-through point. A store missing a job, holding a deleted one, holding an
older version, or whose entries point past a job's next slot (a slot it would miss) is
reported. Run it on stores no scheduler has open (RocksDB locks them).
"""

from __future__ import annotations

from pathlib import Path

from cronstream.runtime.kafka.clients import TopicPartition, consume_ready, kafka_consumer
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.runtime.kafka.records import is_record
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.state import PartitionState, index_view


def latest_definitions(
    settings: Settings, partition: int, end: int
) -> dict[str, tuple[int, bytes]]:
    """job id -> (offset, value) of the latest record below ``end`` of each job still
    defined (tombstones remove it), read from the jobs topic."""
    topic = Topics(settings).jobs
    consumer = kafka_consumer(settings)
    latest: dict[str, tuple[int, bytes | None]] = {}
    try:
        low, high = watermarks(consumer, TopicPartition(topic, partition))
        end = min(end, high)
        if end > low:
            consumer.assign([TopicPartition(topic, partition, low)])
        position = low
        while position < end:
            for msg in consume_ready(consumer, 5000, 5.0):
                offset = msg.offset()
                if not is_record(msg) or offset is None or offset >= end:
                    continue
                position = offset + 1
                key = msg.key()
                if key:
                    latest[key.decode("utf-8", "replace")] = (offset, msg.value())
    finally:
        consumer.close()
    return {k: (offset, value) for k, (offset, value) in latest.items() if value is not None}


def check_partition(
    settings: Settings, partition: int, state: PartitionState, definitions: Definitions
) -> list[str]:
    meta = state.meta()
    if meta is None:
        return [f"partition {partition}: the store was never checkpointed"]
    truth: dict[str, tuple[int, int | None]] = {}
    for job_id, (offset, raw) in latest_definitions(settings, partition, meta.jobs_offset).items():
        job = definitions.stored_schedule(job_id, raw)
        if job is None:
            continue  # dead-lettered when it was read: not in the store either
        slot = job.slot_due_after(meta.fired_through)
        truth[job_id] = (offset, None if slot is None else slot + job.jitter)
    held = index_view(state, meta.fired_through)
    problems = []
    for job_id in sorted(truth.keys() | held.keys()):
        want, got = truth.get(job_id), held.get(job_id)
        if want != got:
            problems.append(
                f"partition {partition}: job {job_id!r}: the jobs topic says "
                f"(offset, next due) {want}, the store {got}"
            )
    return problems


def check_stores(
    settings: Settings, state_dir: str, definitions: Definitions
) -> tuple[int, list[str]]:
    """(stores checked, problems) for every partition store of the jobs topic."""
    root = Path(state_dir) / Topics(settings).jobs
    problems: list[str] = []
    checked = 0
    for path in sorted(root.iterdir() if root.is_dir() else [], key=lambda p: p.name):
        if not path.name.isdigit():
            continue
        state = PartitionState(path, definitions.stored_schedule)
        try:
            problems += check_partition(settings, int(path.name), state, definitions)
            checked += 1
        finally:
            state.close()
    return checked, problems
