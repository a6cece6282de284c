"""The readable headers on every cronstream record (keys and headers are plain UTF-8 so
that `kcat -f '%k %h'` shows what flows), and reading them back."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from cronstream.schemas.instants import iso


def job_headers(job_id: str, *, op: str, detail: str | None = None) -> list[tuple[str, bytes]]:
    """Headers of a jobs-topic record; a tombstone gets them too (op=delete)."""
    headers = [("event", b"JobDefinition"), ("job_id", job_id.encode()), ("op", op.encode())]
    if detail:
        headers.append(("schedule", detail.encode()))
    return headers


def record_headers(
    event: str, *always: tuple[str, str], **if_set: str | None
) -> list[tuple[str, bytes]]:
    """A record's readable headers, UTF-8: ``("event", event)``, each of ``always``, then
    each of ``if_set`` that has a text (None and "" are left out), in that order."""
    headers = [("event", event.encode())]
    headers += [(name, text.encode()) for name, text in always]
    headers += [(name, text.encode()) for name, text in if_set.items() if text]
    return headers


class NamesRun(Protocol):
    """A record about one attempt of one run (its request, outcome or output): what its
    readable headers name it by."""

    @property
    def run_id(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def scheduled_at(self) -> datetime: ...
    @property
    def attempt(self) -> int: ...


def run_headers(event: str, run: NamesRun, *, status: str) -> list[tuple[str, bytes]]:
    """The readable headers every run-related record carries (kcat shows them): those
    naming ``run``'s attempt, then ``status``."""
    return encoded_run_headers(
        event.encode(),
        run.job_id.encode(),
        run.run_id.encode(),
        iso(run.scheduled_at).encode(),
        attempt=str(run.attempt).encode(),
        status=status.encode(),
    )


def encoded_run_headers(
    event: bytes,
    job_id: bytes,
    run_id: bytes,
    scheduled_at: bytes,
    *,
    attempt: bytes,
    status: bytes,
) -> list[tuple[str, bytes]]:
    """``run_headers`` from values already encoded (the scheduler's fire path encodes a
    job's id and a slot's instant once for many runs)."""
    return [
        ("event", event),
        ("job_id", job_id),
        ("run_id", run_id),
        ("scheduled_at", scheduled_at),
        ("attempt", attempt),
        ("status", status),
    ]


def run_request_headers(
    job_id: bytes,
    run_id: bytes,
    scheduled_at: bytes,
    *,
    attempt: bytes,
    trigger: bytes,
    possible_duplicate: bool,
    due_at: bytes | None = None,
) -> list[tuple[str, bytes]]:
    """A RunRequest's headers: ``run_headers`` with status REQUESTED, the trigger,
    ``possible_duplicate: true`` on a flagged re-emission, and ``due_at`` on a run
    emitted ahead of its due time (the worker holds it until then)."""
    headers = encoded_run_headers(
        b"RunRequest", job_id, run_id, scheduled_at, attempt=attempt, status=b"REQUESTED"
    )
    headers.append(("trigger", trigger))
    if possible_duplicate:
        headers.append(("possible_duplicate", b"true"))
    if due_at is not None:
        headers.append(("due_at", due_at))
    return headers


def text_headers(headers: Any) -> dict[str, str]:
    """Kafka record headers as text (the form cronstream writes them in)."""
    out = {}
    for name, value in headers or []:
        out[name] = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else ""
    return out
