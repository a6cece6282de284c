"""One partition the scheduler processor owns: its core, where its reading stands, and
(while it loads) the definitions read and not yet settled. Each collaborator of the
processor (``streams.scheduler.processor``) reads and moves the fields of its own step."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from cronstream.schemas.definition.zones import TZDATA_VERSION
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.state import PartitionState


@dataclass(slots=True)
class Owned:
    partition: int
    core: PartitionScheduler
    checkpoint: Checkpoint | None
    load_end: int
    loading: bool = True
    read: bool = False  # loading, and every definition is read: settle it next (``step``)
    settling: list[str] = field(default_factory=list)  # job ids being settled, in order
    settled: int = 0  # how many of ``settling`` are done
    started: float = field(default_factory=time.monotonic)
    # job id -> (offset, timestamp, value, an earlier live version exists) while loading
    pending: dict[str, tuple[int, int, bytes | None, bool]] = field(default_factory=dict)
    jobs_next: int = 0
    timers_next: int = 0
    # The checkpoint last committed (or read at assignment): what a rewind goes back to.
    base: Checkpoint | None = None
    # The partition's store (``--state-dir``); ``rebuilding``: it is being built from
    # the whole jobs topic (definitions go into it as read, then are settled from it,
    # in job id order after ``rebuilt_through``).
    state: PartitionState | None = None
    rebuilding: bool = False
    rebuilt_through: str | None = None

    def snapshot(self) -> Checkpoint:
        """The checkpoint of what this partition has done so far."""
        lowest = self.core.lowest_pending_timer()
        return Checkpoint(
            fired_through=self.core.fired_through,
            jobs_offset=self.jobs_next,
            timers_from=self.timers_next if lowest is None else lowest,
            timers_offset=self.timers_next,
            tzdata=TZDATA_VERSION,
        )
