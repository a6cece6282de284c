"""`kafka` targets: produce the payload to a topic, keyed by the run id.

The record's key is the run id (the idempotency key: a consumer can drop a repeat by
key, and compaction keeps one per run) and its headers carry run_id, job_id and attempt.
An attempt succeeds when the broker acknowledged the record (acks=all, idempotent).
"""

from __future__ import annotations

import threading

from confluent_kafka import KafkaError, Message, Producer

from consumers.executors.base import ExecutionFailed, RunContext, TargetInvalid, TimedOut
from schemas.events import Target


class KafkaExecutor:
    kind = "kafka"

    def __init__(self, producer: Producer) -> None:
        self.producer = producer

    def execute(self, target: Target, context: RunContext) -> str:
        done = threading.Event()
        outcome: list[KafkaError | None] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            outcome.append(err)
            done.set()

        try:
            self.producer.produce(
                target.topic or "",
                key=context.run_id.encode(),
                value=(context.payload or "").encode(),
                headers=[("run_id", context.run_id.encode()),
                         ("job_id", context.job_id.encode()),
                         ("attempt", str(context.attempt).encode())],
                on_delivery=on_delivery,
            )  # fmt: skip
        except BufferError as exc:
            raise ExecutionFailed(f"local producer queue full: {exc}") from exc
        except Exception as exc:  # KafkaException for a bad topic name and the like
            raise TargetInvalid(f"cannot produce to {target.topic!r}: {exc}") from exc
        while not done.is_set():
            if context.remaining() <= 0:
                raise TimedOut(f"no acknowledgement from {target.topic!r} before the timeout")
            self.producer.poll(min(0.05, context.remaining()))
        err = outcome[0]
        if err is None:
            return f"produced to {target.topic}"
        if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            raise TargetInvalid(f"topic {target.topic!r} does not exist: {err.str()}")
        raise ExecutionFailed(f"delivery to {target.topic!r} failed: {err.str()}")
