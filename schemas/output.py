"""A run's output (``cronstream.run-output``, docs/run-output.md): what one attempt
printed or returned, kept by the worker beside the attempt's outcome for a shorter time
than history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar

from cronstream.schemas.avro import KeyedByJob
from cronstream.schemas.headers import run_headers


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutput(KeyedByJob):
    """The output of one attempt of one run, keyed by its job id (as its outcome)."""

    AVRO_NAME: ClassVar[str] = "cronstream.RunOutput"

    run_id: str
    job_id: str
    status: str  # the attempt's final status
    scheduled_at: datetime
    recorded_at: datetime
    output: str
    tenant: str = "default"
    attempt: int = 1
    # What was not kept: None (all of it is here), "start" (its last bytes are kept),
    # "end" (its first bytes are kept: an http body read no further).
    dropped: str | None = None
    target_type: str | None = None
    worker: str | None = None

    def cut_note(self) -> str | None:
        """What a reader should know of the part not kept (None: the whole output)."""
        if self.dropped == "end":
            return "the rest was not kept: its first bytes are shown"
        if self.dropped is not None:
            return "its start was not kept: its last bytes are shown"
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return run_headers("RunOutput", self, status=self.status)
