"""Event triggers' core (docs/event-triggers.md): which records of one source
partition run a job, under which run id, with which payload. Pure: the trigger processor
feeds it records in offset order, emits what it decides, and checkpoints its state.

One ``PartitionTrigger`` per (job, source partition). ``step(record)`` decides:

- nothing (the filter refused the record, a debounce window absorbed it, a batch is
  still filling, or the record was decided before: a re-read);
- an ``EventRun``: run id ``JOB@evt:<topic>:<partition>:<offset>`` of the record, or
  of the *first* record of its debounce window or batch, so every reader names it the
  same; its instant (the run's ``scheduled_at``) is that record's timestamp; its payload
  the record's item (``streams.core.payloads``) or the batch's items;
- ``Refused``: a matching record whose payload would be over ``max_payload_bytes``
  (or nested too deeply to write): bad input, the processor dead-letters it and goes on.

**Debounce** (``debounce_ms``): at most one run per window, per group (``key``). The
first matching record runs at once and opens a window of ``debounce_ms`` from the
partition's clock; matching records before its end run nothing. The clock is the
highest record timestamp read (event time, not the processor's: a re-read decides the
same; a record stamped earlier than the clock counts at the clock).

**Batch** (``batch``): one run per N matching records, per group, when the N-th
arrives. A batch that would go over the payload limit is closed early with the records
it has (its run still named by its first); over ``MAX_OPEN_BATCHES`` open groups, the
oldest open batch is closed early (an overload guard: see docs/event-triggers.md).

**Checkpoint and replay.** ``checkpoint()`` gives plain values to store with the
committed offset: commit ``resume_offset`` (the first record of the oldest open batch,
else the next offset: an open batch's records are read again, not stored), and restore
with the checkpoint. After a restore, a record before ``resume_offset`` is skipped, and
a record at or before ``through`` of its group was in an emitted batch and is skipped:
every record is in at most one run, and a run emitted before a crash is emitted again
under the same id (flagged ``possible_duplicate`` up to ``replay_until``), which the
workers run once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from cronstream.schemas.definition.filters import Expr, Path, parse_filter, parse_path
from cronstream.schemas.definition.matching import MISSING, Record, matches
from cronstream.schemas.events import JobDefinition
from cronstream.schemas.ids import event_run_id
from cronstream.schemas.wire import LAST_MS
from cronstream.streams.core import payloads

MAX_WINDOWS = 100_000  # debounce windows kept per partition (the soonest to end goes)
MAX_OPEN_BATCHES = 1_000  # open batches per partition, each under the payload limit


@dataclass(frozen=True, slots=True)
class Rule:
    """A job's ``on:`` (``EventTrigger``), its texts parsed once (``rule_of``)."""

    job_id: str
    topic: str
    filter: Expr | None = None
    debounce_ms: int | None = None
    batch: int | None = None
    key: Path | None = None
    fields: tuple[tuple[str, Path], ...] = ()


def rule_of(job: JobDefinition) -> Rule:
    """Raises ValueError (FilterError) for a text that does not parse, a job without
    ``on``: a definition from another producer, which the processor dead-letters."""
    on = job.on
    if on is None:
        raise ValueError(f"job {job.job_id!r} has no event trigger")
    return Rule(
        job_id=job.job_id,
        topic=on.topic,
        filter=None if on.filter is None else parse_filter(on.filter),
        debounce_ms=on.debounce_ms,
        batch=on.batch,
        key=None if on.key is None else parse_path(on.key),
        fields=tuple((name, parse_path(path)) for name, path in on.payload_fields.items()),
    )


def source_record(
    *,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int,
    key: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] = (),
    value: Any = MISSING,
) -> Record:
    """A consumed record as filters see it: key and header values as UTF-8 text (None:
    absent; MISSING: not UTF-8), a repeated header's last value; ``value`` decoded by
    the processor (MISSING: it could not be)."""
    return Record(
        topic=topic,
        partition=partition,
        offset=offset,
        timestamp_ms=timestamp_ms,
        key=_utf8(key),
        headers={name: _utf8(v) for name, v in headers},
        value=value,
    )


def _utf8(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return MISSING


@dataclass(frozen=True, slots=True)
class EventRun:
    run_id: str
    scheduled_ms: int  # its (first) record's timestamp
    payload: str  # JSON text
    records: int = 1  # how many records it stands for (a batch: up to N)
    possible_duplicate: bool = False  # read again after a restore: maybe emitted before


@dataclass(frozen=True, slots=True)
class Refused:
    offset: int
    reason: str


Decision = EventRun | Refused


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A PartitionTrigger's state to store with the committed offset (``resume_offset``)."""

    resume_offset: int
    clock_ms: int = 0
    windows: tuple[tuple[str, int], ...] = ()  # group -> its debounce window's end
    through: tuple[tuple[str, int], ...] = ()  # group -> last offset of its emitted batch

    def to_json(self) -> dict[str, Any]:
        return {
            "resume": self.resume_offset,
            "clock": self.clock_ms,
            "windows": [list(w) for w in self.windows],
            "through": [list(t) for t in self.through],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        return cls(
            resume_offset=data["resume"],
            clock_ms=data["clock"],
            windows=tuple((g, e) for g, e in data["windows"]),
            through=tuple((g, o) for g, o in data["through"]),
        )


@dataclass
class _Batch:
    first_offset: int
    first_ms: int
    items: list[str] = field(default_factory=list)
    size: int = 0  # bytes of the items and the commas between them
    last_offset: int = -1


class PartitionTrigger:
    """One job's trigger on one source partition (see the module's text)."""

    def __init__(
        self,
        rule: Rule,
        partition: int,
        *,
        max_payload_bytes: int,
        checkpoint: Checkpoint | None = None,
        replay_until: int = 0,
    ) -> None:
        self.rule = rule
        self.partition = partition
        self.max_payload_bytes = max_payload_bytes
        # runs of records before this offset may have been emitted before a restart
        self.replay_until = replay_until
        start = checkpoint or Checkpoint(resume_offset=0)
        self.next_offset = start.resume_offset
        self.clock_ms = start.clock_ms
        self.windows: dict[str, int] = dict(start.windows)
        self.through: dict[str, int] = dict(start.through)
        self.open: dict[str, _Batch] = {}
        self.matched = 0  # records that passed the filter (the processor's metric reads it)

    def step(self, record: Record) -> list[Decision]:
        """What ``record`` (the next of the partition, in offset order) causes."""
        if record.offset < self.next_offset:
            return []  # decided before the checkpoint this state was restored from
        self.next_offset = record.offset + 1
        self.clock_ms = max(self.clock_ms, record.timestamp_ms)
        rule = self.rule
        if rule.filter is not None and not matches(rule.filter, record):
            return []
        self.matched += 1
        try:
            group = payloads.group_of(rule.key, record)
            end = self.windows.get(group) if rule.debounce_ms is not None else None
            if end is not None and end > self.clock_ms:
                return []  # inside the group's debounce window
            item = payloads.item(record, rule.fields)
        except RecursionError:
            return [
                Refused(
                    record.offset, "the record's value is nested too deeply to write as a payload"
                )
            ]
        if rule.batch is not None:
            return self._batched(record, group, item)
        size = len(item.encode())
        if size > self.max_payload_bytes:
            return [self._over(record.offset, size)]
        if rule.debounce_ms is not None:
            self._open_window(group, self.clock_ms + rule.debounce_ms)
        return [
            EventRun(
                run_id=self._run_id(record.offset),
                scheduled_ms=_instant(record.timestamp_ms),
                payload=item,
                possible_duplicate=record.offset < self.replay_until,
            )
        ]

    def checkpoint(self) -> Checkpoint:
        """The state to store with the offset to commit (``resume_offset``). Forgets what
        no longer matters: windows ended by the clock, batches ended before it."""
        resume = min((b.first_offset for b in self.open.values()), default=self.next_offset)
        self.windows = {g: end for g, end in self.windows.items() if end > self.clock_ms}
        self.through = {g: last for g, last in self.through.items() if last >= resume}
        return Checkpoint(
            resume_offset=resume,
            clock_ms=self.clock_ms,
            windows=tuple(sorted(self.windows.items())),
            through=tuple(sorted(self.through.items())),
        )

    # -- debounce and batch -----------------------------------------------------------
    def _open_window(self, group: str, end_ms: int) -> None:
        self.windows[group] = end_ms
        if len(self.windows) > MAX_WINDOWS:
            self.windows = {g: e for g, e in self.windows.items() if e > self.clock_ms}
        if len(self.windows) > MAX_WINDOWS:
            del self.windows[min(self.windows, key=self.windows.__getitem__)]

    def _batched(self, record: Record, group: str, item: str) -> list[Decision]:
        if record.offset <= self.through.get(group, -1):
            return []  # in a batch emitted before the checkpoint: a re-read
        size = len(item.encode())
        if payloads.BATCH_FRAME + 1 + size > self.max_payload_bytes:
            return [self._over(record.offset, size)]
        out: list[Decision] = []
        batch = self.open.get(group)
        if batch is not None and self._size_with(batch, size) > self.max_payload_bytes:
            out.append(self._close(group, record.offset))  # full by size: closed early
            batch = None
        if batch is None:
            batch = self.open[group] = _Batch(record.offset, _instant(record.timestamp_ms))
            if len(self.open) > MAX_OPEN_BATCHES:
                oldest = min(self.open, key=lambda g: self.open[g].first_offset)
                out.append(self._close(oldest, record.offset))
        batch.size += size + (1 if batch.items else 0)
        batch.items.append(item)
        batch.last_offset = record.offset
        if len(batch.items) >= (self.rule.batch or 1):
            out.append(self._close(group, record.offset))
        return out

    @staticmethod
    def _size_with(batch: _Batch, size: int) -> int:
        count = len(batch.items) + 1
        return payloads.BATCH_FRAME + len(str(count)) + batch.size + 1 + size

    def _close(self, group: str, closing_offset: int) -> EventRun:
        batch = self.open.pop(group)
        self.through[group] = batch.last_offset
        return EventRun(
            run_id=self._run_id(batch.first_offset),
            scheduled_ms=batch.first_ms,
            payload=payloads.batch(batch.items),
            records=len(batch.items),
            possible_duplicate=closing_offset < self.replay_until,
        )

    def _run_id(self, offset: int) -> str:
        return event_run_id(self.rule.job_id, self.rule.topic, self.partition, offset)

    def _over(self, offset: int, size: int) -> Refused:
        return Refused(
            offset,
            f"the run's payload would be {size} bytes, over the "
            f"{self.max_payload_bytes}-byte limit",
        )


def _instant(timestamp_ms: int) -> int:
    """A record's timestamp as a run's instant: one an instant on the wire can hold, else
    the epoch (Kafka's -1, "no timestamp", among them)."""
    return timestamp_ms if 0 <= timestamp_ms <= LAST_MS else 0
