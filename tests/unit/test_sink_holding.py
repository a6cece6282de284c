"""The sink waiting out Cassandra (or the registry) pauses every partition it reads, and
one assigned to it meanwhile (another sink left) at its first record: what it holds in
memory is a record a partition, not a backlog."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import TopicPartition

from cronstream.consumers.sink import Sink
from cronstream.runtime.kafka.records import ConsumedMessage
from tests.fakes import FakeMessage


class Consumer:
    """Assignment and pauses, as the sink's consumer has them."""

    def __init__(self, assigned: list[tuple[str, int]]) -> None:
        self.assigned = set(assigned)
        self.paused: set[tuple[str, int]] = set()
        self.resumed: set[tuple[str, int]] = set()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self.assigned)]

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        found = {(tp.topic, tp.partition) for tp in partitions}
        self.paused -= found
        self.resumed |= found


class Member:
    """Polling while waiting: a partition is assigned at the first wait, and every
    partition not paused delivers a record at each poll (a backlog behind it)."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.offsets: dict[tuple[str, int], int] = {}

    def wait(
        self, seconds: float, stop: Callable[[], bool], keep: Callable[[ConsumedMessage], object]
    ) -> bool:
        self.consumer.assigned.add(("h", 7))  # another sink left: its partition comes here
        for _ in range(int(seconds * 10)):
            for key in sorted(self.consumer.assigned - self.consumer.paused):
                offset = self.offsets[key] = self.offsets.get(key, -1) + 1
                keep(FakeMessage(key[0], key[1], offset, b"outcome"))
        return not stop()


def test_a_partition_assigned_while_the_sink_waits_is_paused_at_its_first_record() -> None:
    sink = object.__new__(Sink)
    consumer = Consumer([("h", 0), ("h", 1)])
    sink.consumer = consumer  # type: ignore[assignment]
    sink.member = Member(consumer)  # type: ignore[assignment]
    sink.carry = []
    sink.should_stop = lambda: False
    with sink._holding() as pause:
        for _ in range(3):  # three retries of a Cassandra that does not answer
            assert pause(1.0)
        assert consumer.paused == {("h", 0), ("h", 1), ("h", 7)}
    assert [(m.topic(), m.partition(), m.offset()) for m in sink.carry] == [("h", 7, 0)]
    assert consumer.paused == set()
    assert consumer.resumed == {("h", 0), ("h", 1), ("h", 7)}
