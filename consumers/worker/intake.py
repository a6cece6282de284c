"""Run requests into the worker: decoded at the edge, queued in one backlog per priority,
taken high first, and fetched only as fast as they can start.

- **Priority.** Starts take high first, then normal, then low; every ``low_share``-th
  start goes to the lowest non-empty backlog, so low priority is never starved.
- **Tenants.** Within a priority, starts go round the tenants with runs waiting
  (``FairQueue``), so one tenant's burst does not hold back another tenant's runs that
  are read.
- **Flow control.** The worker reads only what the backlogs have room for; a backlog
  that overflows anyway (every slot busy with long runs while polling goes on) pauses
  its priority's partitions, and polling goes on, so a long run never breaks group
  membership.
- **Faults.** A record that makes reading it raise (a bug its values reach; an
  undecodable or misplaced one is refused as bad input) is dead-lettered with the
  error and the partition flows (``runtime.faults``).
- **Unknown schemas.** A record written with a schema id not seen yet holds its
  partition alone while a thread asks the registry (``SchemaLookups``): the partition
  is paused and its records kept in order until the answer is in.
- **Replays.** A run already on its partition when the partition was assigned, or
  flagged ``possible_duplicate``, waits until history is read far enough to tell
  whether an earlier owner executed it (``HistoryReplay``).
- **Early runs.** A run read before its due time (the scheduler's lookahead) is held
  in ``delayed`` until then, then joins its backlog (``release_due``); its offset is
  tracked meanwhile, so no commit passes it. Past ``delay_limit`` held runs, fetching
  pauses until half of them have started.
"""

from __future__ import annotations

import functools
import time

from cronstream.consumers.core.delay import DelayQueue
from cronstream.consumers.core.fair import FairQueue
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.lookups import SchemaLookups
from cronstream.consumers.worker.outbox import Outbox
from cronstream.consumers.worker.pending import Pending
from cronstream.consumers.worker.replay import HistoryReplay
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import TopicPartition
from cronstream.runtime.kafka.records import ConsumedMessage, is_record
from cronstream.runtime.kafka.stall import Pausing
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import Priority, RunRequest, to_ms
from cronstream.schemas.ids import partition_for
from cronstream.schemas.serde import Codec

Key = tuple[str, int]  # (topic, partition)


@functools.lru_cache(maxsize=65_536)
def _home(job_id: str, partitions: int) -> int:
    """The partition of a job's runs (and outcomes): murmur2 of its id, cached (a
    pure-Python murmur2 costs about what the rest of reading a run does). Called only
    for a run that passed the limits (a job id of at most 200 characters): ~400 bytes
    an entry, ~26 MB at worst."""
    return partition_for(job_id, partitions)


def _tenant(pending: Pending) -> str:
    return pending.run.tenant


ORDER = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
REVERSED = ORDER[::-1]


class Intake:
    def __init__(
        self,
        config: WorkerConfig,
        *,
        topics: Topics,
        consumer: Pausing,
        codec: Codec,
        trackers: dict[Key, OffsetTracker],
        history: HistoryReplay,
        outbox: Outbox,
        lookups: SchemaLookups | None = None,
    ) -> None:
        self.consumer = consumer
        self.lookups = lookups
        # Partitions waiting for a schema lookup: (the schema id, their records from the
        # one that needs it on, in order). Such a partition is paused only once it has
        # kept ``limit`` records: pausing drops what librdkafka prefetched for it, which
        # is then fetched and decompressed again (the malformed-records bench paused
        # partitions 40 times in 40,000 records); a lookup takes ~5 ms, a slow
        # registry's more.
        self.waiting: dict[Key, tuple[int, list[ConsumedMessage]]] = {}
        self.codec = codec
        self.trackers = trackers  # the worker's: partition -> its runs' offsets
        self.history = history
        self.outbox = outbox
        self.low_share = config.low_share
        self.priority_of = {topics.runs(p): p for p in Priority}
        self.partition_count = {
            name: topics.partitions(spec)
            for name in self.priority_of
            if (spec := topics.spec(name)) is not None
        }
        weights = dict(config.tenant_weights)
        self.backlog: dict[Priority, FairQueue[Pending]] = {
            p: FairQueue(_tenant, weights) for p in Priority
        }
        self.paused: set[Priority] = set()
        self.delayed: DelayQueue[Pending] = DelayQueue()
        self.delay_limit = config.delay_limit
        self.delay_paused = False  # every runs partition paused: ``delayed`` is full
        self.limit = config.read_ahead  # runs read ahead of execution (the backlog's bound)
        # Per owned runs partition: (its end, history's end) as of the assignment; and
        # the partitions whose runs before that end are not all read yet.
        self.replay_until: dict[Key, tuple[int, int]] = {}
        self.replaying: set[Key] = set()
        self.starts = 0
        # A record that makes reading it raise (a bug, not a bad record: those are
        # refused above) is dead-lettered (``runtime.faults``).
        self.faults = RecordFaults("worker")

    def __len__(self) -> int:
        return sum(len(q) for q in self.backlog.values())

    # -- ownership ----------------------------------------------------------------------
    def assigned(self, key: Key, *, committed: int, runs_end: int, history_end: int) -> None:
        """``key`` is now owned, its runs read from ``committed``: runs before
        ``runs_end`` may be replays, decided once history is read to ``history_end``."""
        self.trackers[key] = OffsetTracker()
        if committed < runs_end:
            self.replaying.add(key)  # until the run at ``runs_end - 1`` is read
        self.replay_until[key] = (runs_end, history_end)

    def resume_gained(self, partitions: list[TopicPartition]) -> None:
        """New partitions of a paused priority would be fetched freely: resume that
        priority instead (``flow_control`` pauses all of it again if it overflows)."""
        for priority in {self.priority_of[tp.topic] for tp in partitions} & self.paused:
            self.consumer.resume(self._partitions(priority))
            self.paused.discard(priority)

    def drop_unstarted(self, gone: set[Key]) -> None:
        """Revoked: runs not started yet are left for the next owner to read again."""
        for queue in self.backlog.values():
            queue.keep(lambda p: (p.topic, p.partition) not in gone)
        self.delayed.keep(lambda p: (p.topic, p.partition) not in gone)
        for key in gone:
            self.waiting.pop(key, None)

    def forget(self, gone: set[Key]) -> None:
        for key in gone:
            self.trackers.pop(key, None)
            self.replay_until.pop(key, None)
            self.replaying.discard(key)

    # -- reading ------------------------------------------------------------------------
    def accept(self, msg: ConsumedMessage) -> None:
        """Queue one consumed run request (an undecodable one is dead-lettered)."""
        if not is_record(msg):
            return
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        tracker = self.trackers.get((topic, partition))
        if tracker is None:
            return
        if self._waits(msg, (topic, partition)):
            return
        run: RunRequest | None = None
        try:
            # RegistryUnavailable (the registry down, for every record) goes to the
            # loop, which holds this record and the ones after it until it is back.
            run = self.codec.decode_run(msg.value())
            reason = self._misplaced(run, topic, partition)
        except DecodeError as exc:
            reason = f"undecodable run: {exc}"
        except Exception as exc:  # a bug this record reaches: dead-lettered, not the worker
            tenant = run.tenant if run is not None else None
            reason = self.faults.fault_at(exc, msg, tenant=tenant).reason
        else:
            self.faults.ok()
        tracker.start(offset, msg.timestamp()[1])
        if reason is not None or run is None:
            self.outbox.reject(msg, offset, tracker, reason or "no run")
            return
        pending = Pending(topic, partition, offset, run, tracker)
        runs_end, history_end = self.replay_until.get((topic, partition), (0, 0))
        if offset >= runs_end - 1:
            self.replaying.discard((topic, partition))
        if offset < runs_end or run.possible_duplicate:
            # An earlier owner may have executed it (or, when flagged, the run's first
            # emission, earlier on this partition): it published the outcome before
            # this assignment. What this worker executed itself, ``dedup`` knows.
            pending.history_needed = history_end
        self._queue(pending)

    def _misplaced(self, run: RunRequest, topic: str, partition: int) -> str | None:
        """Why ``run`` cannot be taken from this partition, or None."""
        home = _home(run.job_id, self.partition_count[topic])
        if partition == home:
            return None
        # Its outcome would go to history partition ``home``, which this partition's
        # next owner does not read: history could not dedup it (found by the chaos
        # suite: records written without the job id as key ran twice).
        return (
            f"run request of job {run.job_id!r} on partition {partition}, not its "
            f"job's partition {home}: the key must be the job id, partitioned with "
            "murmur2 (the Java client's default)"
        )

    def _queue(self, pending: Pending) -> None:
        """Into its priority's backlog, or held until due (read early: the lookahead)."""
        due_at = pending.run.due_at
        if due_at is not None:
            due = to_ms(due_at)
            if due > time.time() * 1000:
                self.delayed.push(due, pending)
                return
        self.backlog[self.priority_of[pending.topic]].append(pending)

    def release_due(self, now_ms: float) -> int:
        """Held runs whose due time came join their backlogs; returns how many."""
        due = self.delayed.pop_due(int(now_ms))
        priority_of, backlog = self.priority_of, self.backlog
        for pending in due:
            backlog[priority_of[pending.topic]].append(pending)
        return len(due)

    def wait_s(self, now_ms: float, longest: float) -> float:
        """How long the loop may wait for input before a held run is due."""
        next_due = self.delayed.next_due()
        if next_due is None:
            return longest
        return max(0.0, min(longest, (next_due - now_ms) / 1000))

    def _waits(self, msg: ConsumedMessage, key: Key) -> bool:
        """Whether ``msg`` is kept for a schema lookup (its own, or an earlier record's
        of its partition)."""
        waiting = self.waiting.get(key)
        if waiting is not None:
            kept = waiting[1]
            kept.append(msg)
            if len(kept) % self.limit == 0:  # a slow lookup: fetch no more of it
                self.consumer.pause([TopicPartition(*key)])
            return True
        if self.lookups is None:
            return False
        schema_id = self.codec.unknown_id(msg.value())
        if schema_id is None or not self.lookups.wait_for(schema_id):
            return False
        self.waiting[key] = (schema_id, [msg])
        return True

    def looked_up(self) -> list[ConsumedMessage]:
        """The records kept for schema lookups that are over, to be accepted again in
        order; a partition paused for one is fetched again (unless its priority is
        paused)."""
        if not self.waiting:
            return []
        assert self.lookups is not None
        out: list[ConsumedMessage] = []
        for key, (schema_id, kept) in list(self.waiting.items()):
            if self.lookups.answered(schema_id):
                del self.waiting[key]
                if len(kept) >= self.limit and self.priority_of[key[0]] not in self.paused:
                    self.consumer.resume([TopicPartition(*key)])
                out.extend(kept)
        return out

    def take(self) -> Pending | None:
        """The next run to start, by priority, among those history lets through."""
        self.starts += 1
        # Every low_share-th start, the lowest non-empty backlog gets it.
        order = REVERSED if self.starts % self.low_share == 0 else ORDER
        ready = self.history.ready
        for priority in order:
            queue = self.backlog[priority]
            head = queue.peek()
            if head is not None and ready(head):
                return queue.popleft()
        return None

    def waiting_for_history(self) -> bool:
        return any(p.history_needed is not None for q in self.backlog.values() for p in q)

    def flow_control(self, waiting: int = 0) -> None:
        """Pause a priority whose backlog overflows (every slot busy with long runs while
        polling goes on reads one run per step); resume it once the backlog is back to
        what fetching fills. Pausing drops what librdkafka prefetched, so it is kept for
        that case only. ``waiting``: runs read and taken from the backlog that wait for
        their destination's slot, read ahead all the same (a busy destination must not
        draw the topic out of this bound)."""
        if self._delay_control():
            return
        limit = self.limit
        for priority, queue in self.backlog.items():
            if priority not in self.paused and len(queue) + waiting < 2 * limit:
                continue
            parts = self._partitions(priority)
            if not parts:
                continue
            if priority not in self.paused:
                self.consumer.pause(parts)
                self.paused.add(priority)
            elif len(queue) + waiting < limit:
                self.consumer.resume(parts)
                self.paused.discard(priority)

    def _delay_control(self) -> bool:
        """Pause every runs partition while ``delay_limit`` runs are held (again on
        each call: one gained or resumed meanwhile too); resume them, but a priority
        paused for its backlog, once half of those started. True while paused."""
        held = len(self.delayed)
        if held >= self.delay_limit or (self.delay_paused and held >= self.delay_limit // 2):
            self.consumer.pause([TopicPartition(t, p) for (t, p) in self.trackers])
            self.delay_paused = True
            return True
        if self.delay_paused:
            self.delay_paused = False
            for priority in Priority:
                if priority not in self.paused:
                    self.consumer.resume(self._partitions(priority))
        return False

    def _partitions(self, priority: Priority) -> list[TopicPartition]:
        return [
            TopicPartition(t, p)
            for (t, p) in self.trackers
            if self.priority_of.get(t) is priority and (t, p) not in self.waiting
        ]
