"""The exceptions of ``producers``: what a client (the CLI, the API, a library user) is
told when a command is refused or goes unanswered."""

from __future__ import annotations


class NoAnswer(TimeoutError):
    """A command written for the admission (a job, a tenant command) got no answer in
    time; the message says which and after how long (is `cronstream admission`
    running?)."""


class UnknownJob(LookupError):
    """No job with that id exists (never put, or deleted)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job {job_id!r} (see 'cronstream jobs list')")
        self.job_id = job_id
