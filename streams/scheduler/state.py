"""The far tier on local disk: one RocksDB store per owned jobs partition
(``cronstream scheduler --state-dir DIR``), so that a processor holds in memory only
the jobs due within the horizon, and a restarted process on the same disk takes its
partitions back without replaying the jobs topic.

Why RocksDB on local disk (the choice of Kafka Streams' state stores), not a Cassandra
table: every operation is local and synchronous (a few microseconds), so the fire path
needs no asynchronous I/O and no network round trip per slot; the cost is that a
partition taken over on another disk is rebuilt from the jobs topic (as without the
store). docs/scaling.md has the comparison.

What one store holds (keys are bytes, ordered):

- ``d<job id>``: the definition as read from the jobs topic: offset, record timestamp,
  whether an earlier version existed, then the raw record value;
- ``t<due><job id>``: an entry per job, a lower bound of its next slot not emitted yet
  (``streams.core.far``); ``due`` is 8 bytes big-endian, shifted so order is numeric;
- ``m``: what the store covers (``StateMeta``), written at each checkpoint.

Writes go to the store at once (RocksDB's write-ahead log survives a killed process);
an entry is deleted only once the checkpoint covers its slot (``flush``), so that a
crash never leaves a job without an entry at or before its next slot. Definitions are
re-read from the jobs topic from the lower of the store's and the checkpoint's offsets:
re-applying one is harmless. A store not written for ``STALE_AFTER_MS`` is rebuilt (a
tombstone it missed may have been compacted away by then).
"""

from __future__ import annotations

import json
import logging
import shutil
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from cronstream.streams.core.schedule import JobSchedule
from cronstream.streams.scheduler.checkpoint import Checkpoint

log = logging.getLogger("cronstream.scheduler")
_SHIFT = 1 << 63
_DEF = struct.Struct(">qqB")
META = b"m"
# Compacted topics keep tombstones delete.retention.ms (a day by default): a store not
# written for longer may have missed a delete.
STALE_AFTER_MS = 12 * 3_600_000


def entry_key(due_ms: int, job_id: str) -> bytes:
    return b"t" + (due_ms + _SHIFT).to_bytes(8, "big") + job_id.encode()


def parse_entry(key: bytes) -> tuple[int, str]:
    return int.from_bytes(key[1:9], "big") - _SHIFT, key[9:].decode()


@dataclass(frozen=True, slots=True)
class StateMeta:
    jobs_offset: int  # definitions below it are in the store
    fired_through: int  # the checkpoint's, when it was written
    written_ms: int

    def encode(self) -> bytes:
        return json.dumps(
            {"v": 1, "j": self.jobs_offset, "w": self.fired_through, "at": self.written_ms}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> StateMeta | None:
        try:
            d = json.loads(raw) if raw else None
            return cls(int(d["j"]), int(d["w"]), int(d["at"])) if d else None
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True, slots=True)
class StoredDefinition:
    offset: int
    arrived_ms: int
    replaced: bool  # an earlier version of the job existed when it was read
    raw: bytes


class PartitionState:
    """The store of one jobs partition; the core's ``FarTier``."""

    def __init__(self, path: Path, schedule: Callable[[str, bytes], JobSchedule | None]) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = Rdict(str(path), _options())
        self._schedule = schedule
        # Entries replaced or forgotten, deleted once the checkpoint covers them.
        self._superseded: list[tuple[int, str]] = []

    @classmethod
    def open(
        cls,
        path: Path,
        schedule: Callable[[str, bytes], JobSchedule | None],
        *,
        rebuild: bool,
        now_ms: int,
    ) -> PartitionState:
        """The store at ``path``: emptied first when ``rebuild`` is asked or it is stale."""
        state = cls(path, schedule)
        meta = state.meta()
        stale = meta is not None and now_ms - meta.written_ms > STALE_AFTER_MS
        if rebuild or stale:
            log.info(
                "partition state %s: %s, rebuilt from the jobs topic",
                path,
                "stale" if stale else "--rebuild-index",
            )
            state.close()
            shutil.rmtree(path)
            state = cls(path, schedule)
        return state

    def close(self) -> None:
        self.db.close()

    # -- what it covers -----------------------------------------------------------------
    def meta(self) -> StateMeta | None:
        return StateMeta.decode(self.db.get(META))

    def flush(self, fired_through: int, jobs_offset: int) -> None:
        """At a checkpoint, once the broker acknowledged everything emitted through
        ``fired_through``: delete the entries it covers, record what the store covers."""
        batch = self._drop_superseded(fired_through)
        meta = StateMeta(jobs_offset, fired_through, int(time.time() * 1000))
        batch.put(META, meta.encode())
        self.db.write(batch)  # one write: the deletes and what they are covered by

    def drop_superseded(self, fired_through: int) -> None:
        """Delete the replaced entries a checkpoint through ``fired_through`` covers,
        without saying what the store covers (a standby store moving its entries)."""
        self.db.write(self._drop_superseded(fired_through))

    def _drop_superseded(self, fired_through: int) -> WriteBatch:
        batch, keep = WriteBatch(raw_mode=True), []
        for due, job_id in self._superseded:
            if due <= fired_through:
                batch.delete(entry_key(due, job_id))
            else:
                keep.append((due, job_id))
        self._superseded = keep
        return batch

    # -- definitions --------------------------------------------------------------------
    def put_definition(self, job_id: str, stored: StoredDefinition) -> None:
        value = _DEF.pack(stored.offset, stored.arrived_ms, stored.replaced) + stored.raw
        self.db.put(b"d" + job_id.encode(), value)

    def delete_definition(self, job_id: str) -> None:
        self.db.delete(b"d" + job_id.encode())

    def has_definition(self, job_id: str) -> bool:
        return b"d" + job_id.encode() in self.db

    def definition(self, job_id: str) -> StoredDefinition | None:
        value = self.db.get(b"d" + job_id.encode())
        if value is None:
            return None
        offset, arrived, replaced = _DEF.unpack_from(value)
        return StoredDefinition(offset, arrived, bool(replaced), value[_DEF.size :])

    def definitions(self, after: str | None = None) -> Iterator[tuple[str, StoredDefinition]]:
        """Every definition, in job id order, after ``after``."""
        it = self.db.iter()
        it.seek(b"d" + after.encode() + b"\x00" if after is not None else b"d")
        while it.valid():
            key = it.key()
            if key[:1] != b"d":
                break
            value = it.value()
            offset, arrived, replaced = _DEF.unpack_from(value)
            yield (
                key[1:].decode(),
                StoredDefinition(offset, arrived, bool(replaced), value[_DEF.size :]),
            )
            it.next()

    # -- the far tier (streams.core.far.FarTier) ------------------------------------------
    def hold(self, job_id: str, due_ms: int | None, previous: int | None) -> None:
        if due_ms == previous:
            return
        if due_ms is not None:
            self.db.put(entry_key(due_ms, job_id), b"")
        if previous is not None:
            self._superseded.append((previous, job_id))

    def forget(self, job_id: str, due_ms: int) -> None:
        self._superseded.append((due_ms, job_id))

    def entries(
        self, after: tuple[int, str] | None, before_ms: int, urgent_ms: int, budget: int
    ) -> list[tuple[int, str]]:
        it = self.db.iter()
        it.seek(entry_key(*after) + b"\x00" if after is not None else b"t")
        out: list[tuple[int, str]] = []
        while it.valid():
            key = it.key()
            if key[:1] != b"t":
                break
            due, job_id = parse_entry(key)
            if due >= before_ms or (due > urgent_ms and len(out) >= budget):
                break
            out.append((due, job_id))
            it.next()
        return out

    def load(self, job_id: str) -> JobSchedule | None:
        stored = self.definition(job_id)
        return None if stored is None else self._schedule(job_id, stored.raw)

    def all_entries(self) -> list[tuple[int, str]]:
        """Every entry (tests and ``--check-index``: small stores)."""
        return self.entries(None, _SHIFT - 1, _SHIFT - 1, 0)


class Stores:
    """The partitions' stores under ``--state-dir`` (``root`` = DIR/<jobs topic>), opened
    by the loader (partitions owned) and the standby (the others) alike; with
    ``--rebuild-index`` each is rebuilt the first time this process opens it, whichever
    of the two that is."""

    def __init__(
        self, root: Path, schedule: Callable[[str, bytes], JobSchedule | None], *, rebuild: bool
    ) -> None:
        self.root = root
        self.schedule = schedule
        self._rebuild = rebuild
        self._rebuilt: set[int] = set()

    def open(self, partition: int, now_ms: int) -> PartitionState:
        rebuild = self._rebuild and partition not in self._rebuilt
        self._rebuilt.add(partition)
        return PartitionState.open(
            self.root / str(partition), self.schedule, rebuild=rebuild, now_ms=now_ms
        )


def resume_point(
    meta: StateMeta | None, checkpoint: Checkpoint | None, low: int
) -> tuple[int, int | None]:
    """Where a partition with this store reads the jobs topic from (the lower of the
    store's and the checkpoint's offsets; ``low`` for a store never checkpointed) and,
    with no checkpoint, the store's fired-through point."""
    if meta is None:
        return low, None
    start = (
        meta.jobs_offset if checkpoint is None else min(meta.jobs_offset, checkpoint.jobs_offset)
    )
    return max(low, start), meta.fired_through


def _options() -> Options:
    """Small memtables (a store per partition; tens per process at most)."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_write_buffer_size(4 << 20)
    options.set_max_write_buffer_number(2)
    return options


def index_view(state: PartitionState, after_ms: int) -> dict[str, tuple[int, int | None]]:
    """What a store says about each job, comparable between stores: (offset of its
    definition, its first due after ``after_ms`` not before its earliest entry). A job
    with no entry, or none its definition reaches, has None. Stale entries (lower bounds
    left by a crash or a change) do not change it: two stores with the same definitions
    and valid entries give the same view."""
    earliest: dict[str, int] = {}
    for entry_due, entry_job in state.all_entries():
        earliest.setdefault(entry_job, entry_due)
    view: dict[str, tuple[int, int | None]] = {}
    for job_id, stored in state.definitions():
        job = state.load(job_id)
        first = earliest.get(job_id)
        due: int | None = None
        if job is not None and first is not None:
            slot = job.slot_due_after(max(after_ms, first - 1))
            due = None if slot is None else slot + job.jitter
        view[job_id] = (stored.offset, due)
    return view
