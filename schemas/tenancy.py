"""Tenants: who owns a job, and the two topics through which a tenant reaches its jobs.

A tenant never writes cronstream's own topics. It writes ``TenantCommand`` records to
``<prefix>.t.<tenant>.in`` (only its Kafka user may) and reads the admission's
``TenantResult`` answers on ``<prefix>.t.<tenant>.out`` (only it may). The tenant of a
command is the topic's, so identity comes from authentication, never from a field.

Job ids are unique per tenant: the admission stores a tenant's job ``nightly`` as
``acme/nightly`` (``qualify``), and everything downstream (run ids, partitions, history)
carries that id. A tenant's own view drops the prefix again (``unqualify``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from cronstream.schemas.alerts import Alert
from cronstream.schemas.audit import AuditRecord
from cronstream.schemas.avro import KeyedByJob
from cronstream.schemas.events import Event, JobDefinition
from cronstream.schemas.flows import FlowDefinition, FlowEvent
from cronstream.schemas.headers import record_headers
from cronstream.schemas.output import RunOutput

# Lower-case letters, digits and '-', no dots: a prefixed ACL on ``<prefix>.t.<tenant>.``
# then never reaches another tenant whose name merely starts the same.
TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,31}\Z")
# The tenant of operators' own jobs (every record's default): not bounded by the tenants'
# target policy, its secrets at the top of a worker's namespace, never rate-limited.
OPERATORS = "default"
RESERVED = frozenset({"admin", "cronstream", "bench", OPERATORS, "all"})
SEPARATOR = "/"


class TenantAction(StrEnum):
    PUT = "PUT"
    DELETE = "DELETE"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    TRIGGER = "TRIGGER"
    CANCEL = "CANCEL"


class RefusalCode(StrEnum):
    """Why the admission refused a command, for machines: the API's HTTP status
    (``cronstream.api.app.STATUS_OF``) and clients decide by it, never by the reason's
    words. Avro enum ``cronstream.RefusalCode``: a code added later reads as INVALID in
    an older reader (the enum's default)."""

    NOT_FOUND = "not_found"  # no such job of this tenant (another tenant's included)
    QUOTA = "quota"  # the job quota or the trigger rate; the reason says when it fits
    INVALID = "invalid"  # a definition, an id or a key the limits or the rules refuse
    POLICY = "policy"  # a target the tenant is not granted (``schemas.policy``)
    UNREADABLE = "unreadable"  # a record that is not a command this admission can read
    INTERNAL = "internal"  # the command made the admission raise (``runtime.faults``)


def tenant_problems(name: str) -> list[str]:
    if not TENANT_NAME.match(name):
        return [
            f"tenant {name[:80]!r} must be 1-32 characters of a-z, 0-9 and '-', "
            "starting with a letter or digit"
        ]
    if name in RESERVED:
        return [f"tenant name {name!r} is reserved ({', '.join(sorted(RESERVED))})"]
    return []


def tenant_user(tenant: str) -> str:
    """The Kafka user of ``tenant`` (``cronstream tenants add`` makes it)."""
    return f"tenant-{tenant}"


def qualify(tenant: str, job_id: str) -> str:
    """The id cronstream stores for ``tenant``'s job ``job_id``."""
    return f"{tenant}{SEPARATOR}{job_id}"


def unqualify(tenant: str, job_id: str) -> str | None:
    """``tenant``'s own name of a stored job id, or None when the job is not its."""
    head, sep, rest = job_id.partition(SEPARATOR)
    return rest if sep and head == tenant else None


def commands_topic(prefix: str, tenant: str) -> str:
    return f"{prefix}.t.{tenant}.in"


def results_topic(prefix: str, tenant: str) -> str:
    return f"{prefix}.t.{tenant}.out"


def tenant_of_topic(prefix: str, topic: str) -> str | None:
    """The tenant whose commands topic ``topic`` is, or None."""
    head, tail = f"{prefix}.t.", ".in"
    if not (topic.startswith(head) and topic.endswith(tail)):
        return None
    name = topic[len(head) : -len(tail)]
    return None if tenant_problems(name) else name


def commands_pattern(prefix: str, suffix: str = "in") -> str:
    """librdkafka's subscription regex for every tenant's commands topic (``suffix``
    "out": results topic)."""
    return "^" + re.escape(f"{prefix}.t.") + rf"[a-z0-9][a-z0-9-]*\.{suffix}$"


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantCommand(KeyedByJob):
    AVRO_NAME: ClassVar[str] = "cronstream.TenantCommand"

    command_id: str
    action: TenantAction
    job_id: str
    issued_at: datetime
    job: JobDefinition | None = None
    idempotency_key: str | None = None
    run_id: str | None = None
    reason: str | None = None
    issued_by: str | None = None  # who and from where, for the audit trail

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "TenantCommand", ("action", self.action.value), ("job_id", self.job_id)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantResult(KeyedByJob):
    AVRO_NAME: ClassVar[str] = "cronstream.TenantResult"

    command_id: str
    job_id: str
    accepted: bool
    recorded_at: datetime
    source_offset: int
    reason: str | None = None
    run_id: str | None = None
    action: TenantAction | None = None
    code: RefusalCode | None = None  # a refusal's (None: accepted, or an older admission)

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "TenantResult",
            ("action", self.action.value if self.action else ""),
            ("job_id", self.job_id),
            ("verdict", "accepted" if self.accepted else "refused"),
            code=self.code.value if self.code else None,
            reason=self.reason[:200] if self.reason else None,
        )


AnyEvent = (
    Event
    | TenantCommand
    | TenantResult
    | FlowDefinition
    | FlowEvent
    | Alert
    | AuditRecord
    | RunOutput
)
