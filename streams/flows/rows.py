"""The flows coordinator's table as its decisions see it: rows of JSON values, and one
event's view of them (``EventRows``). The faust table under them is ``streams.flows.app.Rows``."""

from __future__ import annotations

import json
from typing import Any


class JsonRows:
    """The table seen as rows of JSON values (faust's json codec cannot restore a dict
    value_type: rows are kept as JSON text)."""

    def __init__(self, table: Any) -> None:
        self.table = table
        self._read: dict[str, dict[str, Any] | None] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        if key not in self._read:
            text = self.table.get(key)
            self._read[key] = json.loads(text) if text else None
        return self._read[key]

    def __setitem__(self, key: str, row: dict[str, Any]) -> None:
        self._read[key] = row
        self.table[key] = json.dumps(row, separators=(",", ":"))


class EventRows(JsonRows):
    """One event's view of a batch's rows: what it sets is kept apart, and applied to
    the batch's rows only once the event is handled (``apply``), so an event the
    coordinator raises on leaves no row half changed (``runtime.faults``)."""

    def __init__(self, rows: JsonRows) -> None:  # no super().__init__: rows reads the table
        self.rows = rows
        self.changed: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        if key in self.changed:
            return self.changed[key]
        return self.rows.get(key)

    def __setitem__(self, key: str, row: dict[str, Any]) -> None:
        self.changed[key] = row

    def apply(self) -> None:
        for key, row in self.changed.items():
            self.rows[key] = row
