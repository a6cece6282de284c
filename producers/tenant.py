"""TenantClient: a tenant's way to its jobs, as its own Kafka user.

It writes ``TenantCommand`` records to the tenant's commands topic and waits for the
admission's answer on the tenant's results topic (matched by command id). Job ids are
the tenant's own (``nightly``); cronstream stores them as ``tenant/nightly``.

Settings: the tenant's Kafka user is ``tenant-<name>`` (the Kafka user setting
otherwise), its password from the Kafka password settings (``runtime.kafka.security``)
or the local stack's credentials. Kafka refusing the user, or the user writing where its
ACLs do not reach, raises ``KafkaAuthError`` / ``PublishError`` with the broker's reason.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any

from cronstream.producers.audit import here
from cronstream.producers.errors import NoAnswer
from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.clients import TopicPartition, consume_ready, kafka_consumer
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import JobDefinition, utc_now
from cronstream.schemas.limits import require_encodable
from cronstream.schemas.tenancy import TenantAction, TenantCommand, TenantResult, tenant_user


def issue(
    action: TenantAction,
    job_id: str,
    *,
    job: JobDefinition | None = None,
    idempotency_key: str | None = None,
    run_id: str | None = None,
    reason: str | None = None,
    issued_by: str | None = None,
    now: datetime | None = None,
) -> TenantCommand:
    """A new command (its own id, issued ``now`` or at once), as every sender writes it
    (this client, the API). Raises SpecError for text no topic can carry
    (``require_encodable``: the field named): refused before it is written."""
    command = TenantCommand(
        command_id=uuid.uuid4().hex,
        action=action,
        job_id=job_id,
        issued_at=now or utc_now(),
        job=job,
        idempotency_key=idempotency_key,
        run_id=run_id,
        reason=reason,
        issued_by=issued_by,
    )
    require_encodable(f"{action.value} {job_id!r}", command)
    return command


def tenant_settings(settings: Settings, tenant: str) -> Settings:
    """``settings`` as tenant ``tenant``'s Kafka user (unless one was set explicitly)."""
    return settings.acting_as(tenant_user(tenant))


class TenantClient:
    def __init__(self, settings: Settings, tenant: str) -> None:
        self.tenant = tenant
        self.settings = tenant_settings(settings, tenant)
        topics = Topics(settings)
        self.commands = topics.tenant_commands(tenant)
        self.results = topics.tenant_results(tenant)
        self.publisher = Publisher(self.settings, answering=True)
        group = f"{settings.topic_prefix}.t.{tenant}.client"
        self.consumer = kafka_consumer(self.settings, **{"group.id": group})
        # From the end as of now, resolved here: librdkafka would resolve OFFSET_END
        # when it first fetches, after an answer may have come.
        end = watermarks(self.consumer, TopicPartition(self.results, 0))[1]
        self.consumer.assign([TopicPartition(self.results, 0, end)])
        self.answers: dict[str, TenantResult] = {}
        self.timeout = 30.0  # seconds to wait for each answer
        self.issued_by = here()  # for the audit trail

    def close(self) -> None:
        self.consumer.close()
        self.publisher.close()

    def __enter__(self) -> TenantClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- commands ---------------------------------------------------------------------
    def put(self, job: JobDefinition) -> TenantResult:
        return self.send(issue(TenantAction.PUT, job.job_id, job=job, issued_by=self.issued_by))

    def delete(self, job_id: str) -> TenantResult:
        return self.send(issue(TenantAction.DELETE, job_id, issued_by=self.issued_by))

    def pause(self, job_id: str) -> TenantResult:
        return self.send(issue(TenantAction.PAUSE, job_id, issued_by=self.issued_by))

    def resume(self, job_id: str) -> TenantResult:
        return self.send(issue(TenantAction.RESUME, job_id, issued_by=self.issued_by))

    def trigger(self, job_id: str, idempotency_key: str | None = None) -> TenantResult:
        return self.send(
            issue(
                TenantAction.TRIGGER,
                job_id,
                idempotency_key=idempotency_key,
                issued_by=self.issued_by,
            )
        )

    def cancel(self, run_id: str, reason: str | None = None) -> TenantResult:
        job_id = run_id.rpartition("@")[0] or run_id
        return self.send(
            issue(
                TenantAction.CANCEL, job_id, run_id=run_id, reason=reason, issued_by=self.issued_by
            )
        )

    def send(self, command: TenantCommand) -> TenantResult:
        """Write one command (``issue`` makes it: a command line's undecodable byte is
        refused there) and wait for its answer (NoAnswer after ``self.timeout`` s)."""
        offset = self._write(command)
        return self.answer(command.command_id, offset, self.timeout)

    def _write(self, command: TenantCommand) -> int:
        """Write ``command``; its offset once Kafka acknowledged it."""
        delivered: list[ConsumedMessage] = []
        value = self.publisher.codec.encode(self.commands, command)
        self.publisher.producer.produce(
            self.commands,
            value=value,
            key=command.key().encode(),
            headers=list[Any](command.headers()),
            on_delivery=lambda err, msg: delivered.append(msg),
        )
        self.publisher.producer.flush(self.publisher.flush_wait_s)
        error = delivered[0].error() if delivered else None
        if not delivered or error is not None:
            why = error.str() if error is not None else "no acknowledgement"
            raise PublishError(f"command to {self.commands} not written: {why}")
        return delivered[0].offset() or 0

    def answer(self, command_id: str, offset: int, timeout: float) -> TenantResult:
        """The answer to the command ``command_id`` written at ``offset`` (a command the
        admission could not read is answered by its offset only)."""
        deadline = time.monotonic() + timeout
        unread = f"@{offset}"
        while command_id not in self.answers and unread not in self.answers:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(
                    f"no answer to command {command_id} on {self.results} in "
                    f"{timeout:.0f} s: is `cronstream admission` running?"
                )
            for msg in consume_ready(self.consumer, 100, min(left, 0.5)):
                if msg.error():
                    continue
                try:
                    result = self.publisher.codec.decode(msg.value(), TenantResult)
                except DecodeError:
                    continue
                self.answers[result.command_id or f"@{result.source_offset}"] = result
        return self.answers.pop(command_id, None) or self.answers.pop(unread)
