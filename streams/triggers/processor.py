"""The trigger processor (docs/event-triggers.md): jobs run on the records of
any Kafka topic (``on:``).

One process runs one ``TriggerProcessor``, a member of the consumer group
``<prefix>.triggers`` on the source topics of every trigger (partitioned by source
partition: start as many as there are source partitions to share). It follows the jobs
topic whole (``streams.triggers.rules``: every definition with ``on:``, checked again,
a refused one dead-lettered) and keeps, for every source partition it owns, one
``PartitionTrigger`` (``streams.core.triggers``) per job on that topic. Each record
read is decoded once (``streams.triggers.values``) and stepped through every trigger of
its partition; the run requests they decide go to ``runs.<priority>`` (trigger EVENT,
the record as payload), the records they refuse to the DLQ.

**The commit procedure** (``checkpoint``), every ``checkpoint_ms`` and before a
partition moves away:

1. every record read has been stepped through every trigger of its partition, and the
   run requests and dead letters it caused are produced (``_step``);
2. flush: all of them acknowledged (not within a second: the checkpoint waits for a
   later round; at a handover it waits up to 30 s);
3. store the checkpoint of every trigger that changed since it was last stored, on the
   compacted ``<prefix>.triggers-checkpoints`` keyed ``<job>|<topic>|<partition>``
   (``streams.triggers.store``);
4. flush: the checkpoints acknowledged;
5. commit, per source partition, the lowest ``resume_offset`` of its triggers to the
   group (what the group's lag per source partition measures).

A crash anywhere re-reads from the committed offset with the stored checkpoints: a
record before a trigger's own resume offset is skipped, so every run decided before
the crash is decided again under the same run id with the same payload, flagged
``possible_duplicate`` for records before the partition's high watermark at
assignment; the workers run a run id once.

**Where a trigger starts.** A trigger with a stored checkpoint resumes from it (a
changed trigger keeps its own: open batches are read again under the new rule).
Without one (a new job, or a new source topic) it starts at the first record stamped at
or after its definition was written (``offsets_for_times``), the same whoever reads it.
A partition is read from the lowest start of its triggers; a trigger added on a
partition already read past its start moves the partition back to it (the other
triggers skip what they decided).

**Tenants' rates.** A tenant's event runs are limited like its manual triggers:
``tenant_runs_per_second`` (by default the rate of the admission's
``--triggers-per-second``), a sliding one-second window per tenant
(``streams.core.rates``). A source partition whose tenant has reached its rate is held
(paused, its position kept at the record not yet read) until the rate allows the next
run: nothing is dropped, the tenant's lag grows. Operators' jobs (tenant ``default``)
are not limited.

**Paused jobs** read on and run nothing: the records of the pause are passed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cronstream.runtime import metrics
from cronstream.runtime.errors import PublishError
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import KafkaException, TopicPartition
from cronstream.runtime.kafka.member import GroupMember, MemberConfig
from cronstream.runtime.kafka.offsets import retrying, watermarks
from cronstream.runtime.kafka.publisher import FAILURES_ONLY, Publisher
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter_for, is_record
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, sleeping
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import DeadLetter, from_ms
from cronstream.schemas.limits import MAX_PAYLOAD_BYTES
from cronstream.schemas.serde import Codec
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.triggers import Checkpoint, EventRun, PartitionTrigger, source_record
from cronstream.streams.triggers.owned import TOPIC_ERRORS, Owned
from cronstream.streams.triggers.rules import STAGE, Active, TriggerDefinitions
from cronstream.streams.triggers.store import CheckpointStore, checkpoint_key
from cronstream.streams.triggers.values import SourceValues

log = logging.getLogger("cronstream.triggers")
Key = tuple[str, int]  # (topic, partition)


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerConfig(MemberConfig):
    name: str = "triggers"
    checkpoint_ms: int = 1000
    tenant_runs_per_second: float = 10.0  # 0: no limit
    allow_topics: tuple[str, ...] = ()  # cronstream's own topics operators' jobs may read
    read_max: int = 5000
    topics_every_s: float = 5.0  # how often the source topics are looked for


class TriggerProcessor:
    def __init__(
        self, settings: Settings, config: TriggerConfig, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings
        self.config = config
        self.clock = clock
        self.topics = Topics(settings)
        registry = registry_client(settings)
        self.codec = Codec(registry)
        self.values = SourceValues(registry)
        self.publisher = Publisher(settings, codec=self.codec, **FAILURES_ONLY)
        self.member = GroupMember(settings, config, log=log)
        self.consumer = self.member.consumer
        self.max_payload = min(settings.max_payload_bytes, MAX_PAYLOAD_BYTES)
        self.definitions = TriggerDefinitions(
            settings,
            self.codec,
            refuse=self._dead_letter,
            allow_topics=config.allow_topics,
            max_payload_bytes=self.max_payload,
        )
        self.store = CheckpointStore(settings, self.publisher)
        self.rates = TenantRates(config.tenant_runs_per_second)
        self.faults = RecordFaults(STAGE)
        self.tally = metrics.Tally()
        self.owned: dict[Key, Owned] = {}
        self.subscribed: tuple[str, ...] = ()
        self.missing: set[str] = set()  # source topics not found (logged once each)
        self.healthy = True  # False once the loop failed: a handover commits nothing
        self._next_topics = 0.0
        self._next_checkpoint = 0.0
        self.should_stop: Callable[[], bool] = lambda: False

    # -- the loop -----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop
        pause = sleeping(should_stop)
        who = f"triggers {self.config.name}"
        self.definitions.learn = lambda batch: learn_writers(
            self.codec, batch, what=who, log=log, pause=pause
        )
        try:
            found = self.definitions.load()
            log.info("jobs topic read: %d event triggers", len(self.definitions.active))
            self.store.catch_up()
            self._apply(found)
            while not should_stop():
                self.step()
            self.checkpoint(list(self.owned), wait=True)
        except StopWaiting:  # what was read and not checkpointed is read again
            log.warning("stopped while waiting for the schema registry")
        except BaseException:
            self.healthy = False
            raise
        finally:
            self.member.close()  # runs _revoking for what is still owned
            self.definitions.close()
            self.store.close()
            self.publisher.close()

    def step(self) -> None:
        """One round: definitions that changed, partitions held for a rate released,
        then the records that arrived, and the commit procedure when it is due."""
        changes = self.definitions.follow()
        if changes:
            self._apply(changes)
        elif time.monotonic() >= self._next_topics:
            self._subscribe()
        self._release(self._now_ms())
        messages = self.member.consume(self.config.read_max, 0.1, ready=True)
        if messages:
            pause = sleeping(self.should_stop)
            self.values.learn(messages, what=f"triggers {self.config.name}", pause=pause)
            self._handle(messages)
        self.publisher.producer.poll(0)
        if time.monotonic() >= self._next_checkpoint:
            self._next_checkpoint = time.monotonic() + self.config.checkpoint_ms / 1000
            self.checkpoint(list(self.owned))
            self._gauge()

    # -- records ------------------------------------------------------------------------
    def _handle(self, messages: list[ConsumedMessage]) -> None:
        now = self._now_ms()
        stale: set[Key] = set()  # held during this batch: its later records are read again
        for msg in messages:
            if not self._is_record(msg):
                continue
            key = (msg.topic() or "", msg.partition() or 0)
            owned = self.owned.get(key)
            if owned is None or key in stale or owned.held_until:
                continue
            offset = msg.offset() or 0
            if owned.tenants and self._hold(owned, offset, now):
                stale.add(key)
                continue
            self.tally.add(metrics.triggers_records_read, owned.topic)
            self._step(owned, msg, now)
            owned.position = offset + 1

    def _is_record(self, msg: ConsumedMessage) -> bool:
        try:
            return is_record(msg)
        except KafkaException as exc:
            if exc.args[0].code() not in TOPIC_ERRORS:
                raise
            log.warning("source topic %s: %s", msg.topic(), exc.args[0].str())
            self._next_topics = 0.0  # look at the topics again
            return False

    def _step(self, owned: Owned, msg: ConsumedMessage, now: int) -> None:
        """Step 1 of the commit procedure for one record: every trigger of its
        partition decides, and what they decide is produced."""
        if not owned.triggers:
            return
        headers = msg.headers() or []
        items = headers.items() if isinstance(headers, dict) else headers
        record = source_record(
            topic=owned.topic,
            partition=owned.partition,
            offset=msg.offset() or 0,
            timestamp_ms=msg.timestamp()[1],
            key=_raw(msg.key()),
            headers=[(name, _raw(v)) for name, v in items],
            value=self.values.decode(msg.value()),
        )
        for job_id, trigger in owned.triggers.items():
            active = self.definitions.active[job_id]
            try:
                decisions = trigger.step(record)
            except Exception as exc:  # a bug this record reaches: dead-lettered, not a stop
                fault = self.faults.fault_at(exc, msg, tenant=active.job.tenant)
                self._refuse(msg, job_id, fault.reason)
                continue
            self.faults.ok()
            for decision in decisions:
                if isinstance(decision, EventRun):
                    self._emit(active, decision, now)
                else:
                    self._refuse(msg, job_id, f"event run refused: {decision.reason}")

    def _emit(self, active: Active, run: EventRun, now: int) -> None:
        job = active.job
        if job.paused:
            return
        request = replace(
            active.template,
            run_id=run.run_id,
            scheduled_at=from_ms(run.scheduled_ms),
            fired_at=from_ms(now),
            payload=run.payload,
            possible_duplicate=run.possible_duplicate,
        )
        self.publisher.publish(self.topics.runs(request.priority), request)
        self.tally.add(metrics.triggers_runs_emitted, job.job_id)
        if self.rates.limited(job.tenant):
            self.rates.reserve(job.tenant, now)

    def _refuse(self, msg: ConsumedMessage, job_id: str, reason: str) -> None:
        letter = dead_letter_for(msg, stage=STAGE, reason=reason)
        self._dead_letter(replace(letter, job_id=job_id))
        self.tally.add(metrics.triggers_refused, job_id)

    def _dead_letter(self, letter: DeadLetter) -> None:
        self.publisher.publish(self.topics.dlq, letter)

    # -- tenants' rates -----------------------------------------------------------------
    def _hold(self, owned: Owned, offset: int, now: int) -> bool:
        """Hold ``owned`` at ``offset`` (not read yet) while one of its tenants is at
        its rate: paused, and read from there once ``_release`` lets it go."""
        until = max(self.rates.ready_at(t, now) for t in owned.tenants)
        if until <= now:
            return False
        owned.held_until = until
        tp = owned.tp
        self.consumer.pause([tp])
        self.consumer.seek(TopicPartition(owned.topic, owned.partition, offset))
        for tenant in owned.tenants:
            if self.rates.ready_at(tenant, now) > now:
                self.tally.add(metrics.triggers_rate_holds, tenant)
        return True

    def _release(self, now: int) -> None:
        for owned in self.owned.values():
            if owned.held_until and owned.held_until <= now:
                owned.held_until = 0
                self.consumer.resume([owned.tp])
                self.consumer.seek(TopicPartition(owned.topic, owned.partition, owned.position))

    # -- the commit procedure -----------------------------------------------------------
    def checkpoint(self, keys: Sequence[Key], *, wait: bool = False) -> None:
        """The commit procedure (the module's text) for the partitions ``keys``."""
        # 1. (done as each record was read: ``_step``)
        # 2. run requests and dead letters acknowledged
        if not self._settled(wait):
            return
        # 3. the checkpoints that changed, stored
        commits, stored = [], False
        for key in keys:
            owned = self.owned[key]
            resume = owned.position
            for job_id, trigger in owned.triggers.items():
                point = trigger.checkpoint()
                resume = min(resume, point.resume_offset)
                if owned.stored.get(job_id) != point:
                    self.store.put(checkpoint_key(job_id, *key), point)
                    owned.stored[job_id] = point
                    stored = True
            commits.append(TopicPartition(owned.topic, owned.partition, resume))
        # 4. the checkpoints acknowledged
        if stored and not self._settled(wait):
            return
        # 5. the lowest resume offset of each partition committed
        again = "those records are read again (their runs flagged possible_duplicate)"
        self.member.commit(commits, wait=wait, then=again)

    def _settled(self, wait: bool) -> bool:
        """Everything produced acknowledged: within a second, or (``wait``) 30 s."""
        if wait:
            self.publisher.flush()
            return True
        if self.publisher.settled(1.0):
            return True
        log.warning("the broker has not acknowledged the run requests yet: the commit waits")
        return False

    # -- definitions and partitions -----------------------------------------------------
    def _apply(self, changes: list[tuple[str, Active | None]]) -> None:
        """Triggers started, changed or stopped: on the partitions owned now, and in
        the topics subscribed."""
        for job_id, active in changes:
            for owned in self.owned.values():
                self._retrigger(owned, job_id, active)
        self._subscribe()

    def _retrigger(self, owned: Owned, job_id: str, active: Active | None) -> None:
        old = owned.triggers.get(job_id)
        if active is None or active.rule.topic != owned.topic:
            if old is not None:
                del owned.triggers[job_id]
                owned.stored.pop(job_id, None)
                self.store.forget(checkpoint_key(job_id, owned.topic, owned.partition))
                self._gauge_gone(job_id, owned)
            self._tenants(owned)
            return
        if old is None:
            trigger = self._trigger(owned, active)
        elif old.rule != active.rule:  # keeps its checkpoint: open batches read again
            trigger = PartitionTrigger(
                active.rule,
                owned.partition,
                max_payload_bytes=self.max_payload,
                checkpoint=old.checkpoint(),
                replay_until=owned.replay_until,
            )
        else:
            self._tenants(owned)
            return
        owned.triggers[job_id] = trigger
        self._tenants(owned)
        if trigger.next_offset < owned.position:
            owned.position = trigger.next_offset
            retrying(
                lambda: self.consumer.seek(
                    TopicPartition(owned.topic, owned.partition, trigger.next_offset)
                )
            )

    def _trigger(self, owned: Owned, active: Active) -> PartitionTrigger:
        """A job's trigger on a partition: from its stored checkpoint, else from the
        first record stamped at or after its definition."""
        job_id = active.job.job_id
        point = self.store.get(checkpoint_key(job_id, owned.topic, owned.partition))
        if point is not None:
            owned.stored[job_id] = point
        else:
            point = Checkpoint(resume_offset=self._offset_at(owned, active.since_ms))
        return PartitionTrigger(
            active.rule,
            owned.partition,
            max_payload_bytes=self.max_payload,
            checkpoint=point,
            replay_until=owned.replay_until,
        )

    def _offset_at(self, owned: Owned, ms: int) -> int:
        """The first offset of ``owned`` stamped at or after ``ms`` (the end if none)."""
        ask = [TopicPartition(owned.topic, owned.partition, ms)]
        (found,) = retrying(lambda: self.consumer.offsets_for_times(ask, timeout=10))
        return int(found.offset) if found.offset >= 0 else owned.replay_until

    def _tenants(self, owned: Owned) -> None:
        tenants = {self.definitions.active[j].job.tenant for j in owned.triggers}
        owned.tenants = tuple(sorted(t for t in tenants if self.rates.limited(t)))

    def _subscribe(self) -> None:
        """Subscribe to the source topics that exist (and this user may see)."""
        self._next_topics = time.monotonic() + self.config.topics_every_s
        wanted = self.definitions.topics()
        existing = set(retrying(lambda: self.consumer.list_topics(timeout=10)).topics)
        for topic in sorted(wanted - existing - self.missing):
            log.warning(
                "source topic %s does not exist, or this processor may not read it "
                "(docs/event-triggers.md, Access): its triggers wait",
                topic,
            )
        self.missing = wanted - existing
        topics = tuple(sorted(wanted & existing))
        if topics == self.subscribed:
            return
        self.subscribed = topics
        if topics:
            self.member.subscribe(
                list(topics), assigned=self._assigned, revoking=self._revoking, lost=self._lost
            )
        else:
            self.consumer.unsubscribe()
        log.info("source topics: %s", ", ".join(topics) or "none")

    def _assigned(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Each partition's triggers restored; it is read from the lowest of their
        starts (the end for a partition without triggers)."""
        self.store.catch_up()
        starts = []
        for tp in partitions:
            _, high = watermarks(self.consumer, tp)
            owned = Owned(tp.topic, tp.partition, position=high, replay_until=high)
            for active in self.definitions.on_topic(tp.topic):
                owned.triggers[active.job.job_id] = self._trigger(owned, active)
            owned.position = min((t.next_offset for t in owned.triggers.values()), default=high)
            self._tenants(owned)
            self.owned[(tp.topic, tp.partition)] = owned
            starts.append(TopicPartition(tp.topic, tp.partition, owned.position))
        return starts

    def _revoking(self, partitions: list[TopicPartition]) -> None:
        keys = [k for tp in partitions if (k := (tp.topic, tp.partition)) in self.owned]
        if self.healthy:
            try:
                self.checkpoint(keys, wait=True)
            except PublishError as exc:  # the next owner reads them from the last commit
                log.warning("handing over without a final checkpoint: %s", exc)
        self._lost(partitions)

    def _lost(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            owned = self.owned.pop((tp.topic, tp.partition), None)
            if owned is not None:
                for job_id in owned.triggers:
                    self._gauge_gone(job_id, owned)

    # -- metrics ------------------------------------------------------------------------
    def _gauge(self) -> None:
        for owned in self.owned.values():
            _, high = self.consumer.get_watermark_offsets(owned.tp, cached=True)
            for job_id, trigger in owned.triggers.items():
                lag = max(0, high - trigger.next_offset) if high >= 0 else 0
                metrics.triggers_lag.labels(job_id, owned.topic, str(owned.partition)).set(lag)
                if trigger.matched:
                    self.tally.add(metrics.triggers_records_matched, job_id, count=trigger.matched)
                    trigger.matched = 0
        self.tally.apply()

    @staticmethod
    def _gauge_gone(job_id: str, owned: Owned) -> None:
        labels = (job_id, owned.topic, str(owned.partition))
        with contextlib.suppress(KeyError):  # never set
            metrics.triggers_lag.remove(*labels)

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)


def _raw(value: Any) -> bytes | None:
    """A key or header value as bytes (a fake client may hand out text)."""
    return value.encode() if isinstance(value, str) else value
