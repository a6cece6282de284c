"""The scheduler's checkpoint off the fire path: the loop's checkpoint never
waits for the broker. It commits once everything emitted up to its snapshot is
acknowledged, learns the commit's answer from the consumer's callback, and moves a
partition's base only on a commit that succeeded; a commit sent before a stall or a
handover confirms nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.settings import Settings
from cronstream.schemas.serde import Codec
from cronstream.streams.scheduler import checkpointer as module
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.checkpointer import Checkpointer
from cronstream.streams.scheduler.owned import Owned
from tests.fakes import FakeProducer, FakeRegistry

SETTINGS = Settings.from_env({})
JOBS = "cs.jobs"


@dataclass
class Part:
    """An owned partition as the checkpointer sees it (``streams.scheduler.owned.Owned``)."""

    partition: int
    fired_through: int = 0
    base: Checkpoint | None = None
    state: Any = None

    def snapshot(self) -> Checkpoint:
        return Checkpoint(self.fired_through, 10, 0, 0)


@dataclass
class Member:
    commits: list[tuple[list[TopicPartition], bool]] = field(default_factory=list)
    refuse: bool = False

    def commit(self, offsets: Sequence[TopicPartition], *, wait: bool, then: str = "") -> bool:
        self.commits.append((list(offsets), wait))
        return not self.refuse


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(module, "time", fake)
    return fake


def _parts(
    clock: Clock, *parts: Part
) -> tuple[Checkpointer, Publisher, FakeProducer, Member, list[Part]]:
    producer = FakeProducer()
    codec = Codec(FakeRegistry())
    publisher = Publisher(SETTINGS, codec=codec, producer=producer, track_acks=True)
    member = Member()
    cp = Checkpointer(
        member=member,
        publisher=publisher,
        jobs_topic=JOBS,
        checkpoint_ms=500,
        session_timeout_ms=45_000,
    )
    return cp, publisher, producer, member, list(parts)


def _of(parts: list[Part]) -> Callable[[], list[Owned]]:
    """``live()`` of the processor: the parts owned now (``Part`` stands for ``Owned``)."""
    return lambda: cast("list[Owned]", parts)


def _emit(publisher: Publisher, n: int) -> None:
    for i in range(n):
        publisher.produce_raw("cs.runs.normal", f"k{i}", b"v", [])


def test_the_loops_checkpoint_waits_for_nothing_and_commits_what_is_acknowledged(
    clock: Clock,
) -> None:
    cp, publisher, producer, member, live = _parts(clock, Part(0, fired_through=5), Part(1, 7))
    _emit(publisher, 3)
    assert cp.step(_of(live))  # began: snapshot taken, nothing acknowledged yet
    assert member.commits == []
    assert producer.flushes == 0  # it did not flush: no wait
    live[0].fired_through = 9  # firing goes on meanwhile
    _emit(publisher, 2)
    clock.now += 0.1
    assert not cp.step(_of(live))
    assert member.commits == []
    producer.flush()  # the broker acknowledges everything
    cp.step(_of(live))
    ((offsets, wait),) = member.commits
    assert not wait  # sent, not awaited
    assert [Checkpoint.from_metadata(tp.metadata) for tp in offsets] == [
        Checkpoint(5, 10, 0, 0),
        Checkpoint(7, 10, 0, 0),
    ]  # the snapshot, not what fired after it
    assert all(p.base is None for p in live)  # not yet answered
    cp.committed(None, offsets)
    cp.step(_of(live))
    assert [p.base for p in live] == [Checkpoint(5, 10, 0, 0), Checkpoint(7, 10, 0, 0)]
    assert not cp.firing_paused


def test_records_after_the_snapshot_do_not_hold_its_commit(clock: Clock) -> None:
    cp, publisher, producer, member, live = _parts(clock, Part(0, 1))
    _emit(publisher, 2)
    cp.step(_of(live))
    _emit(publisher, 1)  # after the snapshot: unacknowledged for now
    producer.answer(0, 1)
    cp.step(_of(live))
    assert len(member.commits) == 1


def test_an_unacknowledged_second_pauses_firing_until_the_broker_answers(clock: Clock) -> None:
    cp, publisher, producer, member, live = _parts(clock, Part(0, 1))
    _emit(publisher, 1)
    cp.step(_of(live))
    clock.now += module.ACK_WAIT_S + 0.1
    cp.step(_of(live))
    assert cp.firing_paused
    assert member.commits == []
    producer.flush()
    cp.step(_of(live))
    assert not cp.firing_paused
    assert len(member.commits) == 1


def test_a_refused_record_raises_and_the_rewind_abandons_the_checkpoint(clock: Clock) -> None:
    cp, publisher, producer, member, live = _parts(clock, Part(0, 1))
    _emit(publisher, 1)
    cp.step(_of(live))
    producer.fail_next = True
    producer.flush()
    with pytest.raises(PublishError):
        cp.step(_of(live))
    cp.abandon()
    clock.now += 1
    assert cp.step(_of(live))  # a new one, taken afresh
    assert len(member.commits) == 1


def test_a_refused_commit_leaves_the_base_and_counts_a_failure(clock: Clock) -> None:
    cp, _publisher, _producer, member, live = _parts(clock, Part(0, 3))
    before = metrics.checkpoint_failures._value.get()
    cp.step(_of(live))  # nothing emitted: acknowledged at once, sent
    ((offsets, _),) = member.commits
    cp.committed(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), offsets)
    cp.step(_of(live))
    assert live[0].base is None
    assert metrics.checkpoint_failures._value.get() == before + 1
    clock.now += 1
    assert cp.step(_of(live))  # the next one begins when due


def test_a_fenced_member_raises(clock: Clock) -> None:
    cp, _publisher, _producer, member, live = _parts(clock, Part(0, 3))
    cp.step(_of(live))
    ((offsets, _),) = member.commits
    fenced = KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True)
    cp.committed(fenced, offsets)
    with pytest.raises(KafkaException):
        cp.step(_of(live))


def test_a_partition_handed_over_meanwhile_is_left_out_of_the_commit(clock: Clock) -> None:
    cp, publisher, producer, member, live = _parts(clock, Part(0, 3), Part(1, 4))
    _emit(publisher, 1)
    cp.step(_of(live))
    del live[1]  # revoked or lost while the records were unacknowledged
    producer.flush()
    cp.step(_of(live))
    ((offsets, _),) = member.commits
    assert [tp.partition for tp in offsets] == [0]


def test_an_answer_to_a_commit_sent_before_a_stall_confirms_nothing(clock: Clock) -> None:
    cp, _publisher, _producer, member, live = _parts(clock, Part(0, 3))
    cp.step(_of(live))
    ((old, _),) = member.commits
    clock.now += 30  # the loop stood still longer than half the session timeout
    cp.check_stall(owning=True)
    assert cp.firing_paused
    cp.committed(None, old)  # the answer to the commit sent before
    cp.step(_of(live))  # a new checkpoint begins (due at once) and is sent
    assert cp.firing_paused
    assert live[0].base is None
    new, _ = member.commits[-1]
    cp.committed(None, new)
    cp.step(_of(live))
    assert not cp.firing_paused
    assert live[0].base == Checkpoint(3, 10, 0, 0)


def test_a_handover_checkpoint_supersedes_the_one_under_way(clock: Clock) -> None:
    cp, _publisher, _producer, member, live = _parts(clock, Part(0, 3))
    cp.step(_of(live))
    ((old, _),) = member.commits
    live[0].fired_through = 8
    cp.checkpoint(_of(live)(), wait=1.0)  # revoke: flushes, commits and waits
    assert member.commits[-1][1] is True
    assert live[0].base == Checkpoint(8, 10, 0, 0)
    cp.committed(None, old)  # the older commit's answer arrives after it
    cp.step(_of(live))
    assert live[0].base == Checkpoint(8, 10, 0, 0)  # not moved back


def test_a_commit_never_answered_is_given_up(clock: Clock) -> None:
    cp, _publisher, _producer, member, live = _parts(clock, Part(0, 3))
    cp.step(_of(live))
    clock.now += module.COMMIT_ANSWER_S + 1
    cp.step(_of(live))  # given up
    assert cp.step(_of(live))  # and the next one begins
    assert len(member.commits) == 2


def test_marks_count_what_kafka_answered_in_order() -> None:
    producer = FakeProducer()
    codec = Codec(FakeRegistry())
    publisher = Publisher(SETTINGS, codec=codec, producer=producer, track_acks=True)
    _emit(publisher, 2)
    first = publisher.mark()
    _emit(publisher, 2)
    second = publisher.mark()
    producer.answer(2, 3)  # the second mark's records answered first
    assert not publisher.acknowledged(first)
    assert not publisher.acknowledged(second)
    producer.answer(0, 1)
    assert publisher.acknowledged(first)
    assert publisher.acknowledged(second)
    failures_only = {"delivery.report.only.error": True}
    with pytest.raises(ValueError, match="report per record"):
        Publisher(SETTINGS, codec=codec, producer=producer, track_acks=True, **failures_only)


def test_records_written_off_by_a_rewind_raise_no_second_rewind() -> None:
    """One outage fails its records over seconds: the first failure rewinds (every
    partition re-emits from its checkpoint), the later failures of records produced
    before that rewind raise nothing; a record produced after it still does."""
    producer = FakeProducer()
    codec = Codec(FakeRegistry())
    publisher = Publisher(SETTINGS, codec=codec, producer=producer, track_acks=True)
    _emit(publisher, 3)
    producer.fail_next = True
    producer.answer(0)
    with pytest.raises(PublishError):
        publisher.acknowledged(publisher.mark())
    publisher.written_off()  # the rewind
    _emit(publisher, 1)
    producer.fail_next = True
    producer.answer(0)  # a record from before the rewind fails too: written off
    producer.answer(0)
    assert not publisher.acknowledged(publisher.mark())  # one still waits, nothing raised
    producer.fail_next = True
    producer.answer(0)  # the record produced after the rewind
    with pytest.raises(PublishError):
        publisher.acknowledged(publisher.mark())
