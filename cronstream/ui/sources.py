"""What the dashboard reads besides the API's backend: the stack's Prometheus (the
overview's live figures and charts), the dead-letter topic (the DLQ browser, its
replay), the audit trail (its newest entries) and the flows topic (the flows'
definitions, followed)."""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from cronstream.monitoring import DUE_TO_START_P99_BY_PRIORITY
from cronstream.runtime.consoles import ConsoleAccess
from cronstream.runtime.kafka.clients import TopicPartition, consume_ready, kafka_consumer
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.audit import AuditRecord
from cronstream.schemas.catalog import AUDIT, DLQ, Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import DeadLetter
from cronstream.schemas.flows import FlowDefinition
from cronstream.schemas.serde import Codec
from cronstream.streams.flows.definitions import Definitions

log = logging.getLogger("cronstream.ui")

# The overview's figures: name -> PromQL (raw expressions, so that they answer before
# the recording rules' first evaluation).
QUERIES = {
    "fires": "sum(rate(cronstream_scheduler_fires_total[1m]))",
    "runs": "sum by (status) (rate(cronstream_worker_runs_finished_total[1m]))",
    "hour": "sum by (status) (increase(cronstream_worker_runs_finished_total[1h]))",
    # Lateness where users feel it: an attempt's start minus its due time, per priority
    # (the scheduler's emit skew is held at 0 by the lookahead).
    "skew": DUE_TO_START_P99_BY_PRIORITY,
    "lag": 'sum by (role) (cronstream_worker_consumer_lag{role="worker"}) or '
    'sum by (role) (cronstream_sink_consumer_lag{role="sink"})',
    "owned": 'sum by (process) (cronstream_scheduler_partitions_owned{role="scheduler"})',
    "partitions": 'max(cronstream_scheduler_partitions{role="scheduler"})',
    "letters": "sum by (stage) (cronstream_dead_letters_total)",
    "up": "up",
}


def tenant_queries(tenant: str) -> dict[str, str]:
    """``QUERIES`` as a tenant's overview has them: its own runs (the workers' per-tenant
    counter) in place of everyone's, and no dead-letter counts (every tenant's)."""
    runs = f'cronstream_worker_tenant_runs_total{{tenant="{tenant}"}}'  # a-z, 0-9, '-'
    queries = {name: q for name, q in QUERIES.items() if name != "letters"}
    queries["runs"] = f"sum by (status) (rate({runs}[1m]))"
    queries["hour"] = f"sum by (status) (increase({runs}[1h]))"
    return queries


@dataclass
class Overview:
    error: str | None = None  # Prometheus unreachable or refusing: why
    fires_per_s: float = 0.0
    runs_per_s: dict[str, float] = field(default_factory=dict)  # status -> runs/s
    last_hour: dict[str, float] = field(default_factory=dict)  # status -> runs
    skew_p99_ms: float | None = None  # due-to-start p99, the latest priority's
    skew_by_priority: dict[str, float] = field(default_factory=dict)  # priority -> ms
    lag: dict[str, float] = field(default_factory=dict)  # workers / sink -> records
    owned: dict[str, float] = field(default_factory=dict)  # scheduler -> partitions
    partitions: float | None = None
    letters: dict[str, float] = field(default_factory=dict)  # stage -> since start
    processes: list[dict[str, Any]] = field(default_factory=list)  # role, process, up
    dlq_records: int | None = None  # in the DLQ topic (Kafka's count)

    def as_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Prometheus:
    """The Prometheus the dashboard asks, with its login and the CA its certificate is
    checked against (``runtime.consoles``)."""

    def __init__(self, access: ConsoleAccess, timeout: float = 2.0) -> None:
        self.url = access.url
        self.client = access.client(timeout=timeout)

    def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """``expr``'s series over [start, end] (unix seconds), a point every ``step``
        seconds: (labels, [(time, value)]) each, NaN points left out. Raises httpx's
        errors, KeyError or ValueError on an answer that is not Prometheus's."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        reply = self.client.get(f"{self.url}/api/v1/query_range", params=params)
        reply.raise_for_status()
        out = []
        for item in reply.json()["data"]["result"]:
            points = [(float(t), float(v)) for t, v in item["values"]]
            out.append((item["metric"], [(t, v) for t, v in points if not math.isnan(v)]))
        return out

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        reply = self.client.get(f"{self.url}/api/v1/query", params={"query": expr})
        reply.raise_for_status()
        body = reply.json()
        out = []
        for item in body["data"]["result"]:
            value = float(item["value"][1])
            if not math.isnan(value):  # NaN: no data in the window
                out.append((item["metric"], value))
        return out

    def overview(self, tenant: str | None = None) -> Overview:
        """The figures of the whole stack, or with ``tenant`` that tenant's runs (the
        stack's health figures besides: fires/s, skew, lag, processes)."""
        got = Overview()
        queries = QUERIES if tenant is None else tenant_queries(tenant)
        try:
            answers = {name: self.query(expr) for name, expr in queries.items()}
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            got.error = f"Prometheus at {self.url} did not answer ({exc})"
            return got
        got.fires_per_s = sum(v for _, v in answers["fires"])
        got.runs_per_s = {m.get("status", "?"): v for m, v in answers["runs"]}
        got.last_hour = {m.get("status", "?"): round(v) for m, v in answers["hour"]}
        got.skew_by_priority = {m.get("priority", "?"): v * 1000 for m, v in answers["skew"]}
        got.skew_p99_ms = max(got.skew_by_priority.values(), default=None)
        names = {"worker": "workers", "sink": "history sink"}
        got.lag = {names.get(m.get("role", ""), m.get("role", "?")): v for m, v in answers["lag"]}
        got.owned = {m.get("process", "?"): v for m, v in answers["owned"]}
        total = [v for _, v in answers["partitions"]]
        got.partitions = total[0] if total else None
        got.letters = {m.get("stage", "?"): v for m, v in answers.get("letters", [])}
        got.processes = sorted(
            (
                {
                    "role": m.get("role", m.get("job", "?")),
                    "process": m.get("process", m.get("instance", "?")),
                    "up": v == 1,
                }
                for m, v in answers["up"]
            ),
            key=lambda p: (p["role"], p["process"]),
        )
        return got

    def close(self) -> None:
        self.client.close()


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    timestamp_ms: int
    value: bytes | None


def tail(
    consumer: Any, topic: str, ends: dict[int, tuple[int, int]], limit: int, wait_s: float = 10.0
) -> list[Record]:
    """The newest ``limit`` records of ``topic`` (``ends``: partition -> (low, high)
    offsets), newest first: the last ``limit`` of each partition read (for at most
    ``wait_s``), then merged by timestamp. The caller holds ``consumer`` alone."""
    # partition -> (first offset read, end)
    ranges = {p: (max(low, high - limit), high) for p, (low, high) in ends.items() if low < high}
    if not ranges:
        return []
    consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in ranges.items()])
    got: list[Record] = []
    deadline = time.monotonic() + wait_s
    try:
        while ranges and (left := deadline - time.monotonic()) > 0:
            for msg in consume_ready(consumer, 500, left):
                if msg.error() is not None:
                    continue
                p, offset = msg.partition() or 0, msg.offset() or 0
                got.append(Record(p, offset, msg.timestamp()[1], msg.value()))
                if p in ranges and offset + 1 >= ranges[p][1]:
                    del ranges[p]
    finally:
        consumer.unassign()
    got.sort(key=lambda r: (r.timestamp_ms, r.offset), reverse=True)
    return got[:limit]


@dataclass(frozen=True)
class Letter:
    partition: int
    offset: int
    letter: DeadLetter | None  # None: the DLQ record itself is unreadable
    problem: str | None = None


def replayable(letter: DeadLetter) -> bool:
    """Whether ``letter`` keeps its source record (a run given up on after its attempts
    does not: it was a good record)."""
    return letter.source_value is not None and letter.source_partition >= 0


class DeadLetters:
    """The last records of the DLQ topic, newest first; a replay writes a letter's
    source record (key and value as they were) back to its source topic."""

    def __init__(self, settings: Settings, codec: Codec, publisher: Publisher) -> None:
        topics = Topics(settings)
        self.topic = topics.dlq
        self.partitions = topics.partitions(DLQ)
        self.codec = codec
        self.publisher = publisher
        self.consumer = kafka_consumer(settings)
        self.lock = threading.Lock()  # one consumer, requests on several threads

    def _ends(self) -> dict[int, tuple[int, int]]:
        """partition -> (low, high) offsets."""
        return {
            p: watermarks(self.consumer, TopicPartition(self.topic, p), timeout=10)
            for p in range(self.partitions)
        }

    def count(self) -> int:
        with self.lock:
            return sum(high - low for low, high in self._ends().values())

    def last(self, limit: int) -> list[Letter]:
        """Up to ``limit`` letters of each partition, the newest ``limit`` of all first."""
        with self.lock:
            return self._last(limit)

    def _last(self, limit: int) -> list[Letter]:
        found = tail(self.consumer, self.topic, self._ends(), limit)
        return [self._letter(r.partition, r.offset, r.value) for r in found]

    def _letter(self, partition: int, offset: int, value: bytes | None) -> Letter:
        try:
            return Letter(partition, offset, self.codec.decode(value, DeadLetter))
        except DecodeError as exc:
            return Letter(partition, offset, None, str(exc))

    def find(self, partition: int, offset: int) -> DeadLetter:
        """The letter at ``partition``/``offset`` (LookupError: none readable there)."""
        with self.lock:
            self.consumer.assign([TopicPartition(self.topic, partition, offset)])
            try:
                msg = consume_ready(self.consumer, 1, 10)
            finally:
                self.consumer.unassign()
        if not msg or msg[0].error() is not None or msg[0].offset() != offset:
            raise LookupError(f"no dead letter at {self.topic}/{partition}@{offset}")
        letter = self._letter(partition, offset, msg[0].value())
        if letter.letter is None:
            raise LookupError(f"the dead letter at {partition}@{offset} is unreadable")
        return letter.letter

    def replay(self, letter: DeadLetter) -> None:
        """Write the letter's source record back where it came from, as it was."""
        if not replayable(letter):
            raise LookupError(
                "this letter keeps no source record to replay (a run given up "
                "on after its attempts: trigger its job again instead)"
            )
        key = letter.source_key if letter.source_key is not None else b""
        self.publisher.produce_raw(
            letter.source_topic, key, letter.source_value, [("replayed_from", self.topic.encode())]
        )
        self.publisher.flush()

    def close(self) -> None:
        self.consumer.close()


class AuditTrail:
    """The newest entries of the audit trail (``schemas.audit``), every job's: the
    dashboard's global feed. One job's whole trail is ``JobClient.audit_log``'s."""

    def __init__(self, settings: Settings, codec: Codec) -> None:
        topics = Topics(settings)
        self.topic = topics.audit
        self.partitions = topics.partitions(AUDIT)
        self.codec = codec
        self.consumer = kafka_consumer(settings)
        self.lock = threading.Lock()  # one consumer, requests on several threads
        self.unreadable = 0  # entries met that are no AuditRecord (skipped)

    def last(self, limit: int) -> list[AuditRecord]:
        """Up to ``limit`` entries, newest first (an unreadable one skipped)."""
        with self.lock:
            ends = {
                p: watermarks(self.consumer, TopicPartition(self.topic, p), timeout=10)
                for p in range(self.partitions)
            }
            found = tail(self.consumer, self.topic, ends, limit)
        out = []
        for record in found:
            try:
                out.append(self.codec.decode(record.value, AuditRecord))
            except DecodeError:
                self.unreadable += 1
        return out

    def close(self) -> None:
        self.consumer.close()


class FlowBook:
    """The flows' definitions, the flows topic followed by a thread (the flows
    coordinator's ``Definitions``): flow id -> FlowDefinition; ``ready`` once read to
    the end it had at start."""

    def __init__(self, settings: Settings, codec: Codec) -> None:
        self.definitions = Definitions(settings, codec)
        self.definitions.start()

    @property
    def flows(self) -> dict[str, FlowDefinition]:
        return self.definitions.flows

    @property
    def ready(self) -> bool:
        return self.definitions.caught_up.is_set()

    def close(self) -> None:
        self.definitions.stop()


@dataclass(frozen=True)
class Reads:
    """What the pages read besides the API's backend (without ``flows`` or ``audit``,
    the flow pages and the audit feed show none)."""

    prometheus: Prometheus
    letters: DeadLetters
    flows: FlowBook | None = None
    audit: AuditTrail | None = None

    def parts(self) -> list[Any]:
        """What to close at the end."""
        return [p for p in (self.prometheus, self.letters, self.flows, self.audit) if p]
