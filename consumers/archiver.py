"""The archiver: ``cronstream.history`` into the archive table (``consumers.lakehouse``).

One process runs one ``Archiver``: a member of the group ``<prefix>.archiver`` on the
history topic, beside the Cassandra sink (its own group: each reads every outcome). It
buffers each partition's outcomes and flushes a partition when it holds ``flush_rows``
of them or its oldest waited ``flush_s``. The one commit procedure (``flush``):

1. Append the partition's buffer to the Iceberg table and move the table's property
   ``cronstream.offset.<partition>`` to the offset after the buffer's last record, in
   one snapshot (``ArchiveTable.write``: data files first, then one compare-and-swap of
   the table's metadata in the catalog).
2. Commit that offset to the group.

The table is the truth: on assignment reading starts at the committed offset, and records
below the table's offset (written, then a crash before 2) are skipped; a crash before the
snapshot leaves data files no snapshot references (deleted later by
``ArchiveTable.remove_orphans``) and the property where it was, so the same records are
written again, once. A writer whose partition moved to another archiver without it
noticing finds the property moved and writes nothing (``Fenced``). A record that is not
a RunOutcome is skipped (the sink dead-letters it) and counted. One that makes the
archiver raise (a bug its values reach, ``runtime.faults``) goes to the DLQ, acknowledged
before its offset is committed.

Why stream the topic rather than export days from Cassandra: reading a day back out of
Cassandra costs as much as writing it (every outcome of every table, at 10,000 runs/s
864 million rows a day) and competes with the hot tier; the topic has every outcome
once, in order, with offsets that make the export resumable and exactly-once. The daily
steps are maintenance, by the owner of partition 0: each finished day's files merged into
one sorted file per tenant, finished months into one per tenant (``compact_finished``),
the partitions wholly past the retention deleted,
old snapshots forgotten and unreferenced files removed (``expire``, ``remove_orphans``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

from cronstream.consumers.compaction import compact_finished
from cronstream.consumers.core.buckets import day_of
from cronstream.consumers.lakehouse import ArchiveTable, Fenced, to_arrow
from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter_for, is_record
from cronstream.runtime.kafka.stall import Held
from cronstream.runtime.lakehouse import Lakehouse, lakehouse
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import DeadLetter, RunOutcome
from cronstream.schemas.serde import Codec

log = logging.getLogger("cronstream.archiver")
STAGE = "archiver"
# The longest partition folder name: ``tenant=<it, URL-encoded>`` is one path segment of
# the table's files (object stores on filesystems, and local warehouses, cap a name at
# 255 bytes).
FOLDER_NAME_MAX = 255


@dataclass(frozen=True, slots=True, kw_only=True)
class ArchiverConfig(MemberConfig):
    name: str = "archiver"
    flush_rows: int = 200_000
    flush_s: float = 60.0
    compact_every_s: float = 3600.0
    read_max: int = 5000
    keep_days: int = 366  # days before today the archive keeps (0: all)


@dataclass(slots=True)
class _Buffer:
    first: int
    opened: float
    next_offset: int = 0
    outcomes: list[RunOutcome] = field(default_factory=list)


class Archiver:
    def __init__(
        self, settings: Settings, config: ArchiverConfig, where: Lakehouse | None = None
    ) -> None:
        self.config = config
        self.table = ArchiveTable(where or lakehouse(settings))
        self.topic = Topics(settings).history
        self.codec = Codec(registry_client(settings))
        self.member = GroupMember(settings, config, log=log)
        self.consumer = self.member.consumer
        self.dlq = Topics(settings).dlq
        # A broker outage never fails a dead letter: librdkafka keeps trying (no limit).
        no_limit: dict[str, Any] = {"message.timeout.ms": 0}
        self.publisher = Publisher(settings, codec=self.codec, **no_limit)
        self.codec.writer_id(f"{self.dlq}-value", DeadLetter)  # never asked again
        self.faults = RecordFaults(STAGE)
        self.letters = False  # dead letters published, not acknowledged yet
        self.buffers: dict[int, _Buffer] = {}
        self.checkpoints: dict[int, int | None] = {}
        self._compacted = 0.0
        self.should_stop: Callable[[], bool] = lambda: False

    def run(self, should_stop: Callable[[], bool]) -> None:
        self.member.subscribe(
            [self.topic], assigned=self._assigned, revoking=self._revoking, lost=self._lost
        )
        self.should_stop = should_stop
        try:
            try:
                while not should_stop():
                    self.step()
            except StopWaiting:  # the step's records were not buffered: read again
                log.warning("stopped while waiting for the schema registry")
            for partition in list(self.buffers):
                self.flush(partition, wait=True)
        finally:
            self.member.close()
            self.publisher.close()
            self.table.close()

    # -- partitions moving ----------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.checkpoints[tp.partition] = self.table.checkpoint(tp.partition)

    def _revoking(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # what is buffered is written before the partition moves
            if tp.partition in self.buffers:
                self.flush(tp.partition, wait=True)
            self.checkpoints.pop(tp.partition, None)

    def _lost(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # the next owner reads them again from the checkpoint
            self.buffers.pop(tp.partition, None)
            self.checkpoints.pop(tp.partition, None)

    # -- the loop ---------------------------------------------------------------------------
    def step(self) -> None:
        now = time.monotonic()
        skipped = self._buffer(self._read(), now)
        if skipped:
            self._commit({p: self.checkpoints[p] for p in skipped}, wait=False)
        for partition, buffer in list(self.buffers.items()):
            if (
                len(buffer.outcomes) >= self.config.flush_rows
                or now - buffer.opened >= self.config.flush_s
            ):
                self.flush(partition)
        if now >= self._compacted + self.config.compact_every_s:
            self._compact()

    def _read(self) -> list[ConsumedMessage]:
        """A step's records, their writer schemas known: while the registry is away the
        archiver waits for it (``runtime.waiting``), every partition paused, polling
        on (a record of a partition assigned meanwhile is kept, and waits too)."""
        messages = self.member.consume(self.config.read_max, 0.5, ready=True)
        held = Held(self.consumer)

        def pause(seconds: float) -> bool:
            held.pause_all()
            return self.member.wait(seconds, self.should_stop, lambda msg: held.hold([msg]))

        batch = messages
        while batch:
            learn_writers(
                self.codec, batch, what=f"archiver {self.config.name}", log=log, pause=pause
            )
            batch = held.take()
            messages += batch
        held.resume()
        return messages

    def accept(self, msg: ConsumedMessage) -> RunOutcome | None:
        """The outcome of one history record to archive, or None: not a RunOutcome
        (skipped: the sink dead-letters it), or dead-lettered (``letters``)."""
        outcome = None
        try:
            outcome = self.codec.decode(msg.value(), RunOutcome)
            problem = folder_problem(outcome.tenant)
            day_of(outcome.scheduled_at)
        except DecodeError:
            self.faults.ok()
            metrics.archiver_skipped.inc()
            return None
        except Exception as exc:
            tenant = outcome.tenant if outcome is not None else None
            problem = self.faults.fault_at(exc, msg, tenant=tenant).reason
        else:
            self.faults.ok()
        if problem is None:
            return outcome
        letter = dead_letter_for(msg, stage=STAGE, reason=problem)
        self.publisher.publish(self.dlq, letter)
        self.letters = True
        return None

    def _buffer(self, messages: list[ConsumedMessage], now: float) -> set[int]:
        """Add the records to their partitions' buffers; returns the partitions whose
        records were archived already (written, then a crash before the commit, which
        is made now)."""
        skipped: set[int] = set()
        for msg in messages:
            if not is_record(msg):
                continue
            partition, offset = msg.partition() or 0, msg.offset() or 0
            done = self.checkpoints.get(partition)
            if done is not None and offset < done:
                skipped.add(partition)
                continue
            buffer = self.buffers.get(partition)
            if buffer is None:
                buffer = self.buffers[partition] = _Buffer(first=offset, opened=now)
            buffer.next_offset = offset + 1
            outcome = self.accept(msg)
            if outcome is not None:
                buffer.outcomes.append(outcome)
        return skipped

    def flush(self, partition: int, *, wait: bool = False) -> None:
        """The commit procedure (the module's text): the table's snapshot, then the offset. Dead
        letters of the buffer's records are acknowledged first (the broker away: the
        flush waits for a later step; at a handover, up to 30 s)."""
        if self.letters:
            if wait:
                self.publisher.flush()
            elif not self.publisher.settled(1.0):
                log.warning("the broker has not acknowledged the dead letters yet; the flush waits")
                return
            self.letters = False
        buffer = self.buffers.pop(partition)
        began = time.monotonic()
        try:
            self.table.write(
                partition,
                self.checkpoints.get(partition),
                buffer.next_offset,
                to_arrow(buffer.outcomes),
            )
        except Fenced as exc:  # another archiver wrote this partition: its offset stands
            log.warning(
                "%s; this archiver's %d buffered outcomes are dropped", exc, len(buffer.outcomes)
            )
            self.checkpoints[partition] = self.table.checkpoint(partition)
            return
        self.checkpoints[partition] = buffer.next_offset
        metrics.archiver_outcomes.inc(len(buffer.outcomes))
        metrics.archiver_files.inc(
            len({(day_of(o.scheduled_at), o.tenant) for o in buffer.outcomes})
        )
        metrics.archiver_flush_seconds.set(time.monotonic() - began)
        self._commit({partition: buffer.next_offset}, wait=wait)

    def _commit(self, offsets: dict[int, int | None], *, wait: bool) -> None:
        parts = [TopicPartition(self.topic, p, o) for p, o in offsets.items() if o is not None]
        # Refused: the checkpoint stands, nothing is written twice.
        self.member.commit(parts, wait=wait, then="the checkpoint holds the position")

    def _compact(self) -> None:
        """Daily files of finished days, and days past the retention deleted, by the
        owner of partition 0 only (one at a time for an archive that several archivers
        share)."""
        self._compacted = time.monotonic()
        if 0 not in self.checkpoints:
            return
        today = datetime.now(UTC).date()
        done = compact_finished(self.table, today)
        for part, merged in done.items():
            log.info("compacted %s of %s: %d files into one", part.label(), part.tenant, merged)
        keep = self.config.keep_days
        for part in self.table.expire(today, keep):
            log.info("expired %s of %s: older than %d days", part.label(), part.tenant, keep)
        removed = self.table.remove_orphans()
        if removed:
            log.info("removed %d files no snapshot references", removed)


def folder_problem(tenant: str) -> str | None:
    """Why ``tenant`` cannot name an archive partition (``tenant=<it, URL-encoded as
    pyiceberg names the folder>``), or None."""
    if not tenant or len(f"tenant={quote_plus(tenant)}".encode()) > FOLDER_NAME_MAX:
        return (
            f"tenant {tenant[:80]!r} cannot name an archive partition: it must be one "
            f"character or more, and 'tenant=' with it URL-encoded at most "
            f"{FOLDER_NAME_MAX} bytes"
        )
    return None
