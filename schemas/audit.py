"""The audit trail (``cronstream.audit``): every change to a job or flow definition and
every command on its runs, append-only, kept as long as history (365 days).

Who: ``principal`` is the authenticated identity (the Kafka user a CLI or program wrote
as; ``tenant NAME`` for a tenant's command through the admission, with the API token's
name when it came through the API); ``os_user`` and ``origin`` (host and process, or the
API client's address) say from where. What: ``action`` and, for a definition, the
field-level diff of its redacted JSON form (``field_changes``): credentials in URLs and
headers never reach the trail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from schemas.events import AvroRecord, to_jsonable
from schemas.redact import redact_jsonable


class AuditAction(StrEnum):
    PUT = "PUT"
    DELETE = "DELETE"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    TRIGGER = "TRIGGER"
    CANCEL = "CANCEL"
    BACKFILL = "BACKFILL"
    FLOW_PUT = "FLOW_PUT"
    FLOW_DELETE = "FLOW_DELETE"
    FLOW_RERUN = "FLOW_RERUN"


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldChange(AvroRecord):
    """One field of a definition: its JSON text before and after (null: absent)."""

    AVRO_NAME: ClassVar[str] = "cronstream.FieldChange"

    field: str
    before: str | None = None
    after: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord(AvroRecord):
    AVRO_NAME: ClassVar[str] = "cronstream.AuditRecord"

    audit_id: str
    action: AuditAction
    job_id: str
    at: datetime
    principal: str
    origin: str
    tenant: str = "default"
    os_user: str | None = None
    changes: tuple[FieldChange, ...] = ()
    detail: str | None = None

    def key(self) -> str:
        return self.job_id

    def headers(self) -> list[tuple[str, bytes]]:
        return [("event", b"AuditRecord"), ("action", self.action.value.encode()),
                ("job_id", self.job_id.encode()),
                ("principal", self.principal.encode())]  # fmt: skip


IGNORED = frozenset({"updated_at"})  # changes on every write: not a change of the job


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    """Leaves by dotted path; a null or an empty mapping is no leaf (an absent field)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{path}.{key}" if path else str(key)))
        return out
    return {} if value is None else {path: value}


def field_changes(before: Any, after: Any) -> tuple[FieldChange, ...]:
    """The fields that differ between two definitions (either None: created or deleted),
    by dotted path (``target.url``, ``retry.max_attempts``), redacted, sorted."""
    old = _flat(redact_jsonable(to_jsonable(before))) if before is not None else {}
    new = _flat(redact_jsonable(to_jsonable(after))) if after is not None else {}
    changes = []
    for name in sorted(set(old) | set(new)):
        if name in IGNORED or name.split(".")[0] in IGNORED:
            continue
        if name in old and name in new and old[name] == new[name]:
            continue
        changes.append(FieldChange(
            field=name,
            before=json.dumps(old[name], sort_keys=True) if name in old else None,
            after=json.dumps(new[name], sort_keys=True) if name in new else None,
        ))  # fmt: skip
    return tuple(changes)
