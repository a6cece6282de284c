"""The audit trail (``cronstream.audit``): every change to a job or flow definition and
every command on its runs, append-only, kept as long as history (365 days).

Who: ``principal`` is the authenticated identity: the Kafka user a CLI or program wrote
as, or ``tenant NAME`` for a tenant's command through the admission (only that tenant's
user and the API may write its command topic). ``origin`` says from where: this host and
process for a local change (with ``os_user``); for a tenant's command, what its sender
reported (``api token of HOLDER from ADDRESS`` from the API, user and host from the
tenant CLI): reported, not verified, since a tenant can write its topic itself. What:
``action`` and, for a definition, the field-level diff (``field_changes``), shown
redacted: credentials in URLs and headers never reach the trail.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from cronstream.schemas.avro import AvroRecord, KeyedByJob
from cronstream.schemas.events import to_jsonable
from cronstream.schemas.headers import record_headers
from cronstream.schemas.redact import redact_jsonable


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
class AuditRecord(KeyedByJob):
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

    def headers(self) -> list[tuple[str, bytes]]:
        return record_headers(
            "AuditRecord",
            ("action", self.action.value),
            ("job_id", self.job_id),
            ("principal", self.principal),
        )


IGNORED = frozenset({"updated_at"})  # changes on every write: not a change of the job


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    """Leaves by dotted path; a null or an empty mapping is no leaf (an absent field)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{path}.{key}" if path else str(key)))
        return out
    return {} if value is None else {path: value}


def _both(value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A definition's leaves as they are and as shown (redacted)."""
    if value is None:
        return {}, {}
    plain = to_jsonable(value)
    return _flat(plain), _flat(redact_jsonable(plain))


def field_changes(before: Any, after: Any) -> tuple[FieldChange, ...]:
    """The fields that differ between two definitions (either None: created or deleted),
    by dotted path (``target.url``, ``retry.max_attempts``), sorted. Compared as they
    are, shown redacted: a rotated credential is a change whose both sides read
    ``***`` (the after side ``*** (changed)``)."""
    old, old_shown = _both(before)
    new, new_shown = _both(after)
    changes = []
    for name in sorted(set(old) | set(new)):
        if name in IGNORED or name.split(".")[0] in IGNORED:
            continue
        if name in old and name in new and old[name] == new[name]:
            continue
        shown_after = new_shown.get(name)
        if name in old and name in new and old_shown.get(name) == shown_after:
            shown_after = f"{shown_after} (changed)"
        changes.append(
            FieldChange(
                field=name,
                before=json.dumps(old_shown.get(name), sort_keys=True) if name in old else None,
                after=json.dumps(shown_after, sort_keys=True) if name in new else None,
            )
        )
    return tuple(changes)
