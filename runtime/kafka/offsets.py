"""Where a partition's log begins and ends, and where a consumer or group stands on it."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

_TRANSIENT = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
)


def watermarks(consumer: Consumer, tp: TopicPartition, *, timeout: float = 30.0) -> tuple[int, int]:
    """(low, high) offsets of a partition, retrying the broker's transient refusals.

    Just after a broker restart a partition can have a leader in metadata that still
    answers NOT_LEADER while it loads its log; those errors are retriable.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            marks = consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            error = exc.args[0]
            # librdkafka does not flag every transient refusal retriable here.
            transient = error.retriable() or error.code() in _TRANSIENT
            if not transient or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            continue
        if marks is None:
            raise RuntimeError(f"no watermarks for {tp.topic}/{tp.partition}: is Kafka up?")
        low, high = marks
        return int(low), int(high)


def group_lag(consumer: Consumer, ends: list[TopicPartition]) -> int:
    """Records before ``ends`` (end offsets) that ``consumer``'s group has not committed."""
    committed = consumer.committed([TopicPartition(tp.topic, tp.partition) for tp in ends], 10)
    return sum(
        max(0, end.offset - max(0, c.offset)) for end, c in zip(ends, committed, strict=True)
    )


def partition_names(partitions: list[TopicPartition]) -> str:
    """``topic/partition, ...`` for logs."""
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in partitions) or "nothing"


def consumer_lag(
    consumer: Consumer, partitions: list[TopicPartition]
) -> list[tuple[TopicPartition, int]]:
    """Records not yet read, per partition with a position (from the cached end offsets;
    none while the group is rebalancing)."""
    try:
        positions = consumer.position(partitions)
    except KafkaException:
        return []
    out = []
    for tp in positions:
        if tp.offset >= 0:
            _, high = consumer.get_watermark_offsets(tp, cached=True) or (0, 0)
            out.append((tp, max(0, high - tp.offset)))
    return out


def offset_since(consumer: Consumer, topic: str, partition: int, since_ms: int) -> int:
    """The first offset of ``topic``/``partition`` written at or after ``since_ms`` (the
    end of the partition if none was)."""
    wanted = TopicPartition(topic, partition, since_ms)
    located = consumer.offsets_for_times([wanted], timeout=30)[0].offset
    if located >= 0:
        return int(located)
    return watermarks(consumer, TopicPartition(topic, partition))[1]
