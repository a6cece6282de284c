"""`cronstream admission`: tenants' commands in, validated and stamped definitions out.

It reads every tenant's commands topic (``<prefix>.t.<tenant>.in``, subscribed by
pattern, so a tenant added later is picked up within seconds), decides each command
(``producers.admission.core``) and writes:

- an accepted put, pause or resume to the jobs topic as ``tenant/job`` with the tenant
  stamped; a delete as its tombstone;
- a manual run to its priority's runs topic; a cancel to the control topic;
- the answer (accepted, or refused with the reason) to ``<prefix>.t.<tenant>.out``.

**Commit procedure.** Per batch: decide every command, queue every write, flush (all
acknowledged), then commit the batch's offsets synchronously. A crash before the commit
makes the next owner decide those commands again: a put writes the same definition, a
trigger names the same run (deduplicated by the workers), a delete or cancel may be
answered twice. Each tenant's commands topic has one partition, so one admission decides
all of a tenant's commands in order and its quotas are exact.

**A command that makes the admission raise** (a bug its values reach, not a refusal
the decision knows): the tenant gets it refused (code ``internal``) with the error as
the reason, its offset is committed with the batch and the next command is decided
(``runtime.faults``: only twenty in a row from three tenants, without one decided
between, stop the process).

The jobs known (for ownership, pause/resume/trigger and the job quota) come from the
jobs topic, read to its end before the first command and followed after that, so an
operator's own changes count too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cronstream.producers.admission.core import Admission, Decision, JobsView, Quotas
from cronstream.producers.audit import command_record
from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.grants import PolicyBook
from cronstream.runtime.kafka.clients import (
    Consumer,
    TopicPartition,
    consume_ready,
    kafka_consumer,
)
from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.offsets import assign_whole
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, sleeping
from cronstream.schemas.audit import AuditRecord
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import JobDefinition, job_headers, utc_now
from cronstream.schemas.serde import Codec
from cronstream.schemas.tenancy import TenantCommand, commands_pattern, qualify, tenant_of_topic

log = logging.getLogger("cronstream.admission")


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionConfig(MemberConfig):
    quotas: Quotas
    grants: tuple[str, ...] = ()  # TENANT:KIND=VALUE (schemas.policy), beside the file's
    policy_file: Path | None = None  # runtime.grants; None: no file
    batch: int = 500


class JobsFollower:
    """The jobs topic read from its beginning into ``view.observe``, then followed."""

    def __init__(self, settings: Settings, codec: Codec, admission: JobsView, *, who: str) -> None:
        self.topic = Topics(settings).jobs
        self.codec = codec
        self.admission = admission
        self.consumer: Consumer = kafka_consumer(settings)
        self.next: dict[int, int] = {}  # partition -> the next offset to read
        self.who = who  # in the log line of a wait for the registry
        # How a wait for the registry sleeps (the owner's, which a stop wakes: StopWaiting)
        self.pause: Callable[[float], bool] = sleeping(lambda: False)

    def load(self) -> int:
        """Read the topic to the end it has now; the records read."""
        ends = assign_whole(self.consumer, self.topic)
        read = 0
        while any(self.next.get(p, 0) < end for p, end in ends.items()):
            read += self.follow(timeout=1.0)
        return read

    def follow(self, timeout: float = 0.0) -> int:
        """Read what is there within ``timeout``; a definition written with a schema id
        not seen yet waits for the registry while it is away (``runtime.waiting``)."""
        messages = consume_ready(self.consumer, 1000, timeout)
        learn_writers(self.codec, messages, what=self.who, log=log, pause=self.pause)
        for msg in messages:
            if msg.error():
                continue
            self.next[msg.partition() or 0] = (msg.offset() or 0) + 1
            key = (msg.key() or b"").decode("utf-8", "replace")
            value = msg.value()
            if value is None:
                self.admission.observe(key, None)
                continue
            try:
                job = self.codec.decode(value, JobDefinition)
            except DecodeError:
                continue  # the scheduler dead-letters it; it is no job
            self.admission.observe(key, job)
        return len(messages)

    def close(self) -> None:
        self.consumer.close()


class AdmissionProcessor:
    def __init__(self, settings: Settings, config: AdmissionConfig) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self.codec = Codec(registry_client(settings))
        self.publisher = Publisher(settings, codec=self.codec)
        self.policy = PolicyBook(config.grants, config.policy_file)
        self.admission = Admission(
            config.quotas,
            max_payload_bytes=settings.max_payload_bytes,
            policy=self.policy.current(),
        )
        self.jobs = JobsFollower(
            settings, self.codec, self.admission, who=f"admission {config.name}"
        )
        self.faults = RecordFaults("admission")  # a command that makes ``decide`` raise
        refresh: dict[str, Any] = {"topic.metadata.refresh.interval.ms": 2000}
        # Count balance (not per topic, unlike the workers): every tenant's commands topic
        # has one partition, and range would give each one's partition 0 to one member.
        self.member = GroupMember(
            settings,
            config,
            log=log,
            **refresh,
        )
        self.consumer = self.member.consumer

    def run(self, should_stop: Callable[[], bool]) -> None:
        self.jobs.pause = sleeping(should_stop)
        try:
            loaded = self.jobs.load()
            log.info("jobs topic read (%d records, %d jobs)", loaded, len(self.admission.jobs))
            self.member.subscribe([commands_pattern(self.settings.topic_prefix)])
            while not should_stop():
                self.step()
        except StopWaiting:  # the batch was not decided: read again by the next admission
            log.warning("stopped while waiting for the schema registry")
        finally:
            self.member.close()
            self.jobs.close()
            self.publisher.close()

    def step(self, timeout: float = 0.2) -> int:
        """Follow the jobs topic, then decide one batch of commands; the commands read."""
        self.jobs.follow()
        self.admission.policy = self.policy.current()
        messages = self.member.consume(self.config.batch, timeout, ready=True)
        learn_writers(self.codec, messages, what=self.jobs.who, log=log, pause=self.jobs.pause)
        offsets: dict[tuple[str, int], int] = {}
        for msg in messages:
            if msg.error():
                continue
            self.handle(msg)
            offsets[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
        if offsets:
            self.publisher.flush()
            commit = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
            # Refused: the commands are decided again (the same decisions, answered twice).
            self.member.commit(commit, wait=True, then="those commands are decided again")
        return len(messages)

    def handle(self, msg: ConsumedMessage) -> None:
        topic, offset = msg.topic() or "", msg.offset() or 0
        tenant = tenant_of_topic(self.settings.topic_prefix, topic)
        if tenant is None:
            return  # matched the pattern but names no tenant we could have onboarded
        raw = msg.key() or b""
        key = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        now = utc_now()
        try:
            command = self.codec.decode(msg.value(), TenantCommand)
        except DecodeError as exc:
            why = f"undecodable command: {exc}"
            self.write(tenant, self.admission.unreadable(key, offset, why, now))
            return
        stored = qualify(tenant, command.job_id)
        before = self.admission.jobs.get(stored)
        try:
            decision, record = self.decide(tenant, command, stored, before, offset, now)
        except Exception as exc:  # a bug this command reaches: refused, the next one goes on
            fault = self.faults.fault_at(exc, msg, tenant=tenant)
            self.admission.observe(stored, before)  # as it was, whatever decide changed
            decision, record = self.admission.faulted(command, offset, fault.reason, now), None
        else:
            self.faults.ok()
        if record is not None:  # the trail, flushed with the change (``step``)
            self.publisher.publish(self.topics.audit, record)
        self.write(tenant, decision)

    def decide(
        self,
        tenant: str,
        command: TenantCommand,
        stored: str,
        before: JobDefinition | None,
        offset: int,
        now: datetime,
    ) -> tuple[Decision, AuditRecord | None]:
        """The decision on one command, and its audit record when it is accepted."""
        decision = self.admission.decide(tenant, command, offset=offset, now=now)
        if not decision.result.accepted:
            return decision, None
        after = decision.job[1] if decision.job is not None else None
        run_id = (
            decision.run.run_id
            if decision.run is not None
            else (decision.cancel.run_id if decision.cancel is not None else None)
        )
        return decision, command_record(
            tenant, command, stored=stored, before=before, after=after, run_id=run_id, at=now
        )

    def write(self, tenant: str, decision: Decision) -> None:
        if decision.job is not None:
            stored, job = decision.job
            if job is None:
                headers = job_headers(stored, op="delete")
                self.publisher.produce_raw(self.topics.jobs, stored, None, headers)
            else:
                self.publisher.publish(self.topics.jobs, job)
        if decision.run is not None:
            self.publisher.publish(self.topics.runs(decision.run.priority), decision.run)
        if decision.cancel is not None:
            self.publisher.publish(self.topics.control, decision.cancel)
        result = decision.result
        self.publisher.publish(self.topics.tenant_results(tenant), result)
        action = result.action.value if result.action else "UNREADABLE"
        verdict = "accepted" if result.accepted else "refused"
        metrics.labelled(metrics.admission_commands, tenant, action, verdict).inc()
        metrics.labelled(metrics.admission_jobs, tenant).set(self.admission.counts[tenant])


__all__ = ["AdmissionConfig", "AdmissionProcessor"]
