"""Taking partitions over (``Loader``): a partition assigned to the processor is
*loading*: its store opened (``--state-dir``), its jobs partition read to the end offset
seen at assignment (definitions collected, not applied), then settled against the
checkpoint SETTLE_BATCH definitions per loop iteration, so that the partitions already
live keep firing on time; then it is *live*. Also: the garbage collector paused while
partitions load, and the zone database of the previous owner checked.
"""

from __future__ import annotations

import gc
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.kafka.stall import Backoff
from cronstream.schemas.definition.zones import TZDATA_VERSION
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.events import from_ms, iso
from cronstream.streams.core.partition import Deferred, PartitionScheduler
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.scheduler.applying import Applier, store
from cronstream.streams.scheduler.checkpoint import Checkpoint
from cronstream.streams.scheduler.config import SchedulerConfig
from cronstream.streams.scheduler.definitions import Definitions
from cronstream.streams.scheduler.owned import Owned
from cronstream.streams.scheduler.state import (
    PartitionState,
    StoredDefinition,
    Stores,
    resume_point,
)

log = logging.getLogger("cronstream.scheduler")
# Definitions settled per loop iteration while a partition loads (a few tens of
# milliseconds): the live partitions fire on time in between.
SETTLE_BATCH = 500


class Collector:
    """Python's cyclic garbage collector off while partitions load, and what they loaded
    moved out of its reach afterwards (``gc.freeze``).

    Loading allocates a few objects per job and frees almost none, which is the worst
    case for the collector: each collection of the old generation walks every object
    loaded so far. Measured on 1,000,000 jobs, without Kafka: 64 us a job with the
    collector on, 45 with it off. Nothing the load allocates refers to itself
    (definitions, schedules, wheel tuples), so reference counting frees whatever it
    drops. Frozen objects are not scanned again, so later collections cost what the
    loop allocates, not the number of jobs.
    """

    def __init__(self) -> None:
        self.paused = False

    def loading(self) -> None:
        """A partition starts loading."""
        if not self.paused and gc.isenabled():
            gc.disable()
            self.paused = True

    def loaded(self, still_loading: bool) -> None:
        """A partition is live (``still_loading``: others are not yet)."""
        if self.paused and not still_loading:
            gc.freeze()
            gc.enable()
            self.paused = False


def check_zone_database(partition: int, checkpoint: Checkpoint | None) -> None:
    """Say loudly when the previous owner computed slots with another zone database:
    around a zone whose rules changed between the two, a slot (and its run id) may
    differ, so a run may repeat or be missed there. Taking over goes on: refusing
    would stop every job of the partition for a difference that touches few."""
    if checkpoint is None or checkpoint.tzdata in (None, TZDATA_VERSION):
        return
    log.error(
        "partition %d was checkpointed by a scheduler using tzdata %s; this one uses %s: "
        "slots of jobs in zones whose rules differ between the two may move (run every "
        "scheduler with the same cronstream release)",
        partition,
        checkpoint.tzdata,
        TZDATA_VERSION,
    )


class Loader:
    """Loads the partitions of ``owned`` (the processor's, kept by ``Ownership``):
    opens their stores, collects what is read while they load, settles it, makes them
    live (then calls ``on_live``)."""

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        definitions: Definitions,
        applier: Applier,
        owned: dict[int, Owned],
        backoff: Backoff,
        jobs_topic: str,
        now_ms: Callable[[], int],
    ) -> None:
        self.config = config
        self.definitions = definitions
        self.applier = applier
        self.owned = owned
        self.backoff = backoff  # shared with the intake: settling needs the registry too
        # Fires per second per tenant, shared by every partition's core (``Ownership``
        # sets this processor's share).
        self.rates = (
            TenantRates(config.tenant_fire_rate, overrides=config.tenant_fire_rates)
            if config.tenant_fire_rate > 0 or config.tenant_fire_rates
            else None
        )
        self.jobs_topic = jobs_topic
        self.now_ms = now_ms
        self.on_live: Callable[[], None] = lambda: None  # a partition went live
        self.collector = Collector()
        self.stores = (
            Stores(
                Path(config.state_dir) / jobs_topic,
                definitions.stored_schedule,
                rebuild=config.rebuild_index,
            )
            if config.state_dir is not None
            else None
        )

    def open_state(
        self,
        partition: int,
        checkpoint: Checkpoint | None,
        low: int,
        standby: PartitionState | None = None,
    ) -> tuple[PartitionState | None, int, int | None]:
        """With ``--state-dir``: the partition's store (its standby store, already open,
        ``streams.scheduler.standby``, or opened now), the jobs offset to read definitions from and
        the store's fired-through point (``streams.scheduler.state.resume_point``)."""
        if self.stores is None:
            return None, low, None
        state = standby or self.stores.open(partition, self.now_ms())
        return state, *resume_point(state.meta(), checkpoint, low)

    def load(
        self,
        partition: int,
        checkpoint: Checkpoint | None,
        *,
        load_end: int,
        jobs_next: int,
        state: PartitionState | None = None,
        fired_through: int | None = None,
    ) -> Owned:
        """A partition to load from ``checkpoint`` (else the store's point, else now)."""
        if checkpoint is not None or fired_through is None:
            fired_through = checkpoint.fired_through if checkpoint else self.now_ms()
        config = self.config
        owned = Owned(
            partition=partition,
            core=PartitionScheduler(
                partition,
                fired_through=fired_through,
                threshold_ms=config.threshold_ms,
                tick_ms=config.tick_ms,
                horizon_ms=config.horizon_ms,
                rates=self.rates,
                far=state,
            ),
            checkpoint=checkpoint,
            load_end=load_end,
            jobs_next=jobs_next,
            base=checkpoint,
            state=state,
            rebuilding=state is not None and state.meta() is None,
        )
        owned.core.wheel.on_near = self.near_hook(owned)
        self.collector.loading()
        return owned

    def collect(self, owned: Owned, key: str, offset: int, msg: ConsumedMessage) -> None:
        """A definition read while its partition loads: kept to be settled once the
        partition is read to its end (into the store, when it is being rebuilt)."""
        arrived = msg.timestamp()[1]
        if owned.rebuilding:
            assert owned.state is not None
            store(owned.state, key, offset, arrived, msg.value())
        else:
            earlier = owned.pending.get(key)
            # An earlier version read, or already settled (``settle_some``), or stored.
            replaced = (earlier is not None and earlier[2] is not None) or key in owned.core.jobs
            if not replaced and owned.state is not None:
                stored = owned.state.definition(key)
                replaced = stored is not None and (stored.offset < offset or stored.replaced)
            owned.pending[key] = (offset, arrived, msg.value(), replaced)
        if owned.jobs_next >= owned.load_end:
            owned.read = True

    def read_partition(self) -> Owned | None:
        """A loading partition read to its end, waiting to be settled."""
        return next((o for o in self.owned.values() if o.loading and o.read), None)

    def settle_some(self, owned: Owned) -> None:
        """Settle up to SETTLE_BATCH read definitions of a loading partition against
        its checkpoint; once none is left, the partition is live.

        Definitions are taken in the order they were first read; each is the latest
        version read so far. One read again after it was settled (written during the
        settling) is settled again as a replacement, as it would be once live."""
        if owned.rebuilding:
            self._settle_stored(owned)
            return
        now = self.now_ms()
        core = owned.core
        pending = owned.pending
        room = SETTLE_BATCH
        while room > 0:
            if owned.settled >= len(owned.settling):
                if not pending:
                    self.go_live(owned)
                    return
                owned.settling, owned.settled = list(pending), 0
            key = owned.settling[owned.settled]
            owned.settled += 1
            room -= 1
            entry = pending.pop(key)
            offset, arrived, value, replaced = entry
            if value is None:
                core.delete(key)  # deleted, perhaps after it was settled
                if owned.state is not None:
                    owned.state.delete_definition(key)
                continue
            try:
                job = self.applier.schedule(key, value, partition=owned.partition, offset=offset)
            except RegistryUnavailable as exc:  # tried again after the backoff
                pending.setdefault(key, entry)
                owned.settled -= 1
                self.backoff.failed(exc)
                return
            if job is None:
                continue
            if owned.state is not None:
                owned.state.put_definition(key, StoredDefinition(offset, arrived, replaced, value))
            self.applier.recover(
                owned, job, value, offset, now=now, arrived_ms=arrived, replaced=replaced
            )

    def _settle_stored(self, owned: Owned) -> None:
        """A store rebuilt from the whole jobs topic: settle SETTLE_BATCH of its
        definitions against the checkpoint, in job id order; then the partition is
        live. One that cannot be used is dead-lettered and deleted from the store."""
        assert owned.state is not None
        now, state = self.now_ms(), owned.state
        batch = list(itertools.islice(state.definitions(owned.rebuilt_through), SETTLE_BATCH))
        for key, stored in batch:
            try:
                job = self.applier.schedule(
                    key, stored.raw, partition=owned.partition, offset=stored.offset
                )
            except RegistryUnavailable as exc:  # tried again after the backoff
                self.backoff.failed(exc)
                return
            owned.rebuilt_through = key
            if job is None:
                state.delete_definition(key)
                continue
            self.applier.recover(
                owned,
                job,
                stored.raw,
                stored.offset,
                now=now,
                arrived_ms=stored.arrived_ms,
                replaced=stored.replaced,
            )
        if len(batch) < SETTLE_BATCH:
            owned.rebuilding = False
            self.go_live(owned)

    def go_live(self, owned: Owned) -> None:
        owned.loading = False
        owned.settling = []
        self.partitions_changed()
        log.info(
            "partition %d live: %d jobs in %.1fs, fired through %s",
            owned.partition,
            len(owned.core.jobs),
            time.monotonic() - owned.started,
            iso(from_ms(owned.core.fired_through)),
        )
        self.on_live()

    def partitions_changed(self) -> None:
        """A partition is live or gone: the collector is back once none loads."""
        self.collector.loaded(any(o.loading for o in self.owned.values()))

    def near_hook(self, owned: Owned) -> Callable[[Any], None]:
        """Prepare a job's run template as it comes within the horizon (``Definitions``)."""
        jobs, prepare = owned.core.jobs, self.definitions.prepare

        def on_near(item: Any) -> None:
            if type(item) is tuple:
                job = jobs.get(item[0])
                if job is not None and job.gen == item[1]:
                    prepare(job)
            elif type(item) is Deferred and item.fire.job is not None:
                prepare(item.fire.job)

        return on_near
