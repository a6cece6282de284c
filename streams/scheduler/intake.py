"""What the scheduler processor reads, once per loop iteration (``Intake.read``):
definitions from the jobs topic (applied at once on a live partition: ``Applier``;
collected while a partition loads, and settled SETTLE_BATCH at a time: ``Loader``),
timers from the timers topic (into the core), and bad records to the DLQ. While the
registry is unavailable the records that need it wait, in order (``runtime.kafka.stall``);
the loaded jobs keep firing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from cronstream.runtime.kafka.member import GroupMember
from cronstream.runtime.kafka.records import ConsumedMessage, is_record, text_key
from cronstream.runtime.kafka.stall import Backoff, Held, Holding
from cronstream.schemas.errors import DecodeError, RegistryUnavailable
from cronstream.schemas.events import TimerReason, TimerRequest, to_ms
from cronstream.schemas.serde import Codec
from cronstream.streams.core.partition import NEVER, Timer
from cronstream.streams.scheduler.applying import Applier
from cronstream.streams.scheduler.loading import Loader
from cronstream.streams.scheduler.owned import Owned

log = logging.getLogger("cronstream.scheduler")
# While the registry is unavailable (``runtime.kafka.stall``): what waits, what goes on.
READING_HELD = "reading definitions and timers paused until it answers; loaded jobs keep firing"


class TimersSource(Holding, Protocol):
    """What the intake asks of the timers consumer (confluent-kafka's ``Consumer`` is
    one; unit tests pass a fake): batches of records, and what ``Held`` asks."""

    def consume(self, num_messages: int, timeout: float) -> list[Any]: ...


class Intake:
    def __init__(
        self,
        *,
        member: GroupMember,
        timers: TimersSource,
        owned: dict[int, Owned],
        applier: Applier,
        loader: Loader,
        codec: Codec,
        backoff: Backoff,
        now_ms: Callable[[], int],
    ) -> None:
        self.member = member
        self.timers = timers
        self.owned = owned
        self.applier = applier
        self.loader = loader
        self.codec = codec
        self.backoff = backoff  # reading waits for the registry
        self.now_ms = now_ms
        self.held_jobs = Held(member.consumer)
        self.held_timers = Held(timers)

    def read(self) -> None:
        """Apply what arrived: definitions, one settling step of a read partition, timers."""
        # Wait for input only when there is nothing else to do: not while a read
        # partition waits to be settled, little while partitions are live.
        backoff, loader = self.backoff, self.loader
        live = any(not o.loading for o in self.owned.values())
        settle = backoff.due() and loader.read_partition() is not None
        wait = 0 if settle else 0.005 if live else 0.1
        batch = self.member.consume(5000, wait)
        self._read(batch, self.held_jobs, self._on_jobs_record)
        # Read partitions are settled SETTLE_BATCH definitions per iteration, one
        # partition at a time, so the ones already live fire on time in between
        # (settling 80,000 definitions takes seconds).
        read = loader.read_partition()
        if read is not None and backoff.due():
            loader.settle_some(read)
        if self.owned:
            batch = self.timers.consume(num_messages=2000, timeout=0)
            self._read(batch, self.held_timers, self._on_timer_record)
        if backoff.stalled and backoff.due() and not (self.held_jobs or self.held_timers):
            backoff.passed()
            self.held_jobs.resume()
            self.held_timers.resume()

    def forget(self, partitions: set[int]) -> None:
        """What waits for the registry from ``partitions`` is dropped (assigned anew,
        handed over, or rewound: they are read again from where they start)."""
        self.held_jobs.drop_partitions(partitions)
        self.held_timers.drop_partitions(partitions)

    def _read(
        self, batch: list[Any], held: Held, handle: Callable[[ConsumedMessage], None]
    ) -> None:
        """Handle ``batch`` in order; while the registry is unavailable, the records
        that need it (and every one after them) wait in ``held`` (``Backoff``)."""
        if self.backoff.stalled:
            held.hold(batch)
            if not self.backoff.due():
                return
            batch = held.take()
        for i, msg in enumerate(batch):
            try:
                handle(msg)
            except RegistryUnavailable as exc:
                held.hold(batch[i:])
                self.backoff.failed(exc)
                return

    def _on_jobs_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            # The end of the partition: loading is complete even when the last offsets
            # are gone (compacted tombstones, transaction markers).
            eof = self.owned.get(msg.partition() or 0)
            if eof is not None and eof.loading:
                eof.read = True
            return
        partition = msg.partition()
        owned = self.owned.get(partition) if partition is not None else None
        offset = msg.offset()
        if owned is None or offset is None:
            return
        owned.jobs_next = offset + 1
        key = self._key(msg)
        if key is None:
            return
        if owned.loading:
            self.loader.collect(owned, key, offset, msg)
        else:
            self.applier.put(owned, key, offset, msg.timestamp()[1], msg.value())

    def _on_timer_record(self, msg: ConsumedMessage) -> None:
        if not is_record(msg):
            return
        partition, offset = msg.partition(), msg.offset()
        owned = self.owned.get(partition) if partition is not None else None
        if owned is None or offset is None:
            return
        owned.timers_next = offset + 1
        try:
            request = self.codec.decode(msg.value(), TimerRequest)
        except DecodeError as exc:
            self.applier.refuse(msg, f"undecodable timer request: {exc}")
            return
        checkpoint = owned.checkpoint
        known = checkpoint is not None and offset < checkpoint.timers_offset
        due = to_ms(request.due_at)
        timer = Timer(
            offset=offset,
            job_id=request.job_id,
            due_ms=due,
            body=request,
            # Already due when read: a previous owner may have fired it (a fresh timer
            # due at once pays one history lookup for the flag).
            possible_duplicate=due <= self.now_ms(),
            check=request.reason is TimerReason.DEADLINE,
        )
        owned.core.add_timer(
            timer, fired_through=checkpoint.fired_through if known and checkpoint else NEVER
        )

    def _key(self, msg: ConsumedMessage) -> str | None:
        key = text_key(msg.key())
        if key is None:
            self.applier.refuse(msg, "record key is not a UTF-8 job id")
        return key
