"""What a partition's owner had done, stored as the committed offset's metadata (the
procedure that writes it is ``streams.scheduler.checkpointer.Checkpointer.checkpoint``)."""

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
    ``tzdata``: the zone database version its slots were computed with (None from a
    scheduler older than this field).
    """

    fired_through: int
    jobs_offset: int
    timers_from: int
    timers_offset: int
    tzdata: str | None = None

    def to_metadata(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "w": self.fired_through,
                "j": self.jobs_offset,
                "tf": self.timers_from,
                "t": self.timers_offset,
                "z": self.tzdata,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_metadata(cls, text: str | None) -> Checkpoint | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            zone_db = d.get("z")
            return cls(
                int(d["w"]),
                int(d["j"]),
                int(d["tf"]),
                int(d["t"]),
                zone_db if isinstance(zone_db, str) else None,
            )
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable scheduler checkpoint %r", text)
            return None
