"""Where a partition's log begins and ends, and where a consumer or group stands on it."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from cronstream.runtime import stop

log = logging.getLogger("cronstream.kafka")

# Refusals that mean the client's idea of a partition's leader is stale: retried, and
# a watermarks call asks its topic's metadata again first (``_watermarks``).
_STALE_LEADER = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        # The client's metadata lacks the partition for a moment (seen on the 3-node
        # cluster with a broker killed: a worker's watermarks call, then it exited).
        KafkaError._UNKNOWN_PARTITION,
        # A request to a broker that left the cluster's metadata (killed, fenced): the
        # client drops its handle and the request with it (a scheduler exited on it).
        KafkaError._DESTROY_BROKER,
    }
)
# Refusals a broker gives while it (re)starts, loads a log or moves a leader: retried.
# librdkafka does not flag every one of them retriable (found: FENCED_LEADER_EPOCH,
# "Leader epoch is older than broker epoch", after a broker restart).
_TRANSIENT = _STALE_LEADER | {
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._WAIT_COORD,
}
T = TypeVar("T")
# One try of a request ``retrying`` repeats: short enough that a stop is noticed within
# it (a coordinator on a killed broker timed out 30 s tries, one after another).
CALL_TIMEOUT_S = 5.0


def is_transient(exc: KafkaException) -> bool:
    """Whether ``exc`` is a refusal that passes once the broker or leader is back."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in _TRANSIENT)


def retrying(call: Callable[[], T], *, timeout: float = 120.0) -> T:
    """``call()``, again every half second while it fails transiently, for up to
    ``timeout`` s (a broker restart); other errors, and the last one, are raised. A
    process asked to stop (``runtime.stop``) does not try again: StopWaiting."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not is_transient(exc) or time.monotonic() > deadline:
                raise
            if stop.requested():
                raise stop.StopWaiting(f"stopped while Kafka refused: {exc.args[0]}") from exc
            log.warning("Kafka refused for now (%s); retrying", exc.args[0])
        for _ in range(5):  # half a second, looking at the stop flag
            if stop.requested():
                break
            time.sleep(0.1)


class WatermarkSource(Protocol):
    """What ``watermarks`` asks of a consumer (confluent-kafka's ``Consumer`` is one; unit
    tests pass fakes): a partition's low and high offsets, and its topic's metadata
    asked again when the client's idea of the leader is stale (the answer unused)."""

    def get_watermark_offsets(
        self, partition: TopicPartition, /, *, timeout: float
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str, /, *, timeout: float) -> object: ...


class CommittedSource(Protocol):
    """What ``committed`` asks of a consumer: its group's committed offsets."""

    def committed(
        self, partitions: list[TopicPartition], /, *, timeout: float
    ) -> list[TopicPartition]: ...


class TimeIndexSource(WatermarkSource, Protocol):
    """What ``offset_since`` asks of a consumer: the offsets written since a time, and
    a partition's end (``watermarks``)."""

    def offsets_for_times(
        self, partitions: list[TopicPartition], /, *, timeout: float
    ) -> list[TopicPartition]: ...


def watermarks(
    consumer: WatermarkSource, tp: TopicPartition, *, timeout: float = 120.0
) -> tuple[int, int]:
    """(low, high) offsets of a partition, retrying the broker's transient refusals
    (just after a broker restart a partition's leader can answer NOT_LEADER or a fenced
    epoch while it loads its log)."""
    marks = retrying(lambda: _watermarks(consumer, tp), timeout=timeout)
    if marks is None:
        raise RuntimeError(f"no watermarks for {tp.topic}/{tp.partition}: is Kafka up?")
    low, high = marks
    return int(low), int(high)


def _watermarks(consumer: WatermarkSource, tp: TopicPartition) -> Any:
    """One try. A partition whose leader the client's metadata does not know, or knows
    wrong (a topic the consumer does not subscribe to, as a worker's history, whose
    leader was on a broker that was killed), has its topic's metadata asked again: the
    client refreshes only the topics it consumes, and the worker waited two minutes for
    that one (unknown partition), or retried 'Not leader' until the next periodic
    refresh."""
    try:
        return consumer.get_watermark_offsets(tp, timeout=10)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() in _STALE_LEADER:
            refresh_metadata(consumer, tp.topic)
        raise


class _Serving(threading.local):
    """The clients serving a callback on this thread (``serving``), by ``id``."""

    def __init__(self) -> None:
        self.clients: dict[int, int] = {}


_SERVING = _Serving()


@contextlib.contextmanager
def serving(client: object) -> Iterator[None]:
    """Within the ``with``, ``client`` is serving one of its callbacks on this thread
    (``GroupMember`` runs a role's partition hooks so, inside its ``poll``)."""
    key = id(client)
    _SERVING.clients[key] = _SERVING.clients.get(key, 0) + 1
    try:
        yield
    finally:
        _SERVING.clients[key] -= 1
        if not _SERVING.clients[key]:
            del _SERVING.clients[key]


def refresh_metadata(client: WatermarkSource, topic: str) -> None:
    """Ask ``topic``'s metadata again (its partitions' leaders), unless ``client`` is
    serving a callback on this thread (``serving``). confluent-kafka keeps one call
    state per client and thread; ``list_topics`` called inside the client's own
    ``poll`` ends that poll's state, and the poll's next callback aborts the process
    (the C assertion ``cs != NULL`` in ``CallState_get``: two workers died so, a
    broker lost under load, asking watermarks in their assignment hook). Called from
    another thread, it waits for that poll to return: a deadlock. There librdkafka's
    own refresh serves: a refused watermarks query drops the topic from its metadata
    cache, and the next try, with the leader unknown, asks for it."""
    if id(client) in _SERVING.clients:
        return
    with contextlib.suppress(KafkaException):
        client.list_topics(topic, timeout=5)


def assign_whole(consumer: Consumer, topic: str) -> dict[int, int]:
    """Assign every partition of ``topic`` from its beginning; returns the end (high
    watermark, as of now) of each partition that holds records: a reader of a whole
    topic reads until its next offsets reach them."""
    meta = consumer.list_topics(topic, timeout=30).topics[topic]
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions]
    ends = {}
    for tp in parts:
        low, high = watermarks(consumer, tp)
        if high > low:
            ends[tp.partition] = high
    consumer.assign(parts)
    return ends


def committed(consumer: CommittedSource, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The group's committed offsets (and metadata) of ``partitions``, retrying
    transient refusals."""
    return list(retrying(lambda: consumer.committed(partitions, timeout=CALL_TIMEOUT_S)))


def group_lag(consumer: Consumer, ends: list[TopicPartition]) -> int:
    """Records before ``ends`` (end offsets) that ``consumer``'s group has not committed."""
    done = committed(consumer, [TopicPartition(tp.topic, tp.partition) for tp in ends])
    return sum(max(0, end.offset - max(0, c.offset)) for end, c in zip(ends, done, strict=True))


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
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True) or (0, 0)
            except KafkaException:  # a gauge: skipped while the broker refuses
                continue
            out.append((tp, max(0, high - tp.offset)))
    return out


def offset_since(consumer: TimeIndexSource, topic: str, partition: int, since_ms: int) -> int:
    """The first offset of ``topic``/``partition`` written at or after ``since_ms`` (the
    end of the partition if none was)."""
    wanted = TopicPartition(topic, partition, since_ms)
    found = retrying(lambda: consumer.offsets_for_times([wanted], timeout=CALL_TIMEOUT_S))
    located = found[0].offset
    if located >= 0:
        return int(located)
    return watermarks(consumer, TopicPartition(topic, partition))[1]
