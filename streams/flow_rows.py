"""The flows coordinator's table: rows of JSON whose changelog writes can be waited for."""

from __future__ import annotations

import json
from typing import Any

import faust


class Rows(faust.Table[str, str]):
    """The coordinator's table, whose writes can be waited for (``written``: every row
    set since acknowledged by the broker, before the sends and the events' acks).

    Faust's commit waits for its producer buffer at most 0.1 s: at start, while the
    producer still fetched the changelog's metadata, an event's offset could be
    committed before its row was written, and a kill -9 lost the row (found by the
    kill -9 integration test)."""

    _sent: list[Any] | None = None

    def send_changelog(self, *args: Any, **kwargs: Any) -> Any:
        future = super().send_changelog(*args, **kwargs)
        if self._sent is None:
            self._sent = []
        self._sent.append(future)
        return future

    async def written(self) -> None:
        sent, self._sent = self._sent or [], None
        for future in sent:
            await future  # raises the producer's error: nothing is sent, nothing committed


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
