"""The far tier of a partition's schedule: what the core needs from a durable store that
holds every job of the partition, so that memory holds only what is due soon.

With a far tier, ``PartitionScheduler.jobs`` holds only the jobs whose next slot is
within the horizon. Every job has a durable *entry* (due time, job id) in the far tier:
a lower bound of its next slot not emitted yet. Entries come within the horizon in
order (``entries``), each job is loaded then (``load``) and settled from the
fired-through point, so a stale entry (one left behind by a crash, or by a change of
the definition) costs a load and nothing else. The adapter (``streams.scheduler.state``) writes
an entry at once and deletes the one it replaces (``hold``'s ``previous``) only once the
checkpoint covers that slot: a crash never leaves a job without an entry at or before
its next slot.
"""

from __future__ import annotations

from typing import Protocol

from cronstream.streams.core.schedule import JobSchedule


class FarTier(Protocol):
    def hold(self, job_id: str, due_ms: int | None, previous: int | None) -> None:
        """``job_id``'s next slot is due at ``due_ms`` (None: it has no more);
        ``previous``: the entry this replaces (None: unknown), deleted once the
        checkpoint covers it."""

    def forget(self, job_id: str, due_ms: int) -> None:
        """An entry with no job behind it (deleted): drop it."""

    def entries(
        self, after: tuple[int, str] | None, before_ms: int, urgent_ms: int, budget: int
    ) -> list[tuple[int, str]]:
        """Entries after ``after`` (in (due, job id) order) due before ``before_ms``: all
        of those due by ``urgent_ms``, and later ones while fewer than ``budget`` are
        taken."""

    def load(self, job_id: str) -> JobSchedule | None:
        """The job's current definition as the core sees it (None: deleted or unusable)."""
