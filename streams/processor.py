"""The scheduler processor: owns partitions of cronstream.jobs and fires their runs.

One process runs one ``Processor``. It joins the scheduler consumer group on the jobs
topic (cooperative-sticky, so a membership change moves only the partitions it must);
for every jobs partition it owns it also reads the same partition of the timers topic
(co-partitioned by job id), and keeps a ``PartitionScheduler`` (the pure core). The loop
is two lines of substance: read what arrived, then emit what ``due(now)`` returns.

On assignment a partition is *loading*: the jobs partition is read from its beginning
to the end offset seen at assignment (the compacted topic is the source of truth), the
checkpoint is read from the group's committed offset metadata, and every definition is
recovered against it (misfire policy for what came due meanwhile). Then it is *live*:
definitions apply within one loop iteration (well under a second) and due runs fire.

Run requests go out through a confluent-kafka producer with pre-encoded templates
(``schemas.templates``); MISSED/SKIPPED slots go to the history topic; records that
cannot be read go to the DLQ with topic/partition/offset and the partition keeps flowing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)

from cronstream import metrics
from cronstream.connect import group_consumer, kafka_consumer
from cronstream.records import dead_letter, dead_letter_for, is_record
from cronstream.settings import Settings
from producers.publisher import Publisher
from schemas.catalog import Topics
from schemas.events import (
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    RunStatus,
    TimerRequest,
    Trigger,
    from_ms,
    iso,
    to_ms,
)
from schemas.ids import run_id_for
from schemas.registry import RegistryClient
from schemas.serde import Codec, DecodeError
from schemas.templates import RunTemplate
from streams.core.cron import CronError, ZoneError
from streams.core.misfire import Action, Fire, Record
from streams.core.partition import NEVER, PartitionScheduler, Timer
from streams.core.schedule import JobSchedule, Misfire

log = logging.getLogger("cronstream.scheduler")
STAGE = "scheduler"
# Wheel entries fired per partition per loop iteration at most: under overload the loop
# still reads definitions and checkpoints (every few hundred milliseconds at worst).
FIRE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a partition's owner had done, stored as the committed offset's metadata.

    ``fired_through``: every due time <= it was emitted. ``jobs_offset``: definitions
    below it had been applied. ``timers_from``: the lowest timers offset still pending
    (re-read from there). ``timers_offset``: timers below it had been read.
    """

    fired_through: int
    jobs_offset: int
    timers_from: int
    timers_offset: int

    def to_metadata(self) -> str:
        return json.dumps(
            {
                "v": 1,
                "w": self.fired_through,
                "j": self.jobs_offset,
                "tf": self.timers_from,
                "t": self.timers_offset,
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_metadata(cls, text: str | None) -> Checkpoint | None:
        if not text:
            return None
        try:
            d = json.loads(text)
            return cls(int(d["w"]), int(d["j"]), int(d["tf"]), int(d["t"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable scheduler checkpoint %r", text)
            return None


@dataclass(slots=True)
class Prepared:
    """A job's body once it is within the horizon: raw definition plus its run template."""

    raw: bytes
    template: RunTemplate


@dataclass(slots=True)
class Owned:
    partition: int
    core: PartitionScheduler
    checkpoint: Checkpoint | None
    load_end: int
    loading: bool = True
    started: float = field(default_factory=time.monotonic)
    # job id -> (offset, timestamp, value, an earlier live version exists) while loading
    pending: dict[str, tuple[int, int, bytes | None, bool]] = field(default_factory=dict)
    jobs_next: int = 0
    timers_next: int = 0


@dataclass(frozen=True, slots=True)
class ProcessorConfig:
    group: str
    threshold_ms: int = 60_000
    checkpoint_ms: int = 1_000
    horizon_ms: int = 60_000
    tick_ms: int = 10
    session_timeout_ms: int = 10_000
    name: str = "scheduler"


class Processor:
    def __init__(
        self,
        settings: Settings,
        config: ProcessorConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.config = config
        self.topics = Topics(settings)
        self.clock = clock
        self.codec = Codec(RegistryClient(settings.registry_url))
        self.publisher = Publisher(settings, codec=self.codec)
        self.owned: dict[int, Owned] = {}
        self._misfires: dict[tuple[str, int, int], Misfire] = {}
        self._iso: dict[int, tuple[str, bytes]] = {}
        self._run_schema = {p: self.codec.writer_id(f"{self.topics.runs(p)}-value", RunRequest)
                            for p in Priority}  # fmt: skip
        self._runs_topic = {p: self.topics.runs(p) for p in Priority}
        self._next_checkpoint = 0.0
        # False once the loop failed (e.g. a delivery error): from then on no checkpoint
        # may claim what was emitted, not even the one a handover would take.
        self._healthy = True
        self.consumer = group_consumer(
            settings,
            group=config.group,
            name=config.name,
            session_timeout_ms=config.session_timeout_ms,
            **{"enable.partition.eof": True},  # the end of a partition ends its loading
        )
        self.timers: Consumer = kafka_consumer(
            settings, **{"group.id": f"{config.group}.timers", "client.id": config.name}
        )
        self.consumer.subscribe(
            [self.topics.jobs],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    # -- ownership ----------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not partitions:
            return
        committed = consumer.committed(partitions, timeout=30)
        starts, timer_starts = [], []
        for tp in committed:
            checkpoint = Checkpoint.from_metadata(tp.metadata)
            low, high = consumer.get_watermark_offsets(tp, timeout=30, cached=False)
            fired_through = checkpoint.fired_through if checkpoint else self._now_ms()
            owned = Owned(
                partition=tp.partition,
                core=PartitionScheduler(
                    tp.partition,
                    fired_through=fired_through,
                    threshold_ms=self.config.threshold_ms,
                    tick_ms=self.config.tick_ms,
                    horizon_ms=self.config.horizon_ms,
                ),
                checkpoint=checkpoint,
                load_end=high,
                jobs_next=low,
            )
            owned.core.wheel.on_near = self._near_hook(owned)
            self.owned[tp.partition] = owned
            starts.append(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))
            timers_from = checkpoint.timers_from if checkpoint else OFFSET_BEGINNING
            timer_starts.append(TopicPartition(self.topics.timers, tp.partition, timers_from))
            if checkpoint:
                owned.timers_next = checkpoint.timers_from
            log.info(
                "partition %d assigned: reading %d definitions, checkpoint %s",
                tp.partition,
                high - low,
                checkpoint,
            )
            if high <= low:
                self._finish_loading(owned)
        consumer.incremental_assign(starts)
        self.timers.incremental_assign(timer_starts)
        self._gauge_partitions()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        live = [self.owned[tp.partition] for tp in partitions if tp.partition in self.owned]
        self.checkpoint([o for o in live if not o.loading], consumer=consumer)
        self._drop(partitions)
        consumer.incremental_unassign(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.warning(
            "partitions %s lost without a clean handover", [p.partition for p in partitions]
        )
        self._drop(partitions)
        consumer.incremental_unassign(partitions)

    def _drop(self, partitions: list[TopicPartition]) -> None:
        gone = [self.owned.pop(tp.partition) for tp in partitions if tp.partition in self.owned]
        if gone:
            self.timers.incremental_unassign(
                [TopicPartition(self.topics.timers, o.partition) for o in gone]
            )
            log.info("partitions %s handed over", [o.partition for o in gone])
        self._gauge_partitions()

    # -- the loop -----------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        try:
            while not should_stop():
                self.step()
        except BaseException:
            self._healthy = False
            raise
        finally:
            self.close()

    def step(self) -> None:
        """One iteration: apply what arrived, then fire what is due."""
        live = any(not o.loading for o in self.owned.values())
        for msg in self.consumer.consume(num_messages=5000, timeout=0.005 if live else 0.1):
            self._on_jobs_record(msg)
        if self.owned:
            for msg in self.timers.consume(num_messages=2000, timeout=0):
                self._on_timer_record(msg)
        now = self._now_ms()
        for owned in list(self.owned.values()):
            if not owned.loading:
                self._emit(owned.core.due(now, FIRE_BATCH), now)
        self.publisher.producer.poll(0)
        if time.monotonic() >= self._next_checkpoint:
            self.checkpoint([o for o in self.owned.values() if not o.loading])
            self._gauge_state()

    def checkpoint(self, partitions: list[Owned], *, consumer: Consumer | None = None) -> None:
        """Make the partitions' progress durable. The procedure, in order:

        1. Snapshot each partition's checkpoint (fired-through, jobs and timers offsets).
        2. Flush the producer: every run request and history record emitted up to the
           snapshot is acknowledged by Kafka (a delivery failure raises here).
        3. Commit the snapshot as the jobs partitions' offsets with the checkpoint as
           metadata (synchronously; a fenced commit after losing the group raises).

        A crash before step 3, or a commit the group refuses (rebalance in progress,
        partition already moved), leaves the previous checkpoint: the next owner re-emits
        from there, flagged ``possible_duplicate``. Nothing is skipped.
        """
        self._next_checkpoint = time.monotonic() + self.config.checkpoint_ms / 1000
        if not partitions or not self._healthy:
            return
        # 1. snapshot
        offsets = []
        for owned in partitions:
            lowest = owned.core.lowest_pending_timer()
            snap = Checkpoint(
                fired_through=owned.core.fired_through,
                jobs_offset=owned.jobs_next,
                timers_from=owned.timers_next if lowest is None else lowest,
                timers_offset=owned.timers_next,
            )
            offsets.append(
                TopicPartition(
                    self.topics.jobs,
                    owned.partition,
                    max(owned.jobs_next, 0),
                    snap.to_metadata(),
                )
            )
        # 2. flush
        try:
            self.publisher.flush()
        except BaseException:
            self._healthy = False
            raise
        # 3. commit
        try:
            (consumer or self.consumer).commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            # Mid-rebalance or fenced: the partitions may already be someone else's. The
            # previous checkpoint stands; the next owner re-emits from it, flagged.
            log.warning("checkpoint not committed (%s); the previous one stands", exc)
            metrics.checkpoint_failures.inc()

    def close(self) -> None:
        """Hand every partition over: final checkpoint (unless the loop failed), leave
        the group."""
        try:
            self.checkpoint([o for o in self.owned.values() if not o.loading])
        finally:
            self.consumer.close()  # runs _on_revoke for what is still owned
            self.timers.close()
            self.publisher.close()

    # -- input --------------------------------------------------------------------------
    def _on_jobs_record(self, msg: Message) -> None:
        if not is_record(msg):
            # The end of the partition: loading is complete even when the last offsets
            # are gone (compacted tombstones, transaction markers).
            eof = self.owned.get(msg.partition() or 0)
            if eof is not None and eof.loading:
                self._finish_loading(eof)
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
            earlier = owned.pending.get(key)
            replaced = earlier is not None and earlier[2] is not None
            owned.pending[key] = (offset, msg.timestamp()[1], msg.value(), replaced)
            if owned.jobs_next >= owned.load_end:
                self._finish_loading(owned)
            return
        value = msg.value()
        if value is None:
            owned.core.delete(key)
            return
        job = self._schedule(key, value, partition=owned.partition, offset=offset)
        if job is not None:
            now = self._now_ms()
            self._emit(owned.core.put(job, now=now), now)

    def _finish_loading(self, owned: Owned) -> None:
        now = self._now_ms()
        checkpoint = owned.checkpoint
        core = owned.core
        loaded = 0
        for key, (offset, arrived, value, replaced) in owned.pending.items():
            if value is None:
                continue
            job = self._schedule(key, value, partition=owned.partition, offset=offset)
            if job is None:
                continue
            known = checkpoint is not None and offset < checkpoint.jobs_offset
            actions = core.recover(job, now=now, known=known, arrived_ms=arrived, replaced=replaced)
            self._emit(actions, now)
            loaded += 1
        owned.pending = {}
        owned.loading = False
        log.info(
            "partition %d live: %d jobs in %.1fs, fired through %s",
            owned.partition,
            loaded,
            time.monotonic() - owned.started,
            iso(from_ms(core.fired_through)),
        )
        self._gauge_partitions()

    def _on_timer_record(self, msg: Message) -> None:
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
            self._dead_letter(
                dead_letter_for(msg, stage=STAGE, reason=f"undecodable timer request: {exc}")
            )
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
            possible_duplicate=due <= self._now_ms(),
        )
        owned.core.add_timer(
            timer, fired_through=checkpoint.fired_through if known and checkpoint else NEVER
        )

    def _key(self, msg: Message) -> str | None:
        raw = msg.key()
        try:
            if raw:
                return raw.decode() if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError:
            pass
        self._dead_letter(
            dead_letter_for(msg, stage=STAGE, reason="record key is not a UTF-8 job id")
        )
        return None

    def _schedule(
        self, key: str, value: bytes, *, partition: int, offset: int
    ) -> JobSchedule | None:
        """The core's view of a definition, or None after dead-lettering a bad one."""
        try:
            d = self.codec.decode_record(value, JobDefinition)
            if d["job_id"] != key:
                raise DecodeError(f"record key {key!r} differs from job_id {d['job_id']!r}")
            return self._job_schedule(d, value)
        except (DecodeError, CronError, ZoneError) as exc:
            reason = f"invalid job definition: {exc}"
        self._dead_letter(
            dead_letter(
                stage=STAGE,
                reason=reason,
                topic=self.topics.jobs,
                partition=partition,
                offset=offset,
                key=key.encode(),
                value=value,
            )
        )
        return None

    def _job_schedule(self, d: dict[str, Any], raw: bytes) -> JobSchedule:
        schedule = d["schedule"]
        kwargs: dict[str, Any] = {}
        if schedule is not None:
            name, rec = schedule
            short = name.rsplit(".", 1)[-1]
            if short == "CronSchedule":
                kwargs["cron"] = rec["expression"]
            elif short == "IntervalSchedule":
                if rec["every_ms"] <= 0:
                    raise DecodeError(f"interval every_ms={rec['every_ms']} is not positive")
                kwargs["every_ms"] = rec["every_ms"]
                kwargs["anchor_ms"] = _ms(rec["anchor"])
            elif short == "OnceSchedule":
                kwargs["at_ms"] = _ms(rec["at"])
        m = d["misfire"]
        key = (m["policy"], m["max_catchup"], m["catchup_window_ms"])
        misfire = self._misfires.get(key)
        if misfire is None:
            misfire = self._misfires[key] = Misfire(*key)
        return JobSchedule(
            d["job_id"],
            timezone=d["timezone"],
            start_ms=None if d["start_at"] is None else _ms(d["start_at"]),
            end_ms=None if d["end_at"] is None else _ms(d["end_at"]),
            jitter_ms=d["jitter_ms"],
            paused=d["paused"],
            misfire=misfire,
            body=raw,
            **kwargs,
        )

    def _near_hook(self, owned: Owned) -> Callable[[Any], None]:
        jobs = owned.core.jobs

        def on_near(item: Any) -> None:
            if type(item) is tuple:
                job = jobs.get(item[0])
                if job is not None and job.gen == item[1]:
                    self._prepare(job)

        return on_near

    def _prepare(self, job: JobSchedule) -> Prepared:
        body = job.body
        if type(body) is Prepared:
            return body
        definition = self.codec.decode(body, JobDefinition)
        prepared = Prepared(raw=body, template=RunTemplate(definition))
        job.body = prepared
        return prepared

    # -- output -------------------------------------------------------------------------
    def _emit(self, actions: list[Action], now: int) -> None:
        if not actions:
            return
        produce = self.publisher.produce_raw
        skew = metrics.fire_skew.observe
        fired: dict[Trigger, int] = {}
        for action in actions:
            if type(action) is Fire:
                if action.timer is not None:
                    self._fire_timer(action, now)
                    continue
                assert action.job is not None
                prepared = self._prepare(action.job)
                template = prepared.template
                run_id, sched = self._run_id(action.job_id, action.slot_ms)
                trigger = Trigger(action.trigger)
                value = template.encode(
                    self._run_schema[template.priority],
                    run_id,
                    action.slot_ms,
                    now,
                    trigger=trigger,
                    possible_duplicate=action.possible_duplicate,
                )
                headers = [
                    ("event", b"RunRequest"),
                    ("job_id", template.header_job),
                    ("run_id", run_id.encode()),
                    ("scheduled_at", sched),
                    ("attempt", b"1"),
                    ("status", b"REQUESTED"),
                    ("trigger", trigger.value.encode()),
                ]
                if action.possible_duplicate:
                    headers.append(("possible_duplicate", b"true"))
                produce(self._runs_topic[template.priority], action.job_id, value, headers)
                fired[trigger] = fired.get(trigger, 0) + 1
                skew(max(0, now - action.due_ms) / 1000)
            else:
                assert type(action) is Record
                self._record(action, now)
        for trigger, count in fired.items():  # one labelled update per batch, not per fire
            metrics.fires.labels(trigger.value).inc(count)

    def _fire_timer(self, action: Fire, now: int) -> None:
        request: TimerRequest = action.timer.body
        run = replace(
            request.run,
            fired_at=from_ms(now),
            possible_duplicate=request.run.possible_duplicate or action.possible_duplicate,
        )
        self.publisher.publish(self.topics.runs(run.priority), run)
        metrics.fires.labels(run.trigger.value).inc()
        metrics.fire_skew.observe(max(0, now - action.due_ms) / 1000)

    def _record(self, action: Record, now: int) -> None:
        if action.timer is not None:
            run: RunRequest = action.timer.body.run
            run_id, scheduled, attempt, trigger = (
                run.run_id,
                run.scheduled_at,
                run.attempt,
                run.trigger,
            )
            tenant = run.tenant
        else:
            run_id = run_id_for(action.job_id, from_ms(action.slot_ms))
            scheduled, attempt, trigger = from_ms(action.slot_ms), 1, Trigger.SCHEDULE
            tenant = "default"
        outcome = RunOutcome(
            run_id=run_id,
            job_id=action.job_id,
            status=RunStatus(action.status),
            scheduled_at=scheduled,
            recorded_at=from_ms(now),
            attempt=attempt,
            trigger=trigger,
            error=action.reason,
            worker=self.config.name,
            tenant=tenant,
        )
        self.publisher.publish(self.topics.history, outcome)
        metrics.misfires.labels(action.status).inc()

    def _run_id(self, job_id: str, slot_ms: int) -> tuple[str, bytes]:
        cached = self._iso.get(slot_ms)
        if cached is None:
            if len(self._iso) > 4096:
                self._iso.clear()
            text = iso(from_ms(slot_ms))
            cached = self._iso[slot_ms] = (text, text.encode())
        return f"{job_id}@{cached[0]}", cached[1]

    def _dead_letter(self, letter: DeadLetter) -> None:
        log.warning(
            "dead-lettering %s/%d@%d: %s",
            letter.source_topic, letter.source_partition, letter.source_offset, letter.reason,
        )  # fmt: skip
        self.publisher.publish(self.topics.dlq, letter)

    # -- state --------------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _gauge_partitions(self) -> None:
        loading = sum(1 for o in self.owned.values() if o.loading)
        metrics.partitions_owned.labels("loading").set(loading)
        metrics.partitions_owned.labels("live").set(len(self.owned) - loading)

    def _gauge_state(self) -> None:
        cores = [o.core for o in self.owned.values()]
        metrics.jobs_loaded.set(sum(len(c.jobs) for c in cores))
        metrics.wheel_items.labels("near").set(sum(c.wheel.near for c in cores))
        metrics.wheel_items.labels("far").set(sum(c.wheel.far for c in cores))
        metrics.timers_pending.set(sum(len(c.timers) for c in cores))


def _ms(value: datetime | int) -> int:
    return value if isinstance(value, int) else to_ms(value)
