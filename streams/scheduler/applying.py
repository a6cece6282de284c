"""A definition read from the jobs topic, applied to its partition's core: at once on a
live partition (``put``), against the checkpoint on a loading one (``recover``); what
the core decides is emitted. A definition that cannot be used is dead-lettered, and so
is one that makes loading it raise (a bug its values reach, ``runtime.faults``): its
job is not loaded, the partition goes on. Any other record the scheduler cannot read
is dead-lettered here too (``refuse``).
"""

from __future__ import annotations

from collections.abc import Callable

from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter, dead_letter_for
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import CronError, DecodeError, ZoneError
from cronstream.schemas.events import JOB_DELETED, JOB_PAUSED
from cronstream.streams.core.schedule import JobSchedule
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.emitter import Emitter
from cronstream.streams.scheduler.owned import Owned
from cronstream.streams.scheduler.state import PartitionState, StoredDefinition

STAGE = "scheduler"


class Applier:
    def __init__(
        self,
        definitions: Definitions,
        emitter: Emitter,
        *,
        topics: Topics,
        now_ms: Callable[[], int],
    ) -> None:
        self.definitions = definitions
        self.emitter = emitter
        self.topics = topics
        self.now_ms = now_ms

    def put(self, owned: Owned, key: str, offset: int, arrived: int, value: bytes | None) -> None:
        """A definition read while its partition is live: applied at once."""
        if value is None:
            owned.core.delete(key)
            if owned.state is not None:
                owned.state.delete_definition(key)
            self.emitter.cancel_ahead(key, JOB_DELETED, self.now_ms())
            return
        job = self.schedule(key, value, partition=owned.partition, offset=offset)
        if job is not None:
            if owned.state is not None:
                store(owned.state, key, offset, arrived, value)
            now = self.now_ms()
            try:
                actions = owned.core.put(job, now=now)
            except Exception as exc:  # a bug this definition reaches: not the partition
                self.faulted(owned, job, value, offset, exc)
                return
            self.definitions.faults.ok()
            self.emitter.emit(actions, now)
            if job.paused:
                self.emitter.cancel_ahead(key, JOB_PAUSED, now)

    def recover(
        self,
        owned: Owned,
        job: JobSchedule,
        raw: bytes,
        offset: int,
        *,
        now: int,
        arrived_ms: int,
        replaced: bool,
    ) -> None:
        """One definition of a loading partition settled against its checkpoint (read
        at ``offset``), what came due emitted; a bug it reaches drops that job alone."""
        checkpoint = owned.checkpoint
        known = checkpoint is not None and offset < checkpoint.jobs_offset
        try:
            actions = owned.core.recover(
                job, now=now, known=known, arrived_ms=arrived_ms, replaced=replaced
            )
        except Exception as exc:  # a bug this definition reaches: not the partition
            self.faulted(owned, job, raw, offset, exc)
            return
        self.definitions.faults.ok()
        self.emitter.emit(actions, now)

    def schedule(
        self, key: str, value: bytes, *, partition: int, offset: int
    ) -> JobSchedule | None:
        """The core's view of a definition, or None after dead-lettering a bad one (or
        one that makes reading it raise: ``runtime.faults``)."""
        definitions = self.definitions
        try:
            return definitions.schedule(key, value)
        except (DecodeError, CronError, ZoneError) as exc:
            definitions.faults.ok()  # refused: handled
            reason = f"invalid job definition: {exc}"
        except Exception as exc:  # RegistryUnavailable passes: the record waits
            tenant = definitions.tenant_of(value)
            reason = definitions.faults.fault(
                exc,
                topic=self.topics.jobs,
                partition=partition,
                offset=offset,
                key=key,
                tenant=tenant,
            ).reason
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

    def refuse(self, msg: ConsumedMessage, reason: str) -> None:
        """A record that cannot be read (a timer request, a key), to the DLQ."""
        self.emitter.dead_letter(dead_letter_for(msg, stage=STAGE, reason=reason))

    def faulted(
        self, owned: Owned, job: JobSchedule, value: bytes, offset: int, exc: Exception
    ) -> None:
        """The core raised on ``job`` (read at ``offset`` of ``owned``'s partition): the
        job is dropped (whatever the call left of it), its definition dead-lettered with
        the error; the partition goes on."""
        fault = self.definitions.faults.fault(
            exc,
            topic=self.topics.jobs,
            partition=owned.partition,
            offset=offset,
            key=job.job_id,
            tenant=job.tenant,
        )
        owned.core.delete(job.job_id)
        if owned.state is not None:
            owned.state.delete_definition(job.job_id)
        self.emitter.dead_letter(fault.letter(STAGE, value=value))


def store(state: PartitionState, key: str, offset: int, arrived: int, value: bytes | None) -> None:
    """A definition read, into the partition's store (a tombstone deletes it)."""
    if value is None:
        state.delete_definition(key)
        return
    replaced = state.has_definition(key)
    state.put_definition(key, StoredDefinition(offset, arrived, replaced, value))
