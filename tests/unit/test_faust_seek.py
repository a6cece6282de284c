"""The flows coordinator's seek back to committed offsets (streams.flows.faust_seek): a stream
partition with nothing committed is sought to its beginning, so that the records faust
threw away on resuming are read again (a flow run stalled after a kill -9 of the
coordinator); and the offset it commits never passes an event it has not handled."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from faust.transport.drivers import aiokafka as driver
from faust.types import TP
from intervaltree import IntervalTree

from cronstream.streams.flows.faust_seek import (
    SeekingApp,
    _Consumer,
    _SeekingThread,
    never_committed,
)

EVENTS, CHANGELOG = "acme.flows.events", "acme.flows-coordinator-runs-changelog"


class FakeAiokafka:
    """aiokafka's consumer as faust's thread sees it: ``seek_to_committed`` seeks only
    partitions whose committed offset is above 0 (aiokafka 0.14's rule)."""

    def __init__(self, committed: dict[TP, int | None], position: dict[TP, int]) -> None:
        self.committed, self.position = committed, position
        self.beginning = 0

    async def seek_to_committed(self) -> dict[TP, int | None]:
        for tp, offset in self.committed.items():
            if offset and offset > 0:
                self.position[tp] = offset
        return dict(self.committed)

    async def seek_to_beginning(self, *tps: TP) -> None:
        for tp in tps:
            self.position[tp] = self.beginning


def _thread(fake: FakeAiokafka) -> Any:
    thread: Any = _SeekingThread.__new__(_SeekingThread)
    thread._consumer = fake
    thread.app = SimpleNamespace(topics=SimpleNamespace(acks_enabled_for=lambda t: t == EVENTS))
    return thread


def test_a_stream_partition_with_nothing_committed_is_read_again_from_its_beginning() -> None:
    fresh, zero, done, log = TP(EVENTS, 7), TP(EVENTS, 3), TP(EVENTS, 1), TP(CHANGELOG, 7)
    # The fetcher already went past offsets 0..3 of partition 7 (faust then cleared them).
    fake = FakeAiokafka(
        {fresh: None, zero: 0, done: 5, log: None}, {fresh: 4, zero: 2, done: 9, log: 12}
    )
    committed = asyncio.run(_thread(fake)._seek_to_committed())
    assert committed == {fresh: None, zero: 0, done: 5, log: None}  # faust's read offsets
    assert fake.position == {fresh: 0, zero: 0, done: 5, log: 12}  # a changelog is left alone


def test_only_never_committed_partitions_of_streamed_topics_are_rewound() -> None:
    offsets = {TP(EVENTS, 0): None, TP(EVENTS, 1): 0, TP(EVENTS, 2): 1, TP(CHANGELOG, 0): None}
    assert never_committed(offsets, {EVENTS}) == [TP(EVENTS, 0), TP(EVENTS, 1)]
    assert never_committed(offsets, set()) == []


def test_the_app_builds_its_consumer_with_the_seeking_thread(monkeypatch: Any) -> None:
    made: list[object] = []
    monkeypatch.setattr(
        _SeekingThread, "__init__", lambda self, consumer, **_: made.append(consumer)
    )
    app = SeekingApp(
        "seek-test", broker="kafka://127.0.0.1:1", web_enabled=False, store="memory://"
    )
    assert type(app.transport).Consumer is _Consumer
    consumer = SimpleNamespace(loop=None, beacon=None)
    assert isinstance(_Consumer._new_consumer_thread(consumer), _SeekingThread)  # type: ignore[arg-type]
    assert made == [consumer]


def _acking(committed: int | None, acked: list[int], gap: tuple[int, int] | None = None) -> Any:
    """faust's consumer state for one partition as ``_new_offset`` reads it."""
    gaps = IntervalTree()
    if gap is not None:
        gaps.addi(*gap)
    tp = TP(EVENTS, 0)
    consumer = SimpleNamespace(
        _acked={tp: sorted(acked)},
        _acked_index={tp: set(acked)},
        _gap={tp: gaps},
        _committed_offset={tp: committed},
    )
    return consumer, tp


def test_the_offset_committed_never_passes_an_event_not_handled() -> None:
    """faust takes its committed offset (the next one to read) for the last one handled:
    with 10 committed and only 11 handled it committed 12, and the event at 10, thrown
    away at a resume, was never read again (a flow run left RUNNING)."""
    consumer, tp = _acking(10, [11])
    assert driver.Consumer._new_offset(consumer, tp) == 12  # faust's own choice
    consumer, tp = _acking(10, [11])
    assert _Consumer._new_offset(consumer, tp) is None  # 10 not handled: nothing to commit
    consumer, tp = _acking(10, [10, 11, 13])
    assert _Consumer._new_offset(consumer, tp) == 12  # up to the first hole
    consumer, tp = _acking(10, [12], gap=(10, 12))  # 10 and 11 hold no record
    assert _Consumer._new_offset(consumer, tp) == 13
    consumer, tp = _acking(None, [4, 5])  # nothing committed yet: faust's choice
    assert _Consumer._new_offset(consumer, tp) == 6


def test_the_seek_happens_with_the_flow_stopped_and_the_queues_emptied_first(
    monkeypatch: Any,
) -> None:
    """After a recovery faust resumes the stream partitions with its flow on, seeks, and
    only then empties the streams' queues: records fetched on either side of the seek
    were thrown away and the one at the committed offset never read again.
    Ours stops the flow, waits for the fetcher, empties the queues, then seeks; the
    flow stays off for the recovery to turn on after the seek."""
    steps: list[str] = []

    async def faust_seek(self: Any) -> None:
        steps.append("seek")

    async def stopped() -> None:
        steps.append("fetcher idle")

    monkeypatch.setattr(driver.Consumer, "perform_seek", faust_seek)
    consumer = SimpleNamespace(
        stop_flow=lambda: steps.append("flow stopped"),
        wait_for_stopped_flow=stopped,
        app=SimpleNamespace(flow_control=SimpleNamespace(clear=lambda: steps.append("cleared"))),
    )
    asyncio.run(_Consumer.perform_seek(consumer))  # type: ignore[arg-type]
    assert steps == ["flow stopped", "fetcher idle", "cleared", "seek"]
