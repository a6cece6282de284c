"""A run request read from Kafka and not yet settled, and what its outcomes carry."""

from __future__ import annotations

from dataclasses import dataclass, field

from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.executors.base import RunContext
from cronstream.consumers.worker.observers import Record
from cronstream.runtime.kafka.records import Headers
from cronstream.schemas.events import EPOCH, RunRequest, RunStatus, Target
from cronstream.schemas.headers import run_headers
from cronstream.schemas.templates import OutcomeTemplate


@dataclass(slots=True, eq=False)
class Pending:
    """A run request read from Kafka and not yet settled."""

    topic: str
    partition: int
    offset: int
    run: RunRequest
    tracker: OffsetTracker  # its partition's, as of when it was read
    history_needed: int | None = None  # history offset to have read before deciding
    context: RunContext | None = None
    started_ms: int = 0  # when its attempt started, wall clock (0: not started)
    on_thread: bool = False  # its attempt runs on a run thread (not its executor's loop)
    # The destination whose slot its attempt holds, or waits for (``Destinations``)
    destination: str | None = None
    announced: bool = False  # its attempt's STARTED outcome published
    outcome: list[tuple[bytes, Headers]] = field(default_factory=list)  # encoded, unpublished
    template: OutcomeTemplate | None = None  # what its outcomes have in common, encoded
    headers: Headers | None = None  # its outcomes' headers but the status (the last one)
    extra: list[Record] = field(default_factory=list)  # to be durable before its outcome
    output: tuple[bytes, Headers] | None = None  # its RunOutput, encoded, published with it


def outcome_headers(pending: Pending, status: RunStatus) -> Headers:
    """The readable headers of an outcome of ``pending``'s attempt (``run_headers``; all
    but the status, which comes last, are built once per attempt)."""
    if pending.headers is None:
        headers = run_headers("RunOutcome", pending.run, status=status.value)
        assert headers[-1][0] == "status", headers
        pending.headers = headers[:-1]
        return headers
    return [*pending.headers, ("status", status.value.encode())]


# Stands in for every run that could not be decoded: only its place (partition and
# offset, kept by its Pending) matters, for the commit.
UNDECODABLE = RunRequest(
    run_id="?@undecodable",
    job_id="?",
    scheduled_at=EPOCH,
    fired_at=EPOCH,
    target=Target(type="none"),
)
