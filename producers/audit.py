"""Writing and reading the audit trail (``schemas.audit``, topic ``cronstream.audit``).

``Auditor`` makes the records of one writer: the CLI or a program through ``JobClient``
(principal: the Kafka user it writes as; the OS user; origin: host and process), or the
admission for a tenant's commands (principal ``tenant NAME``, with what the command says
of who issued it). Records go out with the change they describe, in the same flush: a
call that returned has both acknowledged. ``JobClient.audit_log`` reads one job's
entries (the one partition its id hashes to), oldest first.
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from datetime import datetime
from typing import Any

from cronstream.schemas.audit import AuditAction, AuditRecord, field_changes
from cronstream.schemas.events import JobDefinition, utc_now
from cronstream.schemas.tenancy import TenantCommand


def _os_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        return None


def here() -> str:
    """Who and where this process is, as a tenant command's ``issued_by`` says it."""
    return f"{_os_user() or 'unknown user'} on {_origin()}"


def _origin() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


class Auditor:
    def __init__(
        self,
        principal: str,
        *,
        origin: str | None = None,
        local: bool = True,
        tenant: str = "default",
    ) -> None:
        """``local``: the change is made by this process (the OS user and this host and
        process are where it comes from); not for the admission, which applies what a
        tenant sent (``origin`` then says from where)."""
        self.principal = principal
        self.origin = origin or _origin()
        self.os_user = _os_user() if local else None
        self.tenant = tenant

    def record(
        self,
        action: AuditAction,
        job_id: str,
        *,
        before: Any = None,
        after: Any = None,
        detail: str | None = None,
        tenant: str | None = None,
        at: datetime | None = None,
    ) -> AuditRecord:
        """One entry: ``before``/``after`` are the definitions (or None) whose fields
        differ; ``detail`` says what a command was about (a run id, a range)."""
        return AuditRecord(
            audit_id=uuid.uuid4().hex,
            action=action,
            job_id=job_id,
            at=at or utc_now(),
            principal=self.principal,
            origin=self.origin,
            os_user=self.os_user,
            tenant=tenant or self.tenant,
            changes=field_changes(before, after),
            detail=detail,
        )


def command_record(
    tenant: str,
    command: TenantCommand,
    *,
    stored: str,
    before: JobDefinition | None,
    after: JobDefinition | None,
    run_id: str | None,
    at: datetime,
) -> AuditRecord:
    """The trail's entry of a tenant's command the admission accepted (``stored``: the
    job's id as stored, ``tenant/JOB``)."""
    auditor = Auditor(
        f"tenant {tenant}",
        origin=command.issued_by or "unknown (no issued_by)",
        local=False,
        tenant=tenant,
    )
    action = AuditAction(command.action.value)
    detail = run_id if action in (AuditAction.TRIGGER, AuditAction.CANCEL) else None
    if action is AuditAction.CANCEL and command.reason:
        detail = f"{detail} ({command.reason})"
    changed = action in (AuditAction.PUT, AuditAction.DELETE, AuditAction.PAUSE, AuditAction.RESUME)
    return auditor.record(
        action,
        stored,
        before=before if changed else None,
        after=after if changed else None,
        detail=detail,
        at=at,
    )
