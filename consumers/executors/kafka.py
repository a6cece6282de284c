"""`kafka` targets: produce the payload to a topic, keyed by the run id.

The record's key is the run id (the idempotency key: a consumer can drop a repeat by
key, and compaction keeps one per run) and its headers carry run_id, job_id and attempt.
An attempt succeeds when the broker acknowledged the record (acks=all, idempotent); its
output (docs/run-output.md) is where the record landed: topic, partition and offset.
The worker produces it from its own loop (``start``) and one thread serves the
acknowledgements (``consumers.executors.deliveries``); an attempt that would block (the
topic's existence to ask the broker, a tenant's first producer) takes a run thread.

**Policy** (``TopicPolicy``, per worker): a job never writes into cronstream's own
topics (a crafted payload on ``runs.*`` would decode as a run that no validation saw)
nor Kafka's internal ones (``__consumer_offsets``, ``__*``); with
``--kafka-allow`` patterns only the topics they match. A topic that does not exist
fails at once, not retried (the broker's metadata, remembered for a minute), instead
of waiting out the timeout for an acknowledgement.

**Who writes**: a tenant's job produces as the tenant (``consumers.executors.egress``),
so the broker's ACLs bound it; a topic the tenant may not write fails at once.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from cronstream.consumers.errors import ExecutionFailed, TargetInvalid, TimedOut
from cronstream.consumers.executors.base import Finished, RunContext
from cronstream.consumers.executors.deliveries import Acknowledging, DeliveryPoller, Record
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.runtime.kafka.clients import KafkaError, KafkaException
from cronstream.schemas.events import Target
from cronstream.schemas.ids import partition_for
from cronstream.schemas.tenancy import OPERATORS

# How long the broker's answer on a topic's existence is trusted.
TOPIC_KNOWN_S = 60.0


class TargetProducer(Acknowledging, Protocol):
    """What a ``KafkaExecutor`` asks of a producer (confluent-kafka's ``Producer`` is
    one; unit tests pass a fake): produce and serve the acknowledgements, and the
    metadata of the topic it writes to."""

    def list_topics(self, topic: str, timeout: float) -> Any: ...


class Tenants(Protocol):
    """The tenants' producers a ``KafkaExecutor`` writes with (``TenantProducers``)."""

    def producer(self, tenant: str) -> TargetProducer: ...
    def made(self, tenant: str) -> TargetProducer | None: ...
    def refusal(self, tenant: str) -> str | None: ...
    def forget_refusal(self, tenant: str) -> None: ...


@dataclass(frozen=True)
class TopicPolicy:
    """Which topics kafka targets may write to. ``own``: cronstream's topics (the
    catalog's, under the deployment's prefix); ``allow``: fnmatch patterns, empty =
    any topic that is not forbidden."""

    own: frozenset[str]
    allow: tuple[str, ...] = ()
    # Every topic under the deployment's prefix is cronstream's too: the tenants'
    # command topics among them (a job writing into another tenant's commands would
    # act as that tenant, with the worker's rights).
    prefix: str = ""

    def refusal(self, topic: str) -> str | None:
        """Why ``topic`` is refused, or None."""
        if topic.startswith("__"):
            return f"topic {topic!r} is internal to Kafka"
        if topic in self.own or (self.prefix and topic.startswith(f"{self.prefix}.")):
            return f"topic {topic!r} is one of cronstream's own"
        if self.allow and not any(fnmatch.fnmatchcase(topic, p) for p in self.allow):
            return f"topic {topic!r} matches no --kafka-allow pattern"
        return None


def executor(setup: ExecutorSetup) -> KafkaExecutor:
    """The worker's kafka executor (declared by ``schemas.targets.kafka``): it writes
    with the worker's producer, a tenant's job with the tenant's, never into
    cronstream's own topics."""
    own = frozenset(setup.topics.names())
    policy = TopicPolicy(
        own=own, allow=setup.config.kafka_allow, prefix=setup.settings.topic_prefix
    )
    return KafkaExecutor(setup.producer, policy, setup.tenant_producers)


class KafkaExecutor:
    kind = "kafka"

    def __init__(
        self, producer: TargetProducer, policy: TopicPolicy, tenants: Tenants | None = None
    ) -> None:
        self.producer = producer  # the worker's own: the default tenant's jobs
        self.policy = policy
        self.tenants = tenants
        # topic -> (until, its partitions): 0 when it does not exist, -1 when not said
        self._exists: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self.deliveries = DeliveryPoller()  # acknowledgements of what ``start`` produced

    def execute(self, target: Target, context: RunContext) -> str:
        """Produce the payload; returns where it landed (the attempt's output)."""
        topic, tenant = target.topic or "", context.tenant
        producer = self._producer_for(topic, tenant, wait=True)
        assert producer is not None  # waited for: decided
        try:
            err, place = deliver(
                producer,
                topic,
                context,
                key=context.run_id.encode(),
                value=(context.payload or "").encode(),
                headers=_headers(context),
            )
        except TimedOut:
            raise self._timed_out(topic, tenant) from None
        return self._verdict(err, place, producer, target, context)

    def _producer_for(self, topic: str, tenant: str, *, wait: bool) -> TargetProducer | None:
        """The producer a record to ``topic`` for ``tenant`` goes through; TargetInvalid
        when refused. ``wait``: the broker asked and a tenant's producer made when need
        be; else None when that would be needed (it blocks)."""
        refusal = self.policy.refusal(topic)
        if refusal is not None:
            raise TargetInvalid(refusal)
        if self.tenants is None or tenant == OPERATORS:
            producer: TargetProducer | None = self.producer
        else:
            producer = self.tenants.producer(tenant) if wait else self.tenants.made(tenant)
        if producer is None:
            return None
        # Asked as the one that writes: a tenant may describe its own topics (their
        # partitions name the runs' destinations), the worker's user may not.
        exists = self._topic_exists(topic, producer) if wait else self._known(topic)
        if exists is None:
            return None
        if not exists:
            raise TargetInvalid(f"topic {topic!r} does not exist")
        return producer

    def _verdict(
        self,
        err: KafkaError | None,
        place: str,
        producer: TargetProducer,
        target: Target,
        context: RunContext,
    ) -> str:
        """The attempt's output for the broker's answer (where the record landed), or
        what failed: raised."""
        failure = self._failure(err, producer, target, context)
        if failure is not None:
            raise failure
        if self.tenants is not None and context.tenant != OPERATORS:
            self.tenants.forget_refusal(context.tenant)
        return f"produced to {target.topic} {place}"

    def _timed_out(self, topic: str, tenant: str) -> ExecutionFailed:
        """No acknowledgement in the run's time: the broker's refusal of the tenant's
        login when it said one, else TimedOut."""
        if self.tenants is not None and tenant != OPERATORS:
            refused = self.tenants.refusal(tenant)
            if refused is not None:
                return ExecutionFailed(refused)
        return _no_acknowledgement(topic)

    def destination(self, target: Target, run_id: str) -> str | None:
        """The topic partition the record goes to (``consumers.executors.base.Destined``):
        a partition without a leader holds only its own runs' slots. The topic alone
        while its partitions are not known without asking the broker."""
        topic = target.topic or ""
        partitions = self._partitions(topic)
        if partitions is None or partitions < 1:
            return f"kafka {topic}"
        return f"kafka {topic} partition {partition_for(run_id, partitions)}"

    def _known(self, topic: str) -> bool | None:
        """Whether ``topic`` exists, as the broker said within TOPIC_KNOWN_S; None when
        not known."""
        partitions = self._partitions(topic)
        return None if partitions is None else partitions != 0

    def _partitions(self, topic: str) -> int | None:
        """How many partitions ``topic`` has (0: it does not exist; -1: the broker did
        not say), as the broker said within TOPIC_KNOWN_S; None when not known."""
        with self._lock:
            known = self._exists.get(topic)
        if known is not None and known[0] > time.monotonic():
            return known[1]
        return None

    def _topic_exists(self, topic: str, asker: TargetProducer) -> bool:
        """From the broker's metadata as ``asker`` sees it (a lookup failure counts as
        existing: producing then decides)."""
        known = self._known(topic)
        if known is not None:
            return known
        try:
            metadata = asker.list_topics(topic=topic, timeout=5)
        except KafkaException:
            return True
        found = metadata.topics.get(topic)
        exists = found is not None and (
            found.error is None or found.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
        )
        partitions = (len(found.partitions) or -1) if found is not None and exists else 0
        with self._lock:
            if len(self._exists) > 10_000:
                self._exists.clear()
            self._exists[topic] = (time.monotonic() + TOPIC_KNOWN_S, partitions)
        return exists

    def _failure(
        self, err: KafkaError | None, producer: TargetProducer, target: Target, context: RunContext
    ) -> ExecutionFailed | None:
        """What the broker's answer to the record means for the attempt."""
        if err is None:
            return None
        if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return TargetInvalid(f"topic {target.topic!r} does not exist: {err.str()}")
        if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            who = f"tenant {context.tenant!r}" if producer is not self.producer else "the worker"
            return TargetInvalid(f"{who} may not write to {target.topic!r}: {err.str()}")
        return ExecutionFailed(f"delivery to {target.topic!r} failed: {err.str()}")

    # -- without a run thread ------------------------------------------------------------
    def start(self, token: Any, target: Target, context: RunContext, done: Finished) -> bool:
        """Produce from the worker's loop when nothing can block it (the topic's
        existence known, the producer made): ``(token, output, error)`` goes on ``done``
        when the broker answers (``consumers.executors.deliveries``). False: the attempt
        needs a run thread (a metadata lookup, a tenant's first producer)."""
        topic, tenant = target.topic or "", context.tenant
        try:
            producer = self._producer_for(topic, tenant, wait=False)
        except TargetInvalid as exc:
            done.put((token, None, exc))
            return True
        if producer is None:
            return False
        ready = producer

        def judged(err: KafkaError | None, msg: Any) -> tuple[str | None, ExecutionFailed | None]:
            try:
                return self._verdict(err, _place(msg), ready, target, context), None
            except ExecutionFailed as failure:
                return None, failure

        record = Record(
            topic, context.run_id.encode(), (context.payload or "").encode(), _headers(context)
        )
        try:
            self.deliveries.produce(
                producer,
                record,
                token,
                done,
                deadline=context.deadline,
                judge=judged,
                expired=partial(self._timed_out, topic, tenant),
            )
        except BufferError as exc:
            done.put((token, None, ExecutionFailed(f"local producer queue full: {exc}")))
        except Exception as exc:  # KafkaException for a bad topic name and the like
            refused = _refused(exc)
            if refused is not None:
                done.put((token, None, self._failure(refused, producer, target, context)))
            else:
                done.put((token, None, TargetInvalid(f"cannot produce to {topic!r}: {exc}")))
        return True

    def close(self) -> None:
        self.deliveries.close()


def _headers(context: RunContext) -> list[tuple[str, str | bytes | None]]:
    """The record's headers: run id, job id, attempt."""
    return [
        ("run_id", context.run_id.encode()),
        ("job_id", context.job_id.encode()),
        ("attempt", str(context.attempt).encode()),
    ]


def deliver(
    producer: TargetProducer,
    topic: str,
    context: RunContext,
    *,
    key: bytes,
    value: bytes,
    headers: Sequence[tuple[str, str | bytes | None]],
) -> tuple[KafkaError | None, str]:
    """Produce one record and wait for the broker's answer within the run's time: (None,
    "partition P offset O") when acknowledged, else (the error, ""). A full local queue
    fails the attempt (retried); the run's deadline passing raises TimedOut."""
    done = threading.Event()
    outcome: list[tuple[KafkaError | None, str]] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        place = "" if err is not None else _place(msg)
        outcome.append((err, place))
        done.set()

    try:
        wire: list[tuple[str, str | bytes | None]] = list(headers)
        producer.produce(topic, key=key, value=value, headers=wire, on_delivery=on_delivery)
    except BufferError as exc:
        raise ExecutionFailed(f"local producer queue full: {exc}") from exc
    except Exception as exc:  # KafkaException for a bad topic name and the like
        refused = _refused(exc)
        if refused is not None:
            return refused, ""
        raise TargetInvalid(f"cannot produce to {topic!r}: {exc}") from exc
    while not done.is_set():
        if context.remaining() <= 0:
            raise _no_acknowledgement(topic)
        producer.poll(min(0.05, context.remaining()))
    return outcome[0]


def _refused(exc: Exception) -> KafkaError | None:
    """The broker's refusal of the writer that ``produce`` raised at once (its metadata,
    asked as the writer, said so already), answered as a refused delivery is."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return err
    return None


def _place(msg: Any) -> str:
    """Where an acknowledged record landed."""
    return f"partition {msg.partition()} offset {msg.offset()}"


def _no_acknowledgement(topic: str) -> TimedOut:
    return TimedOut(f"no acknowledgement from {topic!r} before the timeout")
