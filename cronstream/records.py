"""Checking consumed records at the edge, and dead-lettering the ones we cannot use."""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, Message

from cronstream import metrics
from schemas.events import DeadLetter, from_ms


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
    key: bytes | None,
    value: bytes | None,
) -> DeadLetter:
    """The DLQ record for a source record that cannot be used (counted in metrics)."""
    metrics.dead_letters.labels(stage).inc()
    return DeadLetter(
        reason=reason,
        stage=stage,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        dead_at=from_ms(int(time.time() * 1000)),
        source_key=key,
        source_value=value,
        job_id=key.decode("utf-8", "replace") if key is not None else None,
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
