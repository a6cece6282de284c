"""What a partition's owner had done, stored as the committed offset's metadata (the
procedure that writes it is ``Processor.checkpoint``)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

log = logging.getLogger("cronstream.scheduler")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """``fired_through``: every due time <= it was emitted. ``jobs_offset``: definitions
    below it had been applied. ``timers_from``: the lowest timers offset still pending
    (re-read from there). ``timers_offset``: timers below it had been read.
    """

    fired_through: int
    jobs_offset: int
    timers_from: int
    timers_offset: int

    def to_metadata(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "w": self.fired_through,
                "j": self.jobs_offset,
                "tf": self.timers_from,
                "t": self.timers_offset,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_metadata(cls, text: str | None) -> Checkpoint | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(int(d["w"]), int(d["j"]), int(d["tf"]), int(d["t"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable scheduler checkpoint %r", text)
            return None
