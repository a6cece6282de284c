"""What the OpenAPI document says of the API beyond its routes: the bearer token, the
request bodies and the error bodies. The document is a contract a fuzzer reads
(``tests/api_fuzz.py`` generates calls from it and checks every answer against it), so it
describes the bodies the handlers really read: a jobs.yaml entry's keys
(``schemas.definition.spec.KNOWN_KEYS``, a unit test keeps them equal), the optional
fields of a trigger and a cancel, and ``{"error": ..., "problems": [...]}`` for every
refusal."""

from __future__ import annotations

from typing import Any

from fastapi.security import HTTPBearer
from pydantic import BaseModel

from cronstream.schemas.definition.triggers import ON_KEYS

BEARER = HTTPBearer(auto_error=False, description="a tenant's token, or the admin's")


class Problem(BaseModel):
    """Every refusal: the reason, and each problem when there are several."""

    error: str
    problems: list[str] | None = None


class TriggerBody(BaseModel):
    """A manual run's optional body: its idempotency key (or the header's)."""

    idempotency_key: str | None = None


class CancelBody(BaseModel):
    """A cancel's optional body: why, for the run's record."""

    reason: str | None = None


_ERRORS = {
    400: "a bad request: ?tenant= without an admin token, an admin's write without it, "
    "a Host name not served",
    401: "no token, or one the token book does not hold",
    403: "a target the tenant's policy does not grant",
    404: "no such job, run, tenant or output (another tenant's is none either)",
    413: "a body over 1 MiB",
    422: "invalid: every problem listed",
    429: "over a quota (jobs, manual runs per minute)",
    503: "no answer in time: from the admission, or from the archive table a history "
    "query older than Cassandra's days needed",
}
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": Problem, "description": text} for status, text in _ERRORS.items()
}

_TEXT: dict[str, Any] = {"type": "string"}
_DURATION: dict[str, Any] = {"type": ["string", "number"], "description": "30s, 5m, 1h30m"}
_WHOLE: dict[str, Any] = {"type": "integer"}
_ON = {
    "type": ["string", "object"],
    "description": "a topic, or a mapping",
    "properties": {key: {} for key in ON_KEYS},
    "additionalProperties": False,
}
SPEC_PROPERTIES: dict[str, dict[str, Any]] = {
    "id": _TEXT,
    "cron": _TEXT,
    "every": _DURATION,
    "anchor": _TEXT,
    "at": _TEXT,
    "tz": _TEXT,
    "target": _TEXT,
    "url": _TEXT,
    "method": _TEXT,
    "headers": {"type": "object", "additionalProperties": {"type": ["string", "number"]}},
    "topic": _TEXT,
    "callable": _TEXT,
    "command": _TEXT,
    "payload": {"description": "text, or any JSON (stored as its JSON text)"},
    "priority": {"enum": ["high", "normal", "low"]},
    "max_attempts": _WHOLE,
    "backoff": {"type": "string", "description": "MIN..MAX, e.g. 1s..5m"},
    "timeout": _DURATION,
    "misfire": {"enum": ["skip", "once", "all"]},
    "concurrency": {"enum": ["allow", "forbid", "replace", "queue"]},
    "catchup": _WHOLE,
    "catchup_window": _DURATION,
    "jitter": _DURATION,
    "start": _TEXT,
    "end": _TEXT,
    "paused": {"type": "boolean"},
    "tenant": _TEXT,
    "deadline": _DURATION,
    "on": _ON,
    "after": {"type": "array", "items": _TEXT},
}
JOB_SPEC = {
    "type": "object",
    "description": "a jobs.yaml entry as JSON (docs/concepts.md); its id is the path's",
    "properties": SPEC_PROPERTIES,
    "additionalProperties": False,
}
EXAMPLE_SPEC = {
    "cron": "0 2 * * *",
    "target": "http",
    "url": "https://example.com/hook",
    "payload": {"report": "daily"},
    "headers": {"X-Team": "billing"},
}
PUT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": JOB_SPEC, "example": EXAMPLE_SPEC}},
    }
}
