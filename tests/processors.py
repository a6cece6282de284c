"""Each processor's handling of one record, wired as the process wires it but on fakes
(``tests.fakes``): for the record-fault tests and the fuzz suite. A harness feeds plain
values in, and reads what the processor wrote (results, dead letters, outcomes).

The processors' constructors connect to Kafka, the registry or Cassandra; a harness
builds the object without them (``object.__new__``) and sets exactly the parts that
the per-record handling uses, named as the constructor names them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from cronstream.consumers.archiver import Archiver
from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.errors import ExecutionFailed
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.history import HistoryTables
from cronstream.consumers.output import OutputTable
from cronstream.consumers.sink import Sink, transient_errors
from cronstream.consumers.worker.attempts import Attempts
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.intake import Intake
from cronstream.consumers.worker.loop import outcome_observers
from cronstream.consumers.worker.outbox import Outbox
from cronstream.consumers.worker.replay import HistoryReplay
from cronstream.producers.admission.core import Admission, Quotas
from cronstream.producers.admission.processor import AdmissionConfig, AdmissionProcessor
from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.stall import Backoff
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import DeadLetter, Priority, RunOutcome, Target
from cronstream.schemas.flows import FlowDefinition
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import TenantCommand, TenantResult, commands_topic
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.flows.app import _Runner
from cronstream.streams.flows.coordinator import Coordinator
from cronstream.streams.flows.rows import JsonRows
from cronstream.streams.scheduler.applying import Applier
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.emitter import Emitter
from cronstream.streams.scheduler.intake import Intake as SchedulerIntake
from cronstream.streams.scheduler.loading import Loader
from cronstream.streams.scheduler.owned import Owned
from tests.fakes import FakeConsumer, FakeMessage, FakeProducer, FakeRegistry, Unread

SETTINGS = Settings.from_env({"CRONSTREAM_PARTITIONS": "1"})  # every job at home on 0
TOPICS = Topics(SETTINGS)
# A worker's attempts build the kafka targets' producer: plaintext needs no password or
# CA from a bootstrapped stack (.stack), so unit tests run on a fresh clone; it never
# connects here (no kafka target runs through it).
WORKER_SETTINGS = Settings.from_env(
    {"CRONSTREAM_PARTITIONS": "1", "CRONSTREAM_KAFKA_SECURITY": "plaintext"}
)
NOW = datetime(2026, 11, 26, 10, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)


def new_codec() -> Codec:
    return Codec(FakeRegistry())


def fake_publisher(codec: Codec, producer: FakeProducer, **kwargs: Any) -> Publisher:
    return Publisher(SETTINGS, codec=codec, producer=producer, **kwargs)


def decoded(codec: Codec, producer: FakeProducer, topic: str, kind: type[Any]) -> list[Any]:
    return [codec.decode(r.value, kind) for r in producer.on(topic) if r.value is not None]


# -- admission ------------------------------------------------------------------------------
class AdmissionHarness:
    def __init__(self) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        p = self.processor = object.__new__(AdmissionProcessor)
        p.settings, p.topics, p.codec = SETTINGS, TOPICS, self.codec
        p.config = AdmissionConfig(group="g", name="a", quotas=Quotas())
        p.publisher = fake_publisher(self.codec, self.producer)
        p.admission = Admission(Quotas(), max_payload_bytes=SETTINGS.max_payload_bytes)
        p.faults = RecordFaults("admission")
        self.offset = 0

    def send(self, tenant: str, command: TenantCommand) -> TenantResult:
        """``command`` read from ``tenant``'s commands topic; the answer it got."""
        topic = commands_topic(SETTINGS.topic_prefix, tenant)
        self.offset += 1
        value = self.codec.encode(topic, command)
        self.processor.handle(FakeMessage(topic, 0, self.offset, value, command.job_id.encode()))
        answers = decoded(self.codec, self.producer, TOPICS.tenant_results(tenant), TenantResult)
        return answers[-1]  # type: ignore[no-any-return]


# -- scheduler ------------------------------------------------------------------------------
class SchedulerHarness:
    """The scheduler's intake on one live partition (``streams.scheduler.intake``), wired as
    ``streams.scheduler.processor.Scheduler`` wires it."""

    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.topics, self.codec = TOPICS, new_codec()
        self.definitions = Definitions(self.codec)
        self.producer = FakeProducer()
        self.emitter = Emitter(
            fake_publisher(self.codec, self.producer),
            topics=TOPICS,
            definitions=self.definitions,
            name="s1",
        )
        self.now = now_ms
        self.owned: dict[int, Owned] = {}
        backoff = Backoff(logging.getLogger("test"), "held")
        applier = Applier(self.definitions, self.emitter, topics=TOPICS, now_ms=self._now_ms)
        loader = Loader(
            SchedulerConfig(group="g"),
            definitions=self.definitions,
            applier=applier,
            owned=self.owned,
            backoff=backoff,
            jobs_topic=TOPICS.jobs,
            now_ms=self._now_ms,
        )
        core = PartitionScheduler(0, fired_through=now_ms)
        self.owned[0] = Owned(partition=0, core=core, checkpoint=None, load_end=0, loading=False)
        core.wheel.on_near = loader.near_hook(self.owned[0])
        consumer = FakeConsumer()
        member = type("Member", (), {"consumer": consumer})()
        self.intake = SchedulerIntake(
            member=member,
            timers=Unread(),  # put/fire_until never read timers
            owned=self.owned,
            applier=applier,
            loader=loader,
            codec=self.codec,
            backoff=backoff,
            now_ms=self._now_ms,
        )
        self.offset = 0

    def _now_ms(self) -> int:
        return self.now

    def put(self, job_id: str, value: bytes) -> None:
        """A definition read live from the jobs topic."""
        self.offset += 1
        self.intake._on_jobs_record(
            FakeMessage(TOPICS.jobs, 0, self.offset, value, job_id.encode())
        )

    def fire_until(self, until_ms: int) -> None:
        """What is due up to ``until_ms``, emitted."""
        core = self.owned[0].core
        self.now = until_ms
        self.emitter.emit(core.due(until_ms, 1000), until_ms)

    def letters(self) -> list[DeadLetter]:
        return decoded(self.codec, self.producer, TOPICS.dlq, DeadLetter)


# -- worker ---------------------------------------------------------------------------------
RUNS = TOPICS.runs(Priority.NORMAL)


class Recording:
    """An executor that runs nothing: succeeds, or fails as told by the payload; prints
    what follows ``print:`` in it (its output), nothing otherwise."""

    kind = "recording"

    def execute(self, target: Target, context: RunContext) -> str | None:
        payload = context.payload or ""
        printed = payload.partition("print:")[2] or None
        if "fail" in payload:
            raise ExecutionFailed("told to fail", output=printed)
        return printed


class WorkerHarness:
    """Intake, attempts and outbox wired as ``consumers.worker.loop.Worker`` wires them;
    no executor reaches a target (``Recording`` stands for each), unless
    ``fake_executors`` is False: then the executors are those the registered target
    types build (``consumers.executors.setup``)."""

    def __init__(self, config: WorkerConfig | None = None, *, fake_executors: bool = True) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        self.consumer = FakeConsumer(producer=self.producer)
        self.trackers: dict[tuple[str, int], OffsetTracker] = {}
        self.dedup = Dedup(86_400_000, 100_000, now_ms=0)
        tally = metrics.Tally()
        publisher = fake_publisher(self.codec, self.producer, serve_each=False, track_acks=True)
        self.outbox = Outbox(
            publisher,
            topics=TOPICS,
            name="w1",
            consumer=self.consumer,
            trackers=self.trackers,
            dedup=self.dedup,
            tally=tally,
            observers=outcome_observers(TOPICS, self.dedup, name="w1"),
        )
        unread = Unread()  # no history is read here
        history = HistoryReplay(unread, topic=TOPICS.history, dedup=self.dedup, lookup=unread)
        config = config or WorkerConfig(group="g", concurrency=4)
        self.intake = Intake(
            config,
            topics=TOPICS,
            consumer=self.consumer,
            codec=self.codec,
            trackers=self.trackers,
            history=history,
            outbox=self.outbox,
        )
        self.attempts = Attempts(
            WORKER_SETTINGS, config, outbox=self.outbox, dedup=self.dedup, cancels={}, tally=tally
        )
        self.fake_executors = fake_executors
        if fake_executors:
            for executor in list(self.attempts.executors.values()):
                close = getattr(executor, "close", None)
                if close is not None:
                    close()
            self.attempts.executors = dict.fromkeys(self.attempts.executors, Recording())
        self.intake.assigned((RUNS, 0), committed=0, runs_end=0, history_end=0)
        self.offset = 0

    def read(self, value: bytes, key: bytes = b"j") -> int:
        """A record read from runs.normal partition 0; its offset."""
        self.offset += 1
        self.intake.accept(FakeMessage(RUNS, 0, self.offset, value, key, timestamp_ms=NOW_MS))
        return self.offset

    def run_all(self, timeout_s: float = 5.0) -> None:
        """Start what the backlog holds and settle every attempt."""
        import time

        deadline = time.monotonic() + timeout_s
        self.attempts.start_some(64, self.intake.take)
        while self.attempts.running and time.monotonic() < deadline:
            self.attempts.collect(wait=0.05)
        self.outbox.settle(wait=True)

    def outcomes(self) -> list[RunOutcome]:
        return decoded(self.codec, self.producer, TOPICS.history, RunOutcome)

    def letters(self) -> list[DeadLetter]:
        return decoded(self.codec, self.producer, TOPICS.dlq, DeadLetter)

    def outputs(self) -> list[RunOutput]:
        return decoded(self.codec, self.producer, TOPICS.run_output, RunOutput)

    def close(self) -> None:
        if self.fake_executors:
            self.attempts.pool.shutdown()
        else:  # the executors' resources too, as the worker closes them
            self.attempts.close()


# -- history sink and archiver --------------------------------------------------------------
_COLUMN = re.compile(r"^\s+(\w+)\s+(\w+)", re.MULTILINE)
_INSERT = re.compile(r"INSERT INTO \w+\.(\w+) \(([^)]*)\)", re.DOTALL)


class _Statement:
    """A prepared statement whose ``bind`` serializes every value as Cassandra's driver
    would for the column's type (a wrong type or an out-of-range number raises there)."""

    def __init__(self, types: list[Any]) -> None:
        self.types = types

    def bind(self, values: tuple[Any, ...]) -> Any:
        from cassandra.query import UNSET_VALUE

        assert len(values) == len(self.types), (len(values), len(self.types))
        for kind, value in zip(self.types, values, strict=True):
            if value is not UNSET_VALUE and value is not None:
                kind.serialize(value, 4)
        return values


class SchemaSession:
    """What ``HistoryTables`` asks of a session: statements prepared against the column
    types of the migrations (``consumers/cql/migrations``), without Cassandra."""

    CQL: ClassVar[dict[str, str]] = {
        "text": "UTF8Type",
        "int": "Int32Type",
        "bigint": "LongType",
        "timestamp": "DateType",
        "date": "SimpleDateType",
        "smallint": "ShortType",
    }

    def __init__(self) -> None:
        from cassandra import cqltypes

        root = Path(__file__).resolve().parents[1] / "consumers" / "cql" / "migrations"
        self.columns: dict[str, Any] = {}
        for path in sorted(root.glob("*.cql")):
            for name, kind in _COLUMN.findall(path.read_text()):
                if kind in self.CQL:
                    self.columns[name] = cqltypes.lookup_casstype(self.CQL[kind])
        self.bigint = cqltypes.lookup_casstype("LongType")
        self.int = cqltypes.lookup_casstype("Int32Type")

    def prepare(self, cql: str) -> _Statement:
        match = _INSERT.search(cql)
        if match is None:
            return _Statement([])  # a SELECT: never bound here
        names = [n.strip() for n in match.group(2).split(",")]
        using = [self.bigint] if "TIMESTAMP ?" in cql else []
        using += [self.int] if "TTL ?" in cql else []
        return _Statement([self.columns[n] for n in names] + using)


class SinkHarness:
    def __init__(self) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        s = self.sink = object.__new__(Sink)
        s.codec, s.topics = self.codec, TOPICS
        s.publisher = fake_publisher(self.codec, self.producer)
        s.tables = HistoryTables(SchemaSession(), "ks", ttl_s=86_400 * 30)
        s.outputs = OutputTable(SchemaSession(), "ks", ttl_s=86_400 * 14)
        s._output_topic = TOPICS.run_output
        s.faults = RecordFaults("sink", infrastructure=transient_errors())
        self.offset = 0

    def rows_of(self, value: bytes, topic: str = TOPICS.history) -> tuple[list[Any], str | None]:
        self.offset += 1
        return self.sink.rows_of(FakeMessage(topic, 0, self.offset, value, b"j"))


class ArchiverHarness:
    def __init__(self) -> None:
        self.codec = new_codec()
        self.producer = FakeProducer()
        a = self.archiver = object.__new__(Archiver)
        a.codec, a.dlq, a.letters = self.codec, TOPICS.dlq, False
        a.publisher = fake_publisher(self.codec, self.producer)
        a.faults = RecordFaults("archiver")
        self.offset = 0

    def accept(self, value: bytes) -> RunOutcome | None:
        self.offset += 1
        return self.archiver.accept(FakeMessage(TOPICS.history, 0, self.offset, value, b"j"))

    def letters(self) -> list[DeadLetter]:
        return decoded(self.codec, self.producer, TOPICS.dlq, DeadLetter)


# -- flows coordinator ----------------------------------------------------------------------
class Known:
    """The flow definitions a coordinator knows (``streams.flows.definitions``'s dict)."""

    def __init__(self, *flows: FlowDefinition) -> None:
        self.flows = {f.flow_id: f for f in flows}


class _Out:
    def __init__(self, sent: list[tuple[str, bytes]], topic: str) -> None:
        self.sent, self.topic = sent, topic

    async def send(self, key: bytes, value: bytes, headers: Any) -> None:
        self.sent.append((self.topic, value))


class Table(dict[str, str]):
    """The coordinator's faust table: rows as JSON text, every write acknowledged."""

    async def written(self) -> None:
        return None


@dataclass
class _Message:
    tp: tuple[str, int]
    offset: int
    key: bytes


class FaustEvent:
    def __init__(self, value: bytes, offset: int, key: bytes = b"f") -> None:
        self.value = value
        self.message = _Message((TOPICS.flow_events, 0), offset, key)


class FlowsHarness:
    def __init__(
        self, *flows: FlowDefinition, coordinator: type[Coordinator] = Coordinator
    ) -> None:
        self.codec = new_codec()
        self.coordinator = coordinator(SETTINGS, self.codec, Known(*flows))
        self.table = Table()
        self.sent: list[tuple[str, bytes]] = []
        out = {t: _Out(self.sent, t) for t in TOPICS.names()}
        self.runner = _Runner(self.coordinator, self.codec, self.table, out)
        self.offset = 0

    def handle(self, *values: bytes) -> None:
        events = []
        for value in values:
            self.offset += 1
            events.append(FaustEvent(value, self.offset))
        asyncio.run(self.runner.handle_batch(events))

    def on(self, topic: str, kind: type[Any]) -> list[Any]:
        return [self.codec.decode(v, kind) for t, v in self.sent if t == topic]

    def rows(self) -> JsonRows:
        return JsonRows(self.table)
