"""Checking consumed records at the edge, dead-lettering the ones we cannot use, and
where a consumer stands on its partitions."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from cronstream import metrics
from schemas.events import DeadLetter, utc_now


def is_record(msg: Message) -> bool:
    """True for a record; False for an end-of-partition event. Any other error raises
    (librdkafka reports broker trouble this way; it is not bad input)."""
    error = msg.error()
    if error is None:
        return True
    if error.code() == KafkaError._PARTITION_EOF:
        return False
    raise KafkaException(error)


def dead_letter(
    *,
    stage: str,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None = None,
    value: bytes | None = None,
    job_id: str | None = None,
    run_id: str | None = None,
    attempt: int | None = None,
) -> DeadLetter:
    """The DLQ record for a source record, or a run, that cannot be used (counted in
    metrics). ``job_id`` defaults to the source key."""
    metrics.dead_letters.labels(stage).inc()
    return DeadLetter(
        reason=reason,
        stage=stage,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        dead_at=utc_now(),
        source_key=key,
        source_value=value,
        job_id=job_id if job_id is not None or key is None else key.decode("utf-8", "replace"),
        run_id=run_id,
        attempt=attempt,
    )


def dead_letter_for(msg: Message, *, stage: str, reason: str) -> DeadLetter:
    key = msg.key()
    return dead_letter(
        stage=stage,
        reason=reason,
        topic=msg.topic() or "",
        partition=msg.partition() or 0,
        offset=msg.offset() or 0,
        key=key if isinstance(key, bytes) else None,
        value=msg.value(),
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
