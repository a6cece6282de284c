"""Writing and reading the audit trail (``schemas.audit``, topic ``cronstream.audit``).

``Auditor`` makes the records of one writer: the CLI or a program through ``JobClient``
(principal: the Kafka user it writes as; the OS user; origin: host and process), or the
admission for a tenant's commands (principal ``tenant NAME``, with what the command says
of who issued it). Records go out with the change they describe, in the same flush: a
call that returned has both acknowledged. ``read_log`` reads one job's entries (the one
partition its id hashes to), oldest first.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from runtime.kafka.clients import consume_ready, kafka_consumer
from runtime.kafka.offsets import watermarks
from runtime.settings import Settings
from schemas.audit import AuditAction, AuditRecord, field_changes
from schemas.catalog import Topics
from schemas.events import JobDefinition, utc_now
from schemas.ids import partition_for
from schemas.serde import Codec, DecodeError
from schemas.tenancy import TenantCommand

READ_TIMEOUT_S = 30.0  # reading one job's partition of the trail


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return None


class Auditor:
    def __init__(self, principal: str, *, origin: str | None = None, local: bool = True,
                 tenant: str = "default") -> None:  # fmt: skip
        """``local``: the change is made by this process (the OS user and this host and
        process are where it comes from); not for the admission, which applies what a
        tenant sent (``origin`` then says from where)."""
        self.principal = principal
        self.origin = origin or f"{socket.gethostname()} pid {os.getpid()}"
        self.os_user = _os_user() if local else None
        self.tenant = tenant

    def record(self, action: AuditAction, job_id: str, *, before: Any = None, after: Any = None,
               detail: str | None = None, tenant: str | None = None,
               at: datetime | None = None) -> AuditRecord:  # fmt: skip
        """One entry: ``before``/``after`` are the definitions (or None) whose fields
        differ; ``detail`` says what a command was about (a run id, a range)."""
        return AuditRecord(
            audit_id=uuid.uuid4().hex, action=action, job_id=job_id, at=at or utc_now(),
            principal=self.principal, origin=self.origin, os_user=self.os_user,
            tenant=tenant or self.tenant, changes=field_changes(before, after), detail=detail,
        )  # fmt: skip


def read_log(settings: Settings, codec: Codec, job_id: str) -> Iterator[AuditRecord]:
    """Every audit entry of ``job_id`` in the order written (unreadable ones skipped)."""
    topic = Topics(settings).audit
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {topic} does not exist: run 'make up' (bootstrap) first")
        tp = TopicPartition(topic, partition_for(job_id, len(meta.partitions)), OFFSET_BEGINNING)
        low, end = watermarks(consumer, tp)
        consumer.assign([tp])
        position, deadline = low, time.monotonic() + READ_TIMEOUT_S
        while position < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the audit trail of {job_id!r} was read only to offset "
                                   f"{position} of {end} in {READ_TIMEOUT_S:.0f} s")  # fmt: skip
            for msg in consume_ready(consumer, 500, 1.0):
                if msg.error():
                    continue
                position = (msg.offset() or 0) + 1
                if (msg.key() or b"").decode("utf-8", "replace") != job_id:
                    continue
                try:
                    yield codec.decode(msg.value(), AuditRecord)
                except DecodeError:
                    continue
    finally:
        consumer.close()


def command_record(tenant: str, command: TenantCommand, *, stored: str,
                   before: JobDefinition | None, after: JobDefinition | None,
                   run_id: str | None, at: datetime) -> AuditRecord:  # fmt: skip
    """The trail's entry of a tenant's command the admission accepted (``stored``: the
    job's id as stored, ``tenant/JOB``)."""
    auditor = Auditor(f"tenant {tenant}", origin=command.issued_by or "unknown (no issued_by)",
                      local=False, tenant=tenant)  # fmt: skip
    action = AuditAction(command.action.value)
    detail = run_id if action in (AuditAction.TRIGGER, AuditAction.CANCEL) else None
    if action is AuditAction.CANCEL and command.reason:
        detail = f"{detail} ({command.reason})"
    changed = action in (AuditAction.PUT, AuditAction.DELETE, AuditAction.PAUSE,
                         AuditAction.RESUME)  # fmt: skip
    return auditor.record(action, stored, before=before if changed else None,
                          after=after if changed else None, detail=detail, at=at)  # fmt: skip
