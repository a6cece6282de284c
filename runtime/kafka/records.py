"""Checking consumed records at the edge, and dead-lettering the ones we cannot use.

``ConsumedMessage`` is the part of confluent-kafka's ``Message`` that cronstream reads:
the roles type their record handling against it, so unit tests feed them plain fakes
(``tests.fakes``) instead of a broker."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException

from cronstream.runtime import metrics
from cronstream.runtime.kafka.offsets import is_transient
from cronstream.schemas.events import DeadLetter, utc_now

log = logging.getLogger("cronstream.kafka")

Headers = list[tuple[str, bytes]]  # what cronstream produces
# What a consumed record may carry (any client may have produced it).
AnyHeaders = list[tuple[str, str | bytes | None]] | dict[str, str | bytes | None]


class ConsumedMessage(Protocol):
    """What cronstream reads of a consumed record (confluent-kafka's ``Message`` is one).

    ``error()`` is None for a record; otherwise an end-of-partition event or a broker
    error (see ``is_record``). ``timestamp()`` is (type, milliseconds)."""

    def error(self) -> KafkaError | None: ...
    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> AnyHeaders | None: ...


def is_record(msg: ConsumedMessage) -> bool:
    """True for a record; False for an end-of-partition event or a transient error
    (librdkafka reports broker trouble this way: a restarting broker, a moved leader, a
    fenced epoch; it goes on fetching by itself). Any other error raises: it is not bad
    input, and not something that passes."""
    error = msg.error()
    if error is None:
        return True
    if error.code() == KafkaError._PARTITION_EOF:
        return False
    if is_transient(KafkaException(error)):
        log.warning(
            "fetch error on %s [%s]: %s (passes by itself)",
            msg.topic(),
            msg.partition(),
            error.str(),
        )
        return False
    raise KafkaException(error)


def text_key(raw: str | bytes | None) -> str | None:
    """A record's key as text (a job id); None when it has none or it is not UTF-8.

    Not cached: decoding costs about what a cache hit does (~290 ns against ~270 ns a
    call, a 33-byte key), and a cache keyed by every job id ever read grew for good
    (200,000 fresh ids put then deleted: +112 MB in a scheduler)."""
    try:
        return (raw.decode() if isinstance(raw, bytes) else raw) or None
    except UnicodeDecodeError:
        return None


def _dead_letters(stage: str) -> Any:
    """The counter child of a stage (``labels`` costs more than the rest of a letter)."""
    return metrics.dead_letters.labels(stage)


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
    _dead_letters(stage).inc()
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


def dead_letter_for(msg: ConsumedMessage, *, stage: str, reason: str) -> DeadLetter:
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
