"""consume_ready: wait for the first record only (Consumer.consume waits out its whole
timeout unless the batch fills, which put half a second into every API answer)."""

from __future__ import annotations

from typing import Any

from cronstream.runtime.kafka.clients import consume_ready


class Queue:
    def __init__(self, *records: str) -> None:
        self.records = list(records)
        self.calls: list[tuple[str, int, float]] = []

    def poll(self, timeout: float) -> str | None:
        self.calls.append(("poll", 1, timeout))
        return self.records.pop(0) if self.records else None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        self.calls.append(("consume", num_messages, timeout))
        taken, self.records = self.records[:num_messages], self.records[num_messages:]
        return taken


def test_it_waits_for_the_first_record_and_takes_what_else_is_there_at_once() -> None:
    queue = Queue("a", "b", "c", "d")
    assert consume_ready(queue, 3, 0.5) == ["a", "b", "c"]
    assert queue.calls == [("poll", 1, 0.5), ("consume", 2, 0)]
    assert consume_ready(queue, 1, 0.5) == ["d"]
    assert consume_ready(queue, 10, 0.2) == []
    assert queue.calls[-1] == ("poll", 1, 0.2)
