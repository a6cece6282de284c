"""When a job's runs are due: its slots, bounds and jitter.

A *slot* is the nominal instant of one run (what the run id names). A job's *due* time
for a slot is the slot plus its jitter offset: a constant per job, derived from the job
id, so bursts on one boundary spread over ``jitter_ms`` and every scheduler computes the
same due time for the same job.

- cron: the wall-clock fire times of the expression in the job's time zone
  (``schemas.definition.cron`` has the DST policy), shared by every job with that expression
  and zone;
- interval: slot k is ``anchor + k * every`` for every integer k, so a slot never
  depends on when a scheduler started;
- once: the single instant ``at``;
- manual: no slots (the job runs only when triggered).

``start_ms``/``end_ms`` bound the slots (inclusive). Everything here is plain values.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cronstream.schemas.definition.cron import CronTimes, cron_times
from cronstream.streams.core.span import cron_count, cron_latest


class Kind(StrEnum):
    CRON = "cron"
    INTERVAL = "interval"
    ONCE = "once"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Misfire:
    """What to do with slots that are late by more than the misfire threshold.

    ``skip``: none of them run. ``once``: the latest one inside the catch-up window runs
    (unless a slot of the same outage ran anyway). ``all``: every one inside the window
    runs, the latest ``max_catchup`` at most. The rest are recorded as SKIPPED or MISSED.
    """

    policy: str = "ONCE"
    max_catchup: int = 10
    window_ms: int = 3_600_000


def jitter_offset(job_id: str, jitter_ms: int) -> int:
    """A job's fixed offset in [0, jitter_ms]: the same for every scheduler, every run."""
    if jitter_ms <= 0:
        return 0
    return zlib.crc32(job_id.encode()) % (jitter_ms + 1)


class JobSchedule:
    """One job as the scheduling core sees it. ``body`` is the adapter's (opaque) data."""

    __slots__ = (
        "anchor_ms",
        "at_ms",
        "body",
        "decided",
        "end_ms",
        "entry_due",
        "every_ms",
        "gen",
        "jitter",
        "job_id",
        "kind",
        "misfire",
        "paused",
        "start_ms",
        "tenant",
        "times",
    )

    def __init__(
        self,
        job_id: str,
        *,
        cron: str | None = None,
        timezone: str = "UTC",
        every_ms: int = 0,
        anchor_ms: int = 0,
        at_ms: int | None = None,
        start_ms: int | None = None,
        end_ms: int | None = None,
        jitter_ms: int = 0,
        paused: bool = False,
        misfire: Misfire = Misfire(),
        body: Any = None,
        tenant: str = "default",
    ) -> None:
        """Raises CronError / ZoneError for an expression or zone that cannot be used."""
        self.job_id = job_id
        self.times: CronTimes | None = None
        self.every_ms = every_ms
        self.anchor_ms = anchor_ms
        self.at_ms = at_ms
        if cron is not None:
            self.kind = Kind.CRON
            self.times = cron_times(cron, timezone)
        elif every_ms > 0:
            self.kind = Kind.INTERVAL
        elif at_ms is not None:
            self.kind = Kind.ONCE
        else:
            self.kind = Kind.MANUAL
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.jitter = jitter_offset(job_id, jitter_ms)
        self.paused = paused
        self.misfire = misfire
        self.body = body
        self.tenant = tenant
        self.gen = 0
        # With a far tier: the due time of its durable entry, when known (``core.far``).
        self.entry_due: int | None = None
        # Every slot of this definition due at or before it has been decided (fired,
        # deferred by its tenant's rate, or recorded): a changed definition settles from
        # here when the partition's checkpoint is held further back (``core.partition``).
        self.decided = -(2**62)

    def slot_after(self, after_ms: int) -> int | None:
        """The first slot strictly after ``after_ms`` inside the bounds, None if none."""
        if self.start_ms is not None and after_ms < self.start_ms:
            after_ms = self.start_ms - 1
        match self.kind:
            case Kind.CRON:
                assert self.times is not None
                slot = self.times.next_after(after_ms)
            case Kind.INTERVAL:
                k = (after_ms - self.anchor_ms) // self.every_ms + 1
                slot = self.anchor_ms + k * self.every_ms
            case Kind.ONCE:
                assert self.at_ms is not None
                slot = self.at_ms if self.at_ms > after_ms else None
            case _:
                slot = None
        if slot is None or (self.end_ms is not None and slot > self.end_ms):
            return None
        return slot

    def slot_due_after(self, after_due_ms: int) -> int | None:
        """The first slot whose due time (slot + jitter) is strictly after ``after_due_ms``."""
        return self.slot_after(after_due_ms - self.jitter)

    def _bounded(self, after_ms: int, through_ms: int) -> tuple[int, int]:
        """``(after_ms, through_ms]`` cut to the job's bounds ``[start_ms, end_ms]``."""
        if self.start_ms is not None:
            after_ms = max(after_ms, self.start_ms - 1)
        if self.end_ms is not None:
            through_ms = min(through_ms, self.end_ms)
        return after_ms, through_ms

    def count_slots(self, after_ms: int, through_ms: int) -> int:
        """How many slots are in ``(after_ms, through_ms]``, without walking them: an
        outage of any length costs the same to settle (``streams.core.span``)."""
        after_ms, through_ms = self._bounded(after_ms, through_ms)
        if through_ms <= after_ms:
            return 0
        match self.kind:
            case Kind.CRON:
                assert self.times is not None
                return cron_count(self.times, after_ms, through_ms)
            case Kind.INTERVAL:
                every, anchor = self.every_ms, self.anchor_ms
                return (through_ms - anchor) // every - (after_ms - anchor) // every
            case Kind.ONCE:
                assert self.at_ms is not None
                return int(after_ms < self.at_ms <= through_ms)
            case _:
                return 0

    def latest_slots(self, after_ms: int, through_ms: int, n: int) -> list[int]:
        """The latest ``n`` (or fewer) slots in ``(after_ms, through_ms]``, oldest first."""
        after_ms, through_ms = self._bounded(after_ms, through_ms)
        if through_ms <= after_ms or n <= 0:
            return []
        match self.kind:
            case Kind.CRON:
                assert self.times is not None
                return cron_latest(self.times, after_ms, through_ms, n)
            case Kind.INTERVAL:
                every, anchor = self.every_ms, self.anchor_ms
                last = (through_ms - anchor) // every
                first = max((after_ms - anchor) // every + 1, last - n + 1)
                return [anchor + k * every for k in range(first, last + 1)]
            case Kind.ONCE:
                assert self.at_ms is not None
                return [self.at_ms] if after_ms < self.at_ms <= through_ms else []
            case _:
                return []

    def __repr__(self) -> str:
        return f"JobSchedule({self.job_id!r}, {self.kind.value}, gen={self.gen})"
