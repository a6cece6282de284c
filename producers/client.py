"""JobClient: the Python API for writing jobs, triggering runs and cancelling them.

Everything here validates first and writes nothing when validation fails. Writes are
flushed before a method returns, so a call that returned has been acknowledged by Kafka
(acks=all, idempotent producer).

Reading the current definitions means reading the compacted jobs topic: ``get`` reads
only the one partition the job id hashes to; ``list`` reads them all. A client reads with
one consumer, made at its first read and closed with it: a command that reads twice
(``flows trigger``: the flow, then its schedule) connects and logs in its reader once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from cronstream.producers.audit import Auditor
from cronstream.producers.errors import UnknownJob
from cronstream.runtime.kafka.clients import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    TopicPartition,
    consume_ready,
    kafka_consumer,
)
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.audit import AuditAction, AuditRecord
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec, problems
from cronstream.schemas.errors import DecodeError, SpecError
from cronstream.schemas.events import (
    ControlAction,
    ControlCommand,
    JobDefinition,
    RunRequest,
    Trigger,
    job_headers,
    utc_now,
)
from cronstream.schemas.flows import FlowDefinition, FlowEvent, FlowEventKind
from cronstream.schemas.ids import job_id_of, manual_run_id, partition_for
from cronstream.schemas.limits import idempotency_key_problems, require_encodable, unencodable
from cronstream.schemas.tenancy import AnyEvent

E = TypeVar("E", bound=AnyEvent)


class JobClient:
    def __init__(self, settings: Settings, *, publisher: Publisher | None = None) -> None:
        self.settings = settings
        self.topics = Topics(settings)
        # Made now even for a command that only reads: a producer made at the first write
        # had its idempotent producer id to get when flushing, and librdkafka retries
        # that every 500 ms until the broker connection is up (measured: flows trigger's
        # flush 0.5-1.0 s, 40-60 ms when the id was got while the client read).
        self.publisher = publisher or Publisher(settings, answering=True)
        self._reader: Consumer | None = None
        self.skipped: list[str] = []  # undecodable records met while reading the jobs topic
        self.auditor = Auditor(settings.kafka_user)  # every change also goes to the trail

    def close(self) -> None:
        """Flush what was written, release the registry connection, close the reader."""
        try:
            self.publisher.close()
        finally:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

    def __enter__(self) -> JobClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- writing jobs -------------------------------------------------------------------
    def put(self, job: JobDefinition) -> None:
        self.put_many([job])

    def put_many(self, jobs: Iterable[JobDefinition]) -> int:
        """Validate every job, then write them all; nothing is written if any is invalid."""
        return self._write_jobs(list(jobs), AuditAction.PUT)

    def put_spec(self, spec: Mapping[str, Any]) -> JobDefinition:
        """Write the job ``spec`` describes (``schemas.definition.job_from_spec``: the
        definition's rules checked once, SpecError listing every problem); the job."""
        job = job_from_spec(spec, max_payload_bytes=self.settings.max_payload_bytes)
        self._write_jobs([job], AuditAction.PUT, checked=True)
        return job

    def _write_jobs(
        self,
        jobs: list[JobDefinition],
        action: AuditAction,
        before: Mapping[str, JobDefinition] | None = None,
        *,
        checked: bool = False,
    ) -> int:
        """Write ``jobs`` (``checked``: by ``problems`` already) with their trail."""
        errors = []
        for job in [] if checked else jobs:
            found = problems(job, max_payload_bytes=self.settings.max_payload_bytes)
            if found:
                errors.append(f"{job.job_id or '(no id)'}: {'; '.join(found)}")
        seen: set[str] = set()
        for job in jobs:
            if job.job_id in seen:
                errors.append(f"{job.job_id}: defined twice")
            seen.add(job.job_id)
        if errors:
            raise SpecError(f"{len(errors)} of {len(jobs)} jobs invalid", errors)
        if before is None:  # the definitions replaced, for the trail's diff
            before = self._current([job.job_id for job in jobs])
        for job in jobs:
            self.publisher.publish(self.topics.jobs, job)
            self._audit(
                action, job.job_id, before=before.get(job.job_id), after=job, tenant=job.tenant
            )
        self.publisher.flush()
        return len(jobs)

    def _current(self, job_ids: list[str]) -> dict[str, JobDefinition]:
        """The current definitions of ``job_ids`` (only the partitions they hash to)."""
        wanted = set(job_ids)
        current: dict[str, JobDefinition] = {}
        for key, job in self._read(only=wanted):
            if key in wanted:
                if job is None:
                    current.pop(key, None)
                else:
                    current[key] = job
        return current

    def audit_log(self, job_id: str) -> list[AuditRecord]:
        """Every audit entry of ``job_id`` (``schemas.audit``), oldest first."""
        return [
            r
            for key, r in self._read(only={job_id}, topic=self.topics.audit, kind=AuditRecord)
            if key == job_id and r is not None
        ]

    def _audit(self, action: AuditAction, job_id: str, **what: Any) -> None:
        """Queue the trail's entry (flushed with the change it describes)."""
        self.publisher.publish(self.topics.audit, self.auditor.record(action, job_id, **what))

    def delete(self, job_id: str) -> None:
        """Write a tombstone for an existing job; UnknownJob if there is none."""
        job = self.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        self.publisher.produce_raw(self.topics.jobs, job_id, None, job_headers(job_id, op="delete"))
        self._audit(AuditAction.DELETE, job_id, before=job, tenant=job.tenant)
        self.publisher.flush()

    def pause(self, job_id: str) -> JobDefinition:
        return self._set_paused(job_id, paused=True)

    def resume(self, job_id: str) -> JobDefinition:
        return self._set_paused(job_id, paused=False)

    def _set_paused(self, job_id: str, *, paused: bool) -> JobDefinition:
        job = self.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        updated = replace(job, paused=paused, updated_at=utc_now())
        action = AuditAction.PAUSE if paused else AuditAction.RESUME
        self._write_jobs([updated], action, before={job_id: job})
        return updated

    # -- reading jobs -------------------------------------------------------------------
    def get(self, job_id: str) -> JobDefinition | None:
        latest = None
        for key, job in self._read(only={job_id}):
            if key == job_id:
                latest = job
        return latest

    def list_jobs(self) -> list[JobDefinition]:
        jobs: dict[str, JobDefinition | None] = {}
        for key, job in self._read(only=None):
            jobs[key] = job
        return sorted((j for j in jobs.values() if j is not None), key=lambda j: j.job_id)

    def _partition_count(self, consumer: Consumer, name: str) -> int:
        meta = consumer.list_topics(name, timeout=10)
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise RuntimeError(f"topic {name} does not exist: run 'make up' (bootstrap) first")
        return len(topic.partitions)

    def _read(
        self,
        *,
        only: Set[str] | None,
        topic: str | None = None,
        kind: type[E] = JobDefinition,  # type: ignore[assignment]
    ) -> Iterator[tuple[str, E | None]]:
        """(key, definition or None for a tombstone) of a compacted topic (the jobs
        topic unless told), in log order, up to the end each partition had when the
        reader got there (librdkafka's end-of-partition event: no watermark round trip
        per partition first). With ``only``, just the partitions those keys hash to
        are read."""
        topic = topic or self.topics.jobs
        consumer = self._reader_consumer()
        try:
            count = self._partition_count(consumer, topic)
            partitions = (
                sorted({partition_for(key, count) for key in only})
                if only is not None
                else list(range(count))
            )
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            left = set(partitions)
            while left:
                for msg in consume_ready(consumer, 1000, 1.0):
                    error = msg.error()
                    if msg.topic() != topic:
                        continue
                    if error is None:
                        yield from self._decoded(msg, kind)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        left.discard(msg.partition())
        finally:
            consumer.unassign()  # the next read assigns its own partitions

    def _reader_consumer(self) -> Consumer:
        """The client's reader, made at its first read. Reading to each partition's end
        is told by an end-of-partition event, and an empty partition's fetch is
        answered after 10 ms, not the broker's 500 ms wait for data."""
        if self._reader is None:
            self._reader = kafka_consumer(
                self.settings,
                **{
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                },
            )
        return self._reader

    def _decoded(self, msg: Any, kind: type[E]) -> Iterator[tuple[str, E | None]]:
        """(key, value decoded as ``kind``, None for a tombstone) of a record; nothing
        for an undecodable one, which is noted in ``skipped``."""
        key = (msg.key() or b"").decode("utf-8", "replace")
        value = msg.value()
        if value is None:
            yield key, None
            return
        try:
            yield key, self.publisher.codec.decode(value, kind)
        except DecodeError as exc:
            self.skipped.append(f"{msg.topic()}/{msg.partition()}@{msg.offset()}: {exc}")

    # -- flows --------------------------------------------------------------------------
    def put_flow(self, flow: FlowDefinition, schedule: JobDefinition) -> None:
        """Write a flow: its definition, then its schedule (a job of the same id whose
        target is ``flow``: each of its runs starts a flow run)."""
        found = unencodable(flow, "flow") or problems(
            schedule, max_payload_bytes=self.settings.max_payload_bytes
        )
        if schedule.job_id != flow.flow_id or schedule.target.type != "flow":
            found.append("the schedule must be a job of the flow's id with target flow")
        if found:
            raise SpecError(f"flow {flow.flow_id}", found)
        before = self.get_flow(flow.flow_id)
        self.publisher.publish(self.topics.flows, flow)
        self.publisher.publish(self.topics.jobs, schedule)
        self._audit(
            AuditAction.FLOW_PUT, flow.flow_id, before=before, after=flow, tenant=schedule.tenant
        )
        self.publisher.flush()

    def get_flow(self, flow_id: str) -> FlowDefinition | None:
        latest = None
        for key, flow in self._read(only={flow_id}, topic=self.topics.flows, kind=FlowDefinition):
            if key == flow_id:
                latest = flow
        return latest

    def list_flows(self) -> list[FlowDefinition]:
        flows: dict[str, FlowDefinition | None] = {}
        for key, flow in self._read(only=None, topic=self.topics.flows, kind=FlowDefinition):
            flows[key] = flow
        return sorted((f for f in flows.values() if f is not None), key=lambda f: f.flow_id)

    def delete_flow(self, flow_id: str) -> None:
        """Tombstones for the flow's schedule, then its definition (runs in progress
        can no longer start nodes: they end FAILED)."""
        flow = self.get_flow(flow_id)
        if flow is None:
            raise UnknownJob(flow_id)
        self.publisher.produce_raw(
            self.topics.jobs, flow_id, None, job_headers(flow_id, op="delete")
        )
        self.publisher.produce_raw(self.topics.flows, flow_id, None, [("op", b"delete")])
        self._audit(AuditAction.FLOW_DELETE, flow_id, before=flow)
        self.publisher.flush()

    def rerun_flow(self, flow_run_id: str) -> FlowEvent:
        """Ask the coordinator to run the failed part of a flow run again."""
        flow_id = job_id_of(flow_run_id)
        if self.get_flow(flow_id) is None:
            raise UnknownJob(flow_id)
        now = utc_now()
        event = FlowEvent(
            flow_id=flow_id,
            flow_run_id=flow_run_id,
            kind=FlowEventKind.RERUN,
            scheduled_at=now,
            at=now,
        )
        self.publisher.publish(self.topics.flow_events, event)
        self._audit(AuditAction.FLOW_RERUN, flow_id, detail=f"{flow_run_id} --from-failed")
        self.publisher.flush()
        return event

    # -- runs ---------------------------------------------------------------------------
    def trigger(
        self, job_id: str, *, idempotency_key: str | None = None, now: datetime | None = None
    ) -> RunRequest:
        """Send a manual run of ``job_id`` straight to its execution topic.

        The run id is ``JOB@manual:KEY``: triggering twice with the same key names the same
        run, which workers execute once. Without a key every call is a new run.
        """
        (run,) = self.trigger_many(job_id, [idempotency_key], now=now)
        return run

    def trigger_many(
        self, job_id: str, idempotency_keys: Sequence[str | None], *, now: datetime | None = None
    ) -> list[RunRequest]:
        """Send one manual run per key (None: a fresh key) after reading the job once."""
        problems = [
            p for key in idempotency_keys if key is not None for p in idempotency_key_problems(key)
        ]
        if problems:
            raise SpecError(f"trigger {job_id}", problems)
        job = self.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        now = now or utc_now()
        runs = []
        for key in idempotency_keys:
            run = job.run_request(
                run_id=manual_run_id(job_id, key or uuid.uuid4().hex),
                scheduled_at=now,
                fired_at=now,
                trigger=Trigger.MANUAL,
            )
            self.publisher.publish(self.topics.runs(job.priority), run)
            self._audit(AuditAction.TRIGGER, job_id, detail=run.run_id, tenant=job.tenant)
            runs.append(run)
        self.publisher.flush()
        return runs

    def cancel(self, run_id: str, *, reason: str | None = None) -> ControlCommand:
        """Ask every worker to cancel ``run_id`` (running: stopped; queued: never started)."""
        command = ControlCommand(
            command_id=uuid.uuid4().hex,
            action=ControlAction.CANCEL,
            run_id=run_id,
            job_id=job_id_of(run_id),
            issued_at=utc_now(),
            reason=reason,
        )
        require_encodable(f"cancel {run_id!r}", command)
        self.publisher.publish(self.topics.control, command)
        why = f" ({reason})" if reason else ""
        self._audit(AuditAction.CANCEL, command.job_id or run_id, detail=f"{run_id}{why}")
        self.publisher.flush()
        return command

    def audit_backfill(self, job: JobDefinition, detail: str) -> None:
        """The trail's entry of a backfill (its runs are not entries of their own)."""
        self._audit(AuditAction.BACKFILL, job.job_id, detail=detail, tenant=job.tenant)
        self.publisher.flush()
