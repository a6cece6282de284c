"""Transient broker refusals are retried, not raised out of a rebalance callback
(``runtime.kafka.offsets``)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from cronstream.runtime import stop
from cronstream.runtime.kafka.offsets import (
    committed,
    is_transient,
    retrying,
    serving,
    watermarks,
)
from cronstream.runtime.kafka.records import is_record
from tests.fakes import FakeMessage


def refusal(code: int) -> KafkaException:
    return KafkaException(KafkaError(code, "refused"))


class FlakyConsumer:
    """Refuses the first ``failures`` calls with ``code``, then answers."""

    def __init__(self, code: int, failures: int) -> None:
        self.code, self.failures, self.calls = code, failures, 0

    def _maybe_refuse(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise refusal(self.code)

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float = 0) -> tuple[int, int]:
        self._maybe_refuse()
        return (3, 42)

    def list_topics(self, topic: str, timeout: float = 0) -> None:
        """A metadata refresh: the refusals go on as they would."""

    def committed(
        self, partitions: list[TopicPartition], timeout: float = 0
    ) -> list[TopicPartition]:
        self._maybe_refuse()
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]


def test_a_fenced_leader_epoch_after_a_broker_restart_is_retried() -> None:
    """Found by review: the broker killed and restarted, a worker died of
    FENCED_LEADER_EPOCH ("Failed to get offsets: Leader epoch is older than broker
    epoch") raised out of its assignment callback."""
    consumer = FlakyConsumer(KafkaError.FENCED_LEADER_EPOCH, failures=2)
    assert watermarks(consumer, TopicPartition("t", 0)) == (3, 42)
    assert consumer.calls == 3
    consumer = FlakyConsumer(KafkaError.NOT_COORDINATOR, failures=1)
    (tp,) = committed(consumer, [TopicPartition("t", 1)])
    assert (tp.partition, tp.offset, consumer.calls) == (1, 7, 2)


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError._TRANSPORT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._ALL_BROKERS_DOWN,
    ],
)
def test_refusals_that_pass_when_the_broker_is_back_are_transient(code: int) -> None:
    assert is_transient(refusal(code))


def test_other_errors_are_raised_at_once() -> None:
    consumer = FlakyConsumer(KafkaError.TOPIC_AUTHORIZATION_FAILED, failures=5)
    with pytest.raises(KafkaException):
        watermarks(consumer, TopicPartition("t", 0))
    assert consumer.calls == 1


def test_a_refusal_that_outlasts_the_timeout_is_raised() -> None:
    calls = []

    def refuse() -> None:
        calls.append(1)
        raise refusal(KafkaError.LEADER_NOT_AVAILABLE)

    with pytest.raises(KafkaException):
        retrying(refuse, timeout=0.6)
    assert 2 <= len(calls) <= 3


def error_event(code: int) -> FakeMessage:
    """What consume() hands back for a partition-level error instead of a record."""
    return FakeMessage("t", 0, 0, None, None, error_=KafkaError(code, "from the broker"))


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError._TRANSPORT,
        KafkaError._PARTITION_EOF,
    ],
)
def test_a_transient_fetch_error_event_is_skipped_not_raised(code: int) -> None:
    """A fenced epoch reported as an error event while the broker restarts must not end
    the worker, scheduler or sink that reads it (librdkafka goes on fetching)."""
    assert is_record(error_event(code)) is False


def test_a_lasting_fetch_error_event_raises() -> None:
    with pytest.raises(KafkaException):
        is_record(error_event(KafkaError.TOPIC_AUTHORIZATION_FAILED))


class StaleMetadataConsumer(FlakyConsumer):
    """Knows the partition again only once its topic's metadata is asked for."""

    def __init__(self, code: int = KafkaError._UNKNOWN_PARTITION) -> None:
        super().__init__(code, failures=10**6)
        self.asked: list[str] = []

    def list_topics(self, topic: str, timeout: float = 0) -> None:
        self.asked.append(topic)
        self.failures = 0


@pytest.mark.parametrize(
    "code",
    [
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._DESTROY_BROKER,
    ],
)
def test_a_stale_leader_refreshes_its_topic_and_is_retried(code: int) -> None:
    """Found on the 3-node cluster: a broker killed, a worker's watermarks of history
    (a topic it does not subscribe to) answered "Unknown partition" for two minutes, a
    scheduler's "Not leader for partition" again and again."""
    consumer = StaleMetadataConsumer(code)
    assert watermarks(consumer, TopicPartition("cs.history", 3), timeout=5) == (3, 42)
    assert consumer.asked == ["cs.history"]


def test_a_process_asked_to_stop_does_not_retry_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A scheduler with a broker down once ignored SIGTERM for over 90 s, retrying
    the committed-offset fetch (30 s tries for 120 s) in its assignment callback. Asked
    to stop, the retry gives up at the first refusal with StopWaiting, which the
    foreground answers by exiting (the partition's next owner does the work again)."""
    monkeypatch.setattr(stop.REQUESTED, "is_set", lambda: False)
    consumer = FlakyConsumer(KafkaError._TIMED_OUT, failures=3)
    committed(consumer, [TopicPartition("t", 0)])
    assert consumer.calls == 4  # not asked to stop: retried until it answered
    monkeypatch.setattr(stop.REQUESTED, "is_set", lambda: True)
    consumer = FlakyConsumer(KafkaError._TIMED_OUT, failures=3)
    with pytest.raises(stop.StopWaiting, match="stopped while Kafka refused"):
        committed(consumer, [TopicPartition("t", 0)])
    assert consumer.calls == 1
    consumer = FlakyConsumer(KafkaError._TIMED_OUT, failures=0)  # answers: no stop needed
    assert committed(consumer, [TopicPartition("t", 0)])[0].offset == 7


def test_a_consumer_serving_its_own_callback_is_not_asked_for_metadata() -> None:
    """Found by the chaos suite (a broker lost under load): a worker's assignment hook
    asked its own consumer's metadata after a refused watermarks query, and the
    consumer's next callback in that poll aborted the process (confluent-kafka's call
    state ended by the nested call). Inside ``serving`` the query is retried without
    it (librdkafka's own refresh serves); outside, the topic is asked again."""
    tp = TopicPartition("cs.runs.normal", 3)
    inside = StaleMetadataConsumer(KafkaError._DESTROY_BROKER)
    inside.failures = 2  # answered on the third try
    with serving(inside):
        assert watermarks(inside, tp, timeout=5) == (3, 42)
    assert (inside.asked, inside.calls) == ([], 3)
    outside = StaleMetadataConsumer(KafkaError._DESTROY_BROKER)
    assert watermarks(outside, tp, timeout=5) == (3, 42)
    assert outside.asked == ["cs.runs.normal"]
