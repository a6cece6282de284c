"""The archiver: ``cronstream.history`` into the Parquet archive (``consumers.archive``).

One process runs one ``Archiver``: a member of the group ``<prefix>.archiver`` on the
history topic, beside the Cassandra sink (its own group: each reads every outcome). It
buffers each partition's outcomes and flushes a partition when it holds ``flush_rows``
of them or its oldest waited ``flush_s``. The one commit procedure (``flush``):

1. Write the partition's buffer as parts, one per (day, tenant), each named after the
   buffer's first offset (atomically: a temporary file renamed).
2. Save the partition's checkpoint: the offset after the buffer's last record.
3. Commit that offset to the group.

Files are the truth: on assignment reading starts at the committed offset, and records
below the checkpoint (written, then a crash before 3) are skipped, so the next buffer
starts at the same offset as before the crash and rewrites the same part names. A
record that is not a RunOutcome is skipped (the sink dead-letters it) and counted. One
the archive cannot hold (a tenant that is no folder name: ``a/../..`` would write
outside the archive) or that makes the archiver raise (a bug its values reach,
``runtime.faults``) goes to the DLQ, acknowledged before its offset is committed.

Why stream the topic rather than export days from Cassandra: reading a day back out of
Cassandra costs as much as writing it (every outcome of every table, at 10,000 runs/s
864 million rows a day) and competes with the hot tier; the topic has every outcome
once, in order, with offsets that make the export resumable and idempotent for free.
The daily step is compaction: the owner of partition 0 merges each finished day's
parts into one sorted file per tenant (``archive.compact_finished``), hourly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from consumers import archive
from consumers.core.buckets import day_of
from runtime import metrics
from runtime.faults import RecordFaults
from runtime.kafka.clients import TopicPartition
from runtime.kafka.member import GroupMember
from runtime.kafka.publisher import Publisher
from runtime.kafka.records import ConsumedMessage, dead_letter_for, is_record
from runtime.kafka.stall import Held
from runtime.registry import registry_client
from runtime.settings import Settings
from runtime.waiting import StopWaiting, learn_writers
from schemas.catalog import Topics
from schemas.errors import DecodeError
from schemas.events import DeadLetter, RunOutcome
from schemas.serde import Codec

log = logging.getLogger("cronstream.archiver")
STAGE = "archiver"
FOLDER_NAME_MAX = 200  # UTF-8 bytes of a tenant: "tenant=<it>" stays one file name (255 bytes)


@dataclass(frozen=True, slots=True)
class ArchiverConfig:
    group: str
    name: str = "archiver"
    flush_rows: int = 200_000
    flush_s: float = 60.0
    compact_every_s: float = 3600.0
    read_max: int = 5000
    session_timeout_ms: int = 10_000
    keep_days: int = 366  # days before today the archive keeps (0: all)


@dataclass(slots=True)
class _Buffer:
    first: int
    opened: float
    next_offset: int = 0
    outcomes: list[RunOutcome] = field(default_factory=list)


class Archiver:
    def __init__(self, settings: Settings, config: ArchiverConfig, root: Path | None = None
                 ) -> None:  # fmt: skip
        self.config = config
        self.root = root or archive.archive_root(settings)
        self.topic = Topics(settings).history
        self.codec = Codec(registry_client(settings))
        self.member = GroupMember(
            settings, group=config.group, name=config.name,
            session_timeout_ms=config.session_timeout_ms, log=log,
        )  # fmt: skip
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
        self.member.subscribe([self.topic], assigned=self._assigned, revoking=self._revoking,
                              lost=self._lost)  # fmt: skip
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

    # -- partitions moving ----------------------------------------------------------------
    def _assigned(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.checkpoints[tp.partition] = archive.checkpoint(self.root, tp.partition)

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
            if (len(buffer.outcomes) >= self.config.flush_rows
                    or now - buffer.opened >= self.config.flush_s):  # fmt: skip
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
            learn_writers(self.codec, batch, what=f"archiver {self.config.name}", log=log,
                          pause=pause)  # fmt: skip
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
        """The commit procedure (the module's text): parts, checkpoint, offset. Dead
        letters of the buffer's records are acknowledged first (the broker away: the
        flush waits for a later step; at a handover, up to 30 s)."""
        if self.letters:
            if wait:
                self.publisher.flush()
            elif not self.publisher.settled(1.0):
                log.warning("the broker has not acknowledged the dead letters yet; the "
                            "flush waits")  # fmt: skip
                return
            self.letters = False
        buffer = self.buffers.pop(partition)
        began = time.monotonic()
        files = archive.write_parts(self.root, partition, buffer.first, buffer.outcomes)
        archive.save_checkpoint(self.root, partition, buffer.next_offset)
        self.checkpoints[partition] = buffer.next_offset
        metrics.archiver_outcomes.inc(len(buffer.outcomes))
        metrics.archiver_files.inc(len(files))
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
        done = archive.compact_finished(self.root, today)
        for day, merged in done.items():
            log.info("compacted %s: %d parts into day files", day.isoformat(), merged)
        keep = self.config.keep_days
        for day in archive.expire(self.root, today, keep):
            log.info("expired %s: older than %d days", day.isoformat(), keep)


def folder_problem(tenant: str) -> str | None:
    """Why ``tenant`` cannot name an archive folder (``tenant=<it>``), or None: it must be
    one plain path name, so that no outcome is written outside the archive."""
    if (not tenant or tenant in (".", "..") or len(tenant.encode()) > FOLDER_NAME_MAX
            or any(c in tenant for c in "/\\\0")):  # fmt: skip
        return (
            f"tenant {tenant[:80]!r} cannot name an archive folder: it must be 1-"
            f"{FOLDER_NAME_MAX} bytes of UTF-8, without '/', '\\' or NUL, not '.' or '..'"
        )
    return None
