"""The history sink: ``cronstream.history`` into Cassandra, at least once, idempotently;
and the runs' output (``cronstream.run-output``, docs/run-output.md) the same way, into
its own table with its own, shorter TTL (``consumers.output``).

One process runs one ``Sink``: a member of the consumer group ``<prefix>.sink`` on the
history and run-output topics (KIP-848, each sink its share of each topic; manual
commits). Each step reads up to ``read_max`` records and hands them to
``Sink.write_and_commit``, the one commit procedure.

- **Idempotent.** Every outcome becomes the same rows however often it is written: the
  primary keys come from the outcome, and the write timestamp is its ``recorded_at``
  (``consumers.core.buckets.write_timestamp``). A redelivered outcome rewrites its rows.
- **Batched and concurrent.** Rows are grouped per table into unlogged batches of at
  most ``batch_rows`` rows and ``batch_bytes`` estimated bytes (under Cassandra's
  default 50 KiB failure threshold), ``in_flight`` batches at a time.
- **Cassandra down or slow.** A batch that is not acknowledged is sent again after a
  backoff (0.5 s doubling to ``backoff_max_s``). Meanwhile the partitions are paused
  (one assigned meanwhile at its first record) and polling goes on (the group keeps
  the sink), nothing is committed,
  ``cronstream_sink_cassandra_up`` is 0, and a warning is logged at each retry.
  Stopping in that state commits nothing: the next sink reads those outcomes again.
- **The registry away.** A record written with a schema id the sink has not seen yet
  waits for the registry the same way (paused, polling, nothing committed), logged once
  when the wait begins and once when it ends (``runtime.waiting``).
- **Bad input.** A record that is not a RunOutcome (a RunOutput on the run-output
  topic), or one over the limits, goes to
  ``dlq`` with its topic/partition/offset; so does one whose rows cannot be built (a
  bug its values reach, ``runtime.faults``); the partition goes on. Cassandra refusing
  or timing out is an outage, never a record's fault: it is waited out (above).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from cronstream.consumers.history import HistoryTables
from cronstream.consumers.output import OutputTable
from cronstream.runtime import metrics
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.offsets import consumer_lag
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter_for, is_record
from cronstream.runtime.kafka.stall import Held
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, wait_for
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import DeadLetter, RunOutcome
from cronstream.schemas.limits import outcome_problems, output_problems, refusal
from cronstream.schemas.output import RunOutput
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import AnyEvent

log = logging.getLogger("cronstream.sink")
STAGE = "sink"
ROW_OVERHEAD_BYTES = 200  # per row in a batch: columns, timestamps, framing (measured ~170)
E = TypeVar("E", RunOutcome, RunOutput)
Rows = list[tuple[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkConfig(MemberConfig):
    name: str = "sink"
    read_max: int = 2000
    batch_rows: int = 64
    batch_bytes: int = 32_768
    in_flight: int = 16
    backoff_max_s: float = 10.0


class _QuietBatchWarnings(logging.Filter):
    """Cassandra warns about every unlogged batch spanning over 10 partitions (its
    ``unlogged_batch_across_partitions_warn_threshold``); the sink's are by design
    (fewer, larger requests), so that one warning is not repeated in its log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Unlogged batch covering" not in record.getMessage()


class Stopped(Exception):
    """Asked to stop while waiting for Cassandra or the registry: nothing more is
    committed."""


@dataclass(slots=True)
class _Batch:
    table: str
    statements: list[Any]
    size: int = 0


@cache
def transient_errors() -> tuple[type[BaseException], ...]:
    """Driver errors that mean "Cassandra is down, restarting or slow": retried."""
    from cassandra import (
        CoordinationFailure,
        OperationTimedOut,
        Unavailable,
        WriteTimeout,
    )
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    return (
        NoHostAvailable,
        OperationTimedOut,
        Unavailable,
        WriteTimeout,
        CoordinationFailure,
        ConnectionException,
        OverloadedErrorMessage,
        IsBootstrappingErrorMessage,
    )


class RowWriter:
    """Writes rows to Cassandra in unlogged batches, ``in_flight`` batches at a time,
    and says which batches were not acknowledged (the sink; the benchmark's loader)."""

    def __init__(
        self,
        session: Any,
        *,
        batch_rows: int = 64,
        batch_bytes: int = 32_768,
        in_flight: int = 16,
    ) -> None:
        self.session = session
        self.batch_rows = batch_rows
        self.batch_bytes = batch_bytes
        self.in_flight = in_flight
        self.transient = transient_errors()

    def batches(self, rows: list[tuple[str, Any]]) -> list[_Batch]:
        """Group rows per table into batches of at most ``batch_rows`` rows and
        ``batch_bytes`` estimated bytes."""
        limit_rows, limit_bytes = self.batch_rows, self.batch_bytes
        open_: dict[str, _Batch] = {}
        done: list[_Batch] = []
        for table, statement in rows:
            size = ROW_OVERHEAD_BYTES + _text_bytes(statement)
            batch = open_.get(table)
            if batch is not None and (
                len(batch.statements) >= limit_rows or batch.size + size > limit_bytes
            ):
                done.append(batch)
                batch = None
            if batch is None:
                batch = open_[table] = _Batch(table, [])
            batch.statements.append(statement)
            batch.size += size
        done.extend(open_.values())
        return done

    def send(self, batches: list[_Batch]) -> list[_Batch]:
        """Send every batch, ``in_flight`` at a time; returns those not acknowledged."""
        from cassandra.query import BatchStatement, BatchType

        failed: list[_Batch] = []
        in_flight: list[tuple[Any, _Batch, float]] = []

        def settle_oldest() -> None:
            future, batch, sent = in_flight.pop(0)
            try:
                future.result()
            except self.transient as exc:
                metrics.labelled(metrics.sink_write_failures, type(exc).__name__).inc()
                failed.append(batch)
                return
            metrics.sink_write_latency.observe(time.monotonic() - sent)
            metrics.labelled(metrics.sink_rows, batch.table).inc(len(batch.statements))

        session = self.session
        for batch in batches:
            if len(batch.statements) == 1:
                request = batch.statements[0]
            else:
                request = BatchStatement(batch_type=BatchType.UNLOGGED)
                for statement in batch.statements:
                    request.add(statement)
            try:
                future = session.execute_async(request)
            except self.transient as exc:
                metrics.labelled(metrics.sink_write_failures, type(exc).__name__).inc()
                failed.append(batch)
                continue
            in_flight.append((future, batch, time.monotonic()))
            if len(in_flight) >= self.in_flight:
                settle_oldest()
        while in_flight:
            settle_oldest()
        return failed


class Sink:
    def __init__(self, settings: Settings, config: SinkConfig) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self._output_topic = self.topics.run_output
        self.codec = Codec(registry_client(settings))
        self.codec.writer_id(f"{self.topics.dlq}-value", DeadLetter)  # before the outages
        # A broker outage never fails a dead letter: librdkafka keeps trying (no limit).
        no_limit: dict[str, Any] = {"message.timeout.ms": 0}
        self.publisher = Publisher(settings, codec=self.codec, **no_limit)
        self.transient = transient_errors()
        # Cassandra's errors are an outage, never a record's fault (none is expected
        # while building rows, which sends nothing).
        self.faults = RecordFaults(STAGE, infrastructure=(*self.transient, Stopped))
        logging.getLogger("cassandra.protocol").addFilter(_QuietBatchWarnings())
        self.cluster: Any = None
        self.tables: HistoryTables | None = None
        self.outputs: OutputTable | None = None
        self.writer: RowWriter | None = None
        # Each sink its share of each topic (``balance="per-topic"``): counting
        # partitions gave one of two sinks all of history and the other all of
        # run-output.
        self.member = GroupMember(settings, config, balance="per-topic", log=log)
        self.consumer = self.member.consumer
        self.written: dict[tuple[str, int], int] = {}  # next offset, written, per partition
        self.step_offsets: dict[tuple[str, int], int] = {}  # the step being written
        self.carry: list[ConsumedMessage] = []  # read while waiting out an outage
        self.should_stop: Callable[[], bool] = lambda: False
        self._maintenance = 0.0

    # -- lifecycle ----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        try:
            self._connect()
            self.member.subscribe(
                [self.topics.history, self._output_topic], revoking=self._revoking, lost=self._lost
            )
            while not should_stop():
                self.step()
        except Stopped:
            log.warning(
                "stopped while waiting for Cassandra or the schema registry; the "
                "uncommitted outcomes are read again by the next sink"
            )
        finally:
            self.close()

    def _connect(self) -> None:
        """Connect and prepare the statements; while Cassandra is away, wait for it
        (``runtime.waiting``: polling the group meanwhile)."""

        def connect() -> None:
            cluster, session = cassandra_session(self.settings)
            try:  # preparing the statements
                ttl_s = self.settings.history_ttl_days * 86400
                self.tables = HistoryTables(session, self.settings.keyspace, ttl_s=ttl_s)
                output_ttl_s = self.settings.output_ttl_days * 86400
                self.outputs = OutputTable(session, self.settings.keyspace, ttl_s=output_ttl_s)
            except BaseException:
                cluster.shutdown()
                raise
            self.cluster = cluster
            self.writer = RowWriter(
                session,
                batch_rows=self.config.batch_rows,
                batch_bytes=self.config.batch_bytes,
                in_flight=self.config.in_flight,
            )

        metrics.sink_cassandra_up.set(0)
        try:
            wait_for(
                f"sink {self.config.name}",
                connect,
                log=log,
                pause=self._wait,
                max_delay=self.config.backoff_max_s,
            )
        except StopWaiting as exc:
            raise Stopped from exc
        metrics.sink_cassandra_up.set(1)

    def close(self) -> None:
        try:
            self._commit(self.written, wait=True)
        finally:
            self.member.close()
            self.publisher.close()
            if self.cluster is not None:
                self.cluster.shutdown()

    def _revoking(self, partitions: list[TopicPartition]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        # What is written is committed before the partitions move; what the step being
        # written holds for them is not (the next owner rewrites it).
        self._commit({k: v for k, v in self.written.items() if k in gone}, wait=True)
        self._forget(gone)

    def _lost(self, partitions: list[TopicPartition]) -> None:
        self._forget({(tp.topic, tp.partition) for tp in partitions})

    def _forget(self, gone: set[tuple[str, int]]) -> None:
        for key in gone:
            self.written.pop(key, None)
            self.step_offsets.pop(key, None)
        self.carry = [m for m in self.carry if (m.topic(), m.partition()) not in gone]

    # -- the loop -----------------------------------------------------------------------
    def step(self) -> None:
        messages, self.carry = self.carry, []
        room = self.config.read_max - len(messages)
        if room > 0:
            messages.extend(self.member.consume(room, 0.2))
        if messages:
            self.write_and_commit(messages)
        if time.monotonic() >= self._maintenance:
            self._maintain()

    def write_and_commit(self, messages: list[ConsumedMessage]) -> None:
        """Make a step's outcomes durable in Cassandra, then move the offsets. In order:

        1. Decode each record into the rows it writes; one that is not a RunOutcome
           (a RunOutput on the run-output topic), is over the limits or whose rows
           cannot be built becomes a DLQ record.
           (Writer schemas not seen yet are asked first; while the registry is away
           the sink waits, as in 2.)
        2. Write every row, in batches, ``in_flight`` at a time; batches Cassandra did
           not acknowledge are sent again after a backoff, until all are (or the
           process is asked to stop: then nothing is committed).
        3. Flush the DLQ records (a failed delivery raises before any commit).
        4. Commit, per partition, the offset after the step's last record
           (asynchronously; synchronously when partitions move or the sink stops).

        A crash anywhere before 4 leaves the offsets where they were: the next sink
        reads the same outcomes again and rewrites the same rows.
        """
        assert self.tables is not None
        # 1. decode (the writer schemas first: waiting for the registry, if away)
        self._learn_writers(messages)
        self.step_offsets = {}
        rows: list[tuple[str, Any]] = []
        outcomes = 0
        for msg in messages:
            if not is_record(msg):
                continue
            key = (msg.topic() or "", msg.partition() or 0)
            self.step_offsets[key] = (msg.offset() or 0) + 1
            built, reason = self.rows_of(msg)
            if reason is not None:
                letter = dead_letter_for(msg, stage=STAGE, reason=reason)
                self.publisher.publish(self.topics.dlq, letter)
                continue
            rows.extend(built)
            if key[0] != self._output_topic:
                outcomes += 1
        # 2. write
        self._write(rows)
        # 3. flush (a broker away: wait for it, polling, as for Cassandra)
        while not self.publisher.settled(1.0):
            log.warning("the broker has not acknowledged the dead letters yet; waiting")
            if not self._wait(1.0):
                raise Stopped
        # 4. commit
        self.written.update(self.step_offsets)
        self._commit(self.step_offsets, wait=False)
        metrics.sink_outcomes.inc(outcomes)

    def rows_of(self, msg: ConsumedMessage) -> tuple[Rows, str | None]:
        """One record's rows, or why it goes to the DLQ instead: not a RunOutcome (a
        RunOutput on the run-output topic), over the limits (Cassandra would refuse its
        row, and the sink stop on it), or a bug its values reach (``runtime.faults``).
        Nothing here talks to Cassandra."""
        if msg.topic() == self._output_topic:
            outputs = self.outputs
            assert outputs is not None
            return self._rows(msg, RunOutput, output_problems, lambda o: [outputs.row(o)])
        assert self.tables is not None
        return self._rows(msg, RunOutcome, outcome_problems, self.tables.rows)

    def _rows(
        self,
        msg: ConsumedMessage,
        kind: type[E],
        problems_of: Callable[[E], list[str]],
        rows_of: Callable[[E], Rows],
    ) -> tuple[Rows, str | None]:
        record: AnyEvent | None = None
        try:
            record = self.codec.decode(msg.value(), kind)
            problems = problems_of(record)
            if problems:
                self.faults.ok()
                return [], refusal(problems)
            rows = rows_of(record)
        except DecodeError as exc:
            self.faults.ok()
            return [], f"not a {kind.__name__}: {exc}"
        except Exception as exc:
            tenant = record.tenant if isinstance(record, RunOutcome | RunOutput) else None
            return [], self.faults.fault_at(exc, msg, tenant=tenant).reason
        self.faults.ok()
        return rows, None

    # -- writing ------------------------------------------------------------------------
    def _write(self, rows: list[tuple[str, Any]]) -> None:
        assert self.writer is not None
        pending = self.writer.batches(rows)
        delay = 0.5
        with self._holding() as pause:
            while True:
                pending = self.writer.send(pending)
                if not pending:
                    metrics.sink_cassandra_up.set(1)
                    return
                metrics.sink_cassandra_up.set(0)
                log.warning(
                    "cassandra did not acknowledge %d batches; retrying in %.1fs "
                    "(offsets are held)",
                    len(pending),
                    delay,
                )
                if not pause(delay):
                    raise Stopped
                delay = min(delay * 2, self.config.backoff_max_s)

    def _learn_writers(self, messages: list[ConsumedMessage]) -> None:
        """The writer schemas of the step's records, asked of the registry before
        anything is decoded: while it is away the sink waits (``runtime.waiting``), its
        partitions paused and nothing committed, as for Cassandra."""
        with self._holding() as pause:
            try:
                learn_writers(
                    self.codec, messages, what=f"sink {self.config.name}", log=log, pause=pause
                )
            except StopWaiting as exc:
                raise Stopped from exc

    @contextmanager
    def _holding(self) -> Iterator[Callable[[float], bool]]:
        """A pause for waiting out an outage: the first one pauses every assigned
        partition (polling goes on, the group keeps the sink), a partition assigned
        meanwhile is paused at its first record (kept for the next step, with the
        others in ``carry``: a record a partition, not its backlog), and all those
        still assigned are resumed at the end."""
        held = Held(self.consumer)  # holds no records: those arriving go to ``carry``

        def keep(msg: ConsumedMessage) -> None:
            self.carry.append(msg)
            if is_record(msg):
                held.pause_partitions_of([msg])

        def pause(seconds: float) -> bool:
            if not held.paused:
                held.pause_all()
            return self.member.wait(seconds, self.should_stop, keep)

        try:
            yield pause
        finally:
            held.resume()

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` while polling (group membership, rebalances); False when the
        process is asked to stop. A record that arrives anyway is kept for the next step."""
        return self.member.wait(seconds, self.should_stop, self.carry.append)

    def _commit(self, offsets: dict[tuple[str, int], int], *, wait: bool) -> None:
        if not offsets:
            return
        parts = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        self.member.commit(parts, wait=wait, then="those outcomes will be rewritten")

    def _maintain(self) -> None:
        self._maintenance = time.monotonic() + 5
        for tp, lag in consumer_lag(self.consumer, list(self.consumer.assignment())):
            metrics.labelled(metrics.sink_consumer_lag, str(tp.partition)).set(lag)


def _text_bytes(statement: Any) -> int:
    """The bytes a bound statement's values carry (the error text dominates)."""
    return sum(len(v) for v in statement.values if isinstance(v, bytes))
