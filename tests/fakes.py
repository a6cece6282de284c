"""Fakes of the Kafka and registry clients, and of the history's queries, for unit tests
of the roles' decisions.

Each fake keeps what the real client would have done as plain lists, so a test reads
what was produced, flushed, committed or paused in order. Integration tests use the
real services; these are for logic that does not need them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from cronstream.consumers.history import flow_rows
from cronstream.runtime.kafka.records import AnyHeaders
from cronstream.schemas.errors import RegistryError
from cronstream.schemas.events import RunOutcome


@dataclass
class FakeMessage:
    """A consumed record (``runtime.kafka.records.ConsumedMessage``)."""

    topic_: str
    partition_: int
    offset_: int
    value_: bytes | None
    key_: bytes | None = b"job"
    timestamp_ms: int = 0
    headers_: AnyHeaders | None = None
    error_: KafkaError | None = None

    def error(self) -> KafkaError | None:
        return self.error_

    def topic(self) -> str | None:
        return self.topic_

    def partition(self) -> int | None:
        return self.partition_

    def offset(self) -> int | None:
        return self.offset_

    def key(self) -> bytes | None:
        return self.key_

    def value(self) -> bytes | None:
        return self.value_

    def timestamp(self) -> tuple[int, int]:
        return (1, self.timestamp_ms)

    def headers(self) -> AnyHeaders | None:
        return self.headers_


class FakeRegistry:
    """An in-memory schema registry: the calls ``schemas.serde.Codec`` makes."""

    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}
        self.ids: dict[tuple[str, str], int] = {}

    def register(self, subject: str, schema: str) -> int:
        canonical = json.dumps(json.loads(schema), sort_keys=True)
        known = next((i for i, s in self.by_id.items() if s == canonical), None)
        schema_id = known or len(self.by_id) + 1
        self.by_id[schema_id] = canonical
        self.ids[(subject, canonical)] = schema_id
        return schema_id

    def lookup(self, subject: str, schema: str) -> int | None:
        return self.ids.get((subject, json.dumps(json.loads(schema), sort_keys=True)))

    def schema_by_id(self, schema_id: int) -> tuple[str, str]:
        if schema_id not in self.by_id:  # as the registry answers
            raise RegistryError(f"schema {schema_id} not found", status=404, code=40403)
        return self.by_id[schema_id], "AVRO"

    def close(self) -> None:
        pass


@dataclass
class Produced:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]]
    flushed: bool = False


@dataclass
class FakeProducer:
    """confluent-kafka's Producer as ``runtime.kafka.publisher.Publisher`` uses it.

    Records are acknowledged on ``flush`` (or ``poll``); ``fail_next`` makes the next
    acknowledgement a delivery error."""

    produced: list[Produced] = field(default_factory=list)
    flushes: int = 0
    flush_timeouts: list[float] = field(default_factory=list)  # each flush's timeout
    fail_next: bool = False
    down: bool = False  # the broker away: flush acknowledges nothing and says how many wait
    _waiting: list[tuple[Produced, Callable[..., None]]] = field(default_factory=list)

    def produce(
        self,
        topic: str,
        *,
        value: bytes | None,
        key: str | bytes | None,
        headers: list[tuple[str, str | bytes | None]],
        on_delivery: Callable[..., None],
    ) -> None:
        key = key.encode() if isinstance(key, str) else key
        record = Produced(topic, key, value, list(headers))
        self.produced.append(record)
        self._waiting.append((record, on_delivery))

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def purge(self) -> None:
        """Drop what waits for an acknowledgement (``Publisher.renew``)."""
        self._waiting = []

    def list_topics(self, topic: str, /, *, timeout: float) -> Any:
        """No broker metadata here: a test that needs it fakes it."""
        raise NotImplementedError("FakeProducer has no topic metadata")

    def flush(self, timeout: float = 0) -> int:
        self.flushes += 1
        self.flush_timeouts.append(timeout)
        if self.down:
            return len(self._waiting)
        waiting, self._waiting = self._waiting, []
        for record, on_delivery in waiting:
            record.flushed = True
            error = KafkaError(KafkaError._MSG_TIMED_OUT) if self.fail_next else None
            self.fail_next = False
            on_delivery(error, _Delivered(record))
        return 0

    def answer(self, *positions: int) -> None:
        """Answer the waiting records at ``positions`` (in the waiting order), as a
        broker answering some partitions before others; ``fail_next`` fails the first."""
        picked = [self._waiting[i] for i in positions]
        self._waiting = [w for i, w in enumerate(self._waiting) if i not in positions]
        for record, on_delivery in picked:
            record.flushed = True
            error = KafkaError(KafkaError._MSG_TIMED_OUT) if self.fail_next else None
            self.fail_next = False
            on_delivery(error, _Delivered(record))

    def on(self, topic: str) -> list[Produced]:
        return [r for r in self.produced if r.topic == topic]


@dataclass
class _Delivered:
    record: Produced

    def topic(self) -> str:
        return self.record.topic

    def key(self) -> bytes | None:
        return self.record.key


@dataclass
class FakeConsumer:
    """The calls the worker's parts make on their group consumer: commits and pauses are
    recorded (with the number of producer flushes seen at each commit, when given)."""

    producer: FakeProducer | None = None
    commits: list[tuple[list[tuple[str, int, int, str | None]], bool, int]] = field(
        default_factory=list
    )
    paused: list[tuple[str, int]] = field(default_factory=list)

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool = True) -> Any:
        flushes = self.producer.flushes if self.producer else 0
        taken = [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]
        self.commits.append((taken, asynchronous, flushes))
        return None if asynchronous else offsets

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused.extend((tp.topic, tp.partition) for tp in partitions)

    def resume(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.paused = [p for p in self.paused if p not in gone]


class Unread:
    """A consumer a unit test never reads: the history of worker parts whose runs are
    never possible duplicates (its offset look-ups too), the timers of a scheduler intake
    fed directly. Every call fails, as it would have on the ``None`` it replaces."""

    def _unread(self) -> AssertionError:
        return AssertionError("this consumer is never read in this test")

    def seek(self, partition: TopicPartition) -> None:
        raise self._unread()

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        raise self._unread()

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        raise self._unread()

    def assignment(self) -> list[TopicPartition]:
        raise self._unread()

    def pause(self, partitions: list[TopicPartition]) -> None:
        raise self._unread()

    def resume(self, partitions: list[TopicPartition]) -> None:
        raise self._unread()

    def poll(self, timeout: float) -> FakeMessage | None:
        raise self._unread()

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        raise self._unread()

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float
    ) -> list[TopicPartition]:
        raise self._unread()

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float) -> tuple[int, int]:
        raise self._unread()

    def list_topics(self, topic: str, timeout: float) -> object:
        raise self._unread()

    def close(self) -> None:
        raise self._unread()


class FakeHistory:
    """``consumers.history.History``'s queries answered from ``rows`` (what Cassandra
    holds, its rows not expired) in its tables' orders, each query noted in ``asked``.

    The tenant a query names is ignored: a status query answers every tenant's rows, so
    only the caller's own check stands between tenants. ``every_job``: a job's runs are
    every job's too, for the same reason."""

    def __init__(self, rows: Sequence[RunOutcome] = (), *, every_job: bool = False) -> None:
        self.rows = list(rows)
        self.every_job = every_job
        self.asked: list[tuple[str, datetime | str, datetime | None]] = []

    def job_runs(
        self,
        job_id: str,
        start: datetime,
        end: datetime,
        statuses: Sequence[str] = (),
        *,
        limit: int | None = None,
    ) -> Iterator[RunOutcome]:
        """The job's attempts scheduled in [start, end), each as its last row has it."""
        self.asked.append(("job_runs", start, end))
        wanted = {s.upper() for s in statuses}
        latest: dict[tuple[str, int], RunOutcome] = {}
        for row in self.rows:
            if (self.every_job or row.job_id == job_id) and start <= row.scheduled_at < end:
                latest[(row.run_id, row.attempt)] = row
        found = sorted(
            latest.values(), key=lambda r: (-r.scheduled_at.timestamp(), r.run_id, -r.attempt)
        )
        return iter([r for r in found if not wanted or r.status.value in wanted][:limit])

    def by_status(
        self, statuses: Sequence[str], start: datetime, end: datetime, tenant: str | None = None
    ) -> Iterator[RunOutcome]:
        """The rows of ``statuses`` recorded in [start, end), latest first, whoever's."""
        self.asked.append(("by_status", start, end))
        wanted = {s.upper() for s in statuses}
        found = [
            r
            for r in self.rows
            if r.status.value in wanted
            and r.recorded_at is not None
            and start <= r.recorded_at < end
        ]
        return iter(sorted(found, key=lambda r: r.recorded_at or start, reverse=True))

    def run(self, run_id: str) -> list[RunOutcome]:
        self.asked.append(("run", run_id, None))
        return [r for r in self.rows if r.run_id == run_id]

    def flow_run(self, flow_run_id: str) -> list[RunOutcome]:
        return flow_rows(self.run, self.job_runs, flow_run_id)
