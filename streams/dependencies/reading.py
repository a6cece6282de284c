"""What the dependency processor (``streams.dependencies.processor``) reads: a jobs record judged
(``judge``: a dependent to define, one to forget, a refusal), and ranges of a topic read
with a filter on the record key (``read_range``: the history topic read again from its
start for some jobs, without decoding the records of the others)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from cronstream.runtime.kafka.clients import Consumer, TopicPartition
from cronstream.runtime.kafka.records import ConsumedMessage, is_record
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers
from cronstream.schemas.definition import problems
from cronstream.schemas.definition.triggers import source_problems
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.serde import Codec

log = logging.getLogger("cronstream.dependencies")
STAGE = "dependencies"  # the dead letters' stage, the metrics' role


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one jobs record means here: ``job`` to define (a dependent), or none to
    forget ``key`` (deleted, no ``after:`` or paused); ``refused``: why it cannot be
    used (dead-lettered; the definition before it stays in force, as the scheduler
    keeps a job's last good definition). ``unreadable``: undecodable, which the
    scheduler dead-letters: nothing changes here."""

    key: str
    job: JobDefinition | None = None
    refused: str | None = None
    unreadable: bool = False


def judge(codec: Codec, key: str, value: bytes | None, *, max_payload_bytes: int) -> Verdict:
    """A jobs record (``key``, ``value``) as the dependency processor sees it. A
    dependent is checked again, whoever wrote it: the one check (``problems``), then the
    tenants' rule (``source_problems``: a tenant's job comes after its own jobs)."""
    if value is None:
        return Verdict(key)
    try:
        job = codec.decode(value, JobDefinition)
    except DecodeError:
        return Verdict(key, unreadable=True)
    if not job.after or job.paused:
        return Verdict(key)  # not a dependent (a paused one waits for nothing)
    if job.job_id != key:
        return Verdict(key, refused=f"record key {key!r} differs from job_id {job.job_id!r}")
    found = problems(job, max_payload_bytes=max_payload_bytes) + source_problems(job.tenant, job)
    if found:
        return Verdict(key, refused=f"invalid dependent job: {'; '.join(found)}")
    return Verdict(key, job=job)


Handle = Callable[[ConsumedMessage], None]


@dataclass(slots=True)
class Range:
    """Offsets ``[start, end)`` of one partition of ``topic`` to read."""

    topic: str
    partition: int
    start: int
    end: int


def read_range(
    consumer: Consumer,
    ranges: Collection[Range],
    handle: Handle,
    *,
    codec: Codec,
    keys: Collection[bytes] | None,
    stop: Callable[[], bool],
    pause: Callable[[float], bool],
) -> int:
    """Read every range with ``consumer`` (assigned them, unassigned after), handing
    each record whose key is in ``keys`` (None: every record) to ``handle``, in offset
    order per partition; the records handed. A writer schema not seen yet is asked of
    the registry first (waited for while it is away). ``stop()`` true ends the read
    with StopWaiting (it also beats the liveness probe: a long read is alive)."""
    todo = {(r.topic, r.partition): r for r in ranges if r.start < r.end}
    if not todo:
        return 0
    assigned = [TopicPartition(r.topic, r.partition, r.start) for r in todo.values()]
    consumer.assign(assigned)
    # A partition paused at the end of an earlier read stays paused when assigned again
    # (found by reading history again after a start had read it: nothing came, ever).
    consumer.resume(assigned)
    handed = 0
    try:
        while todo:
            if stop():
                raise StopWaiting("stopped while reading")
            messages = consumer.consume(num_messages=2000, timeout=0.5)
            wanted = _within(consumer, messages, todo, keys)
            learn_writers(codec, wanted, what="dependency processor", log=log, pause=pause)
            for msg in wanted:
                handle(msg)
            handed += len(wanted)
            if not messages:
                _drop_finished(consumer, todo)
    finally:
        consumer.unassign()
    return handed


def _within(
    consumer: Consumer,
    messages: Sequence[ConsumedMessage],
    todo: dict[tuple[str, int], Range],
    keys: Collection[bytes] | None,
) -> list[ConsumedMessage]:
    """The records of ``messages`` within their range and with a wanted key; a range
    read to its end (or past it) is done, its partition paused."""
    wanted = []
    for msg in messages:
        if not is_record(msg):
            continue
        where = (msg.topic() or "", msg.partition() or 0)
        r = todo.get(where)
        if r is None:
            continue
        offset = msg.offset() or 0
        if offset + 1 >= r.end:  # read to its end, or past it (its last offsets compacted)
            del todo[where]
            consumer.pause([TopicPartition(*where)])
            if offset >= r.end:
                continue
        if keys is None or msg.key() in keys:
            wanted.append(msg)
    return wanted


def _drop_finished(consumer: Consumer, todo: dict[tuple[str, int], Range]) -> None:
    """Ranges whose partition's position reached their end without a record there (the
    last offsets compacted away, or transaction markers)."""
    tps = [TopicPartition(topic, partition) for topic, partition in todo]
    for tp in consumer.position(tps):
        if tp.offset >= todo[(tp.topic, tp.partition)].end:
            del todo[(tp.topic, tp.partition)]
            consumer.pause([TopicPartition(tp.topic, tp.partition)])
