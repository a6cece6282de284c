"""How the scheduler processor reads its input: definitions from the jobs topic (applied
live, or collected while a partition loads and settled SETTLE_BATCH at a time), timers
from the timers topic, and bad records to the DLQ: one that cannot be used, and one that
makes loading it raise (a bug its values reach, ``runtime.faults``: its job is not
loaded, the partition goes on). ``Reading`` is the processor's input half
(``streams.processor.Processor`` inherits it); ``Owned`` is one partition it owns.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from runtime.kafka.records import ConsumedMessage, dead_letter, dead_letter_for, is_record
from runtime.kafka.stall import Backoff, Held
from schemas.catalog import Topics
from schemas.errors import CronError, DecodeError, RegistryUnavailable, ZoneError
from schemas.events import (
    JOB_DELETED,
    JOB_PAUSED,
    TimerReason,
    TimerRequest,
    from_ms,
    iso,
    to_ms,
)
from schemas.serde import Codec
from streams.checkpoint import Checkpoint
from streams.core.partition import NEVER, PartitionScheduler, Timer
from streams.core.schedule import JobSchedule
from streams.definitions import Definitions
from streams.emitter import Emitter
from streams.loading import Collector
from streams.state import PartitionState, StoredDefinition

log = logging.getLogger("cronstream.scheduler")
STAGE = "scheduler"
# Definitions settled per loop iteration while a partition loads (a few tens of
# milliseconds): the live partitions fire on time in between.
SETTLE_BATCH = 500


@dataclass(slots=True)
class Owned:
    partition: int
    core: PartitionScheduler
    checkpoint: Checkpoint | None
    load_end: int
    loading: bool = True
    read: bool = False  # loading, and every definition is read: settle it next (``step``)
    settling: list[str] = field(default_factory=list)  # job ids being settled, in order
    settled: int = 0  # how many of ``settling`` are done
    started: float = field(default_factory=time.monotonic)
    # job id -> (offset, timestamp, value, an earlier live version exists) while loading
    pending: dict[str, tuple[int, int, bytes | None, bool]] = field(default_factory=dict)
    jobs_next: int = 0
    timers_next: int = 0
    # The checkpoint last committed (or read at assignment): what a rewind goes back to.
    base: Checkpoint | None = None
    # The partition's store (``--state-dir``); ``rebuilding``: it is being built from
    # the whole jobs topic (definitions go into it as read, then are settled from it,
    # in job id order after ``rebuilt_through``).
    state: PartitionState | None = None
    rebuilding: bool = False
    rebuilt_through: str | None = None


class Reading:
    """The input half of the processor (see the module docstring)."""

    owned: dict[int, Owned]
    topics: Topics
    codec: Codec
    definitions: Definitions
    emitter: Emitter
    _collector: Collector
    _backoff: Backoff

    def _now_ms(self) -> int:
        raise NotImplementedError

    def _gauge_partitions(self) -> None:
        raise NotImplementedError

    def _read(
        self, batch: list[Any], held: Held, handle: Callable[[ConsumedMessage], None]
    ) -> None:
        """Handle ``batch`` in order; while the registry is unavailable, the records
        that need it (and every one after them) wait in ``held`` (``Backoff``)."""
        if self._backoff.stalled:
            held.hold(batch)
            if not self._backoff.due():
                return
            batch = held.take()
        for i, msg in enumerate(batch):
            try:
                handle(msg)
            except RegistryUnavailable as exc:
                held.hold(batch[i:])
                self._backoff.failed(exc)
                return

    def _on_jobs_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            # The end of the partition: loading is complete even when the last offsets
            # are gone (compacted tombstones, transaction markers).
            eof = self.owned.get(msg.partition() or 0)
            if eof is not None and eof.loading:
                eof.read = True
            return
        partition = msg.partition()
        owned = self.owned.get(partition) if partition is not None else None
        offset = msg.offset()
        if owned is None or offset is None:
            return
        owned.jobs_next = offset + 1
        key = self._key(msg)
        if key is None:
            return
        if owned.loading:
            self._loading_record(owned, key, offset, msg)
        else:
            self._live_record(owned, key, offset, msg)

    def _live_record(self, owned: Owned, key: str, offset: int, msg: ConsumedMessage) -> None:
        """A definition read while its partition is live: applied at once."""
        value = msg.value()
        if value is None:
            owned.core.delete(key)
            if owned.state is not None:
                owned.state.delete_definition(key)
            self.emitter.cancel_ahead(key, JOB_DELETED, self._now_ms())
            return
        job = self._schedule(key, value, partition=owned.partition, offset=offset)
        if job is not None:
            if owned.state is not None:
                self._store(owned.state, key, offset, msg.timestamp()[1], value)
            now = self._now_ms()
            try:
                actions = owned.core.put(job, now=now)
            except Exception as exc:  # a bug this definition reaches: not the partition
                self._faulted(owned, job, value, offset, exc)
                return
            self.definitions.faults.ok()
            self.emitter.emit(actions, now)
            if job.paused:
                self.emitter.cancel_ahead(key, JOB_PAUSED, now)

    def _loading_record(self, owned: Owned, key: str, offset: int, msg: ConsumedMessage) -> None:
        """A definition read while its partition loads: kept to be settled once the
        partition is read to its end (into the store, when it is being rebuilt)."""
        arrived = msg.timestamp()[1]
        if owned.rebuilding:
            assert owned.state is not None
            self._store(owned.state, key, offset, arrived, msg.value())
        else:
            earlier = owned.pending.get(key)
            # An earlier version read, or already settled (``_settle_some``), or stored.
            replaced = (earlier is not None and earlier[2] is not None) or key in owned.core.jobs
            if not replaced and owned.state is not None:
                stored = owned.state.definition(key)
                replaced = stored is not None and (stored.offset < offset or stored.replaced)
            owned.pending[key] = (offset, arrived, msg.value(), replaced)
        if owned.jobs_next >= owned.load_end:
            owned.read = True

    def _read_partition(self) -> Owned | None:
        """A loading partition read to its end, waiting to be settled."""
        return next((o for o in self.owned.values() if o.loading and o.read), None)

    def _settle_some(self, owned: Owned) -> None:
        """Settle up to SETTLE_BATCH read definitions of a loading partition against
        its checkpoint; once none is left, the partition is live.

        Definitions are taken in the order they were first read; each is the latest
        version read so far. One read again after it was settled (written during the
        settling) is settled again as a replacement, as it would be once live."""
        if owned.rebuilding:
            self._settle_stored(owned)
            return
        now = self._now_ms()
        core = owned.core
        pending = owned.pending
        room = SETTLE_BATCH
        while room > 0:
            if owned.settled >= len(owned.settling):
                if not pending:
                    self._go_live(owned)
                    return
                owned.settling, owned.settled = list(pending), 0
            key = owned.settling[owned.settled]
            owned.settled += 1
            room -= 1
            entry = pending.pop(key)
            offset, arrived, value, replaced = entry
            if value is None:
                core.delete(key)  # deleted, perhaps after it was settled
                if owned.state is not None:
                    owned.state.delete_definition(key)
                continue
            try:
                job = self._schedule(key, value, partition=owned.partition, offset=offset)
            except RegistryUnavailable as exc:  # tried again after the backoff
                pending.setdefault(key, entry)
                owned.settled -= 1
                self._backoff.failed(exc)
                return
            if job is None:
                continue
            if owned.state is not None:
                owned.state.put_definition(key, StoredDefinition(offset, arrived, replaced, value))
            self._recover(owned, job, value, offset, now=now, arrived_ms=arrived,
                          replaced=replaced)  # fmt: skip

    def _recover(
        self, owned: Owned, job: JobSchedule, raw: bytes, offset: int, *, now: int,
        arrived_ms: int, replaced: bool,
    ) -> None:  # fmt: skip
        """One definition of a loading partition settled against its checkpoint (read
        at ``offset``), what came due emitted; a bug it reaches drops that job alone."""
        checkpoint = owned.checkpoint
        known = checkpoint is not None and offset < checkpoint.jobs_offset
        try:
            actions = owned.core.recover(job, now=now, known=known, arrived_ms=arrived_ms,
                                         replaced=replaced)  # fmt: skip
        except Exception as exc:  # a bug this definition reaches: not the partition
            self._faulted(owned, job, raw, offset, exc)
            return
        self.definitions.faults.ok()
        self.emitter.emit(actions, now)

    def _store(
        self, state: PartitionState, key: str, offset: int, arrived: int, value: bytes | None
    ) -> None:
        """A definition read, into the partition's store (a tombstone deletes it)."""
        if value is None:
            state.delete_definition(key)
            return
        replaced = state.has_definition(key)
        state.put_definition(key, StoredDefinition(offset, arrived, replaced, value))

    def _settle_stored(self, owned: Owned) -> None:
        """A store rebuilt from the whole jobs topic: settle SETTLE_BATCH of its
        definitions against the checkpoint, in job id order; then the partition is
        live. One that cannot be used is dead-lettered and deleted from the store."""
        assert owned.state is not None
        now, state = self._now_ms(), owned.state
        batch = list(itertools.islice(state.definitions(owned.rebuilt_through), SETTLE_BATCH))
        for key, stored in batch:
            try:
                job = self._schedule(key, stored.raw, partition=owned.partition,
                                     offset=stored.offset)  # fmt: skip
            except RegistryUnavailable as exc:  # tried again after the backoff
                self._backoff.failed(exc)
                return
            owned.rebuilt_through = key
            if job is None:
                state.delete_definition(key)
                continue
            self._recover(owned, job, stored.raw, stored.offset, now=now,
                          arrived_ms=stored.arrived_ms, replaced=stored.replaced)  # fmt: skip
        if len(batch) < SETTLE_BATCH:
            owned.rebuilding = False
            self._go_live(owned)

    def _go_live(self, owned: Owned) -> None:
        owned.loading = False
        owned.settling = []
        self._collector.loaded(any(o.loading for o in self.owned.values()))
        log.info(
            "partition %d live: %d jobs in %.1fs, fired through %s",
            owned.partition,
            len(owned.core.jobs),
            time.monotonic() - owned.started,
            iso(from_ms(owned.core.fired_through)),
        )
        self._gauge_partitions()

    def _on_timer_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            return
        partition, offset = msg.partition(), msg.offset()
        owned = self.owned.get(partition) if partition is not None else None
        if owned is None or offset is None:
            return
        owned.timers_next = offset + 1
        try:
            request = self.codec.decode(msg.value(), TimerRequest)
        except DecodeError as exc:
            self.emitter.dead_letter(
                dead_letter_for(msg, stage=STAGE, reason=f"undecodable timer request: {exc}")
            )
            return
        checkpoint = owned.checkpoint
        known = checkpoint is not None and offset < checkpoint.timers_offset
        due = to_ms(request.due_at)
        timer = Timer(
            offset=offset,
            job_id=request.job_id,
            due_ms=due,
            body=request,
            # Already due when read: a previous owner may have fired it (a fresh timer
            # due at once pays one history lookup for the flag).
            possible_duplicate=due <= self._now_ms(),
            check=request.reason is TimerReason.DEADLINE,
        )
        owned.core.add_timer(
            timer, fired_through=checkpoint.fired_through if known and checkpoint else NEVER
        )

    def _key(self, msg: ConsumedMessage) -> str | None:
        raw = msg.key()
        try:
            if raw:
                return raw.decode() if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            pass
        self.emitter.dead_letter(
            dead_letter_for(msg, stage=STAGE, reason="record key is not a UTF-8 job id")
        )
        return None

    def _schedule(
        self, key: str, value: bytes, *, partition: int, offset: int
    ) -> JobSchedule | None:
        """The core's view of a definition, or None after dead-lettering a bad one (or
        one that makes reading it raise: ``runtime.faults``)."""
        try:
            return self.definitions.schedule(key, value)
        except (DecodeError, CronError, ZoneError) as exc:
            self.definitions.faults.ok()  # refused: handled
            reason = f"invalid job definition: {exc}"
        except Exception as exc:  # RegistryUnavailable passes: the record waits
            tenant = self.definitions.tenant_of(value)
            reason = self.definitions.faults.fault(
                exc, topic=self.topics.jobs, partition=partition, offset=offset, key=key,
                tenant=tenant,
            ).reason  # fmt: skip
        self.emitter.dead_letter(
            dead_letter(
                stage=STAGE,
                reason=reason,
                topic=self.topics.jobs,
                partition=partition,
                offset=offset,
                key=key.encode(),
                value=value,
            )
        )
        return None

    def _faulted(
        self, owned: Owned, job: JobSchedule, value: bytes, offset: int, exc: Exception
    ) -> None:
        """The core raised on ``job`` (read at ``offset`` of ``owned``'s partition): the
        job is dropped (whatever the call left of it), its definition dead-lettered with
        the error; the partition goes on."""
        fault = self.definitions.faults.fault(
            exc, topic=self.topics.jobs, partition=owned.partition, offset=offset,
            key=job.job_id, tenant=job.tenant,
        )  # fmt: skip
        owned.core.delete(job.job_id)
        if owned.state is not None:
            owned.state.delete_definition(job.job_id)
        self.emitter.dead_letter(fault.letter(STAGE, value=value))

    def _near_hook(self, owned: Owned) -> Callable[[Any], None]:
        """Prepare a job's run template as it comes within the horizon (``Definitions``)."""
        jobs, prepare = owned.core.jobs, self.definitions.prepare

        def on_near(item: Any) -> None:
            if type(item) is tuple:
                job = jobs.get(item[0])
                if job is not None and job.gen == item[1]:
                    prepare(job)

        return on_near
