"""The dependency processor (``after:``): `cronstream dependencies`. A job
that comes after others runs once they all succeeded for a date, as ``JOB@dep:<date>``
(what counts, and when, is the pure core's: ``streams.core.dependencies``).

It reads two topics whole, by assignment (no partition is anyone else's): ``jobs``, for
the dependents (``after:``; each checked again with ``problems`` and the tenants' rule
``source_problems``, a refused one dead-lettered, its last good definition kept, as the
scheduler does), and ``history``, whose outcomes complete dates. A dependent's upstream
jobs are on any partition, so one process reads every partition; a second one would emit
the same run ids (the workers run each once) and is only a spare. Offsets are committed
to the group ``<prefix>.dependencies``, without joining it.

**Commit procedure** (each loop, ``step``): (1) read a batch of jobs and history records
and apply them to the core in order; (2) when a dependent names jobs whose dates were not
kept (a new dependent, or new upstream jobs), read the history topic again from its
start for those jobs and the dependent itself, then (3) produce every run the core fired
to ``runs.<priority>`` and every refusal to the DLQ; (4) flush (all acknowledged); (5) at
most every ``commit_ms``, commit the next offsets of both topics, synchronously. So at a
commit, every run that the definitions and outcomes before the committed offsets make
due has been written.

**Tenants' fire rates.** A tenant's ``@dep:`` runs go through its fire rate
(``--tenant-fires-per-second``, the scheduler's): beyond it they are held in memory
(``streams.core.rates.Held``) and emitted at the rate, never dropped (a dependent
deleted meanwhile runs nothing). While any run is held, the commit stays at the offsets
read when none was (``clear``): a crash or a stop then reads again what decided the held
runs and decides them again (flagged, as at every start). Held runs are one per
dependent and date, so the commit waits at most what the tenant's runs take to leave.

**Start** (``start``), the state rebuilt from the topics: the definitions before the
committed offsets, then the history before them (what these make due was written
before the commit: dropped); then the definitions after them (refusals dead-lettered)
and the history after them, to the topics' ends as of the start. The runs these fire
are emitted once that read is done, flagged ``possible_duplicate`` (the crash may have
come after their writing), except those whose own outcome was read meanwhile (the
dependent's ``@dep:`` runs mark their dates run, whatever their status). A run written
before a crash and emitted again has the same run id: the worker that gets the second
request runs it once (docs/event-triggers.md, "The dependency processor").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from cronstream.runtime import metrics
from cronstream.runtime.faults import RecordFaults
from cronstream.runtime.kafka.clients import TopicPartition, consume_ready, kafka_consumer
from cronstream.runtime.kafka.member import commit
from cronstream.runtime.kafka.offsets import committed, consumer_lag, offset_since, watermarks
from cronstream.runtime.kafka.records import ConsumedMessage, dead_letter_for, is_record, text_key
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.runtime.waiting import learn_writers, sleeping
from cronstream.schemas.catalog import Topics
from cronstream.schemas.errors import DecodeError
from cronstream.schemas.events import (
    DeadLetter,
    JobDefinition,
    Priority,
    RunOutcome,
    RunRequest,
    Trigger,
    from_ms,
    to_ms,
    utc_now,
)
from cronstream.schemas.serde import Codec
from cronstream.streams.core.dependencies import Dependencies, DependencyRun
from cronstream.streams.core.rates import Held, TenantRates
from cronstream.streams.dependencies.reading import STAGE, Range, judge, read_range

log = logging.getLogger("cronstream.dependencies")
GAUGES_EVERY_S = 5.0
READ_AGAIN_MARGIN_MS = 3_600_000  # ``read_from_ms``

Runs = list[DependencyRun]


@dataclass(frozen=True, slots=True, kw_only=True)
class DependencyConfig:
    group: str
    name: str
    commit_ms: int = 1000
    batch: int = 1000
    # A tenant's runs per second (0: no limit) and per-tenant exceptions, as the
    # scheduler's: the excess is held and emitted at the rate. Tenant "default" is free.
    tenant_fire_rate: float = 0.0
    tenant_fire_rates: tuple[tuple[str, float], ...] = ()


class DependencyProcessor:
    clock: Callable[[], datetime] = staticmethod(utc_now)  # a test's virtual clock

    def __init__(self, settings: Settings, config: DependencyConfig) -> None:
        from cronstream.runtime.kafka.publisher import Publisher

        self.settings, self.config = settings, config
        self.topics = Topics(settings)
        self.codec = Codec(registry_client(settings))
        for topic, kind in (
            (self.topics.dlq, DeadLetter),
            *((self.topics.runs(p), RunRequest) for p in Priority),
        ):
            self.codec.writer_id(f"{topic}-value", kind)  # resolved at start, not mid-run
        self.publisher = Publisher(settings, codec=self.codec)
        self.live = kafka_consumer(settings, **{"group.id": config.group, "client.id": config.name})
        self.reader = kafka_consumer(settings, **{"client.id": f"{config.name}-reader"})
        self.stop: Callable[[], bool] = lambda: False
        self.fresh()

    def fresh(self) -> None:
        """The state before anything is read (everything but the clients)."""
        self.deps = Dependencies()
        self.jobs: dict[str, JobDefinition] = {}  # the dependents' definitions
        self.late: set[str] = set()  # jobs whose history is to be read again (``unknown``)
        self.late_from_ms: int | None = None  # from when (``read_from_ms``)
        self.pending: dict[str, DependencyRun] = {}  # runs emitted once a read is done
        self.positions: dict[tuple[str, int], int] = {}  # the next offsets read live
        self.done: dict[tuple[str, int], int] = {}  # the offsets last committed
        # The offsets read when no run was held: what a commit may claim (``_commit``).
        self.clear: dict[tuple[str, int], int] = {}
        rates = TenantRates(self.config.tenant_fire_rate, overrides=self.config.tenant_fire_rates)
        self.held: Held[tuple[DependencyRun, bool]] = Held(rates)
        self.letters = True  # dead-letter refusals (not for records before the commit)
        self.faults = RecordFaults(STAGE)
        self._keys: set[bytes] | None = None
        self._queued = 0  # records produced since the last flush
        self._committed_at = self._gauges_at = 0.0

    # -- the loop ---------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool]) -> None:
        self.stop = should_stop
        metrics.PROBES.set_ready(False)
        clean = False
        try:
            self.start()
            metrics.PROBES.set_ready(True)
            while not should_stop():
                self.step()
            clean = True
        except StopWaiting:  # mid-read: nothing after the last commit is committed
            log.warning("stopped while reading; the next start reads again from the commit")
        finally:
            if clean:
                self.publisher.flush()
                self._commit()
            self.live.close()
            self.reader.close()
            self.publisher.close()

    def start(self) -> None:
        """The state rebuilt (the module's text), the owed runs emitted, then committed;
        the live reading begins at the ends as of now."""
        jobs, history = self.topics.jobs, self.topics.history
        marks = {
            (t, p): watermarks(self.reader, TopicPartition(t, p))
            for t in (jobs, history)
            for p in self._partitions(t)
        }
        wanted = [TopicPartition(t, p) for t, p in marks]
        done = {(tp.topic, tp.partition): max(0, tp.offset) for tp in committed(self.live, wanted)}
        low = {where: m[0] for where, m in marks.items()}
        end = {where: m[1] for where, m in marks.items()}

        def ranges(
            topic: str, start: dict[tuple[str, int], int] | None, stop: dict[tuple[str, int], int]
        ) -> list[Range]:
            return [
                Range(t, p, max(low[(t, p)], start[(t, p)] if start else 0), stop[(t, p)])
                for t, p in marks
                if t == topic
            ]

        self.letters = False  # before the commit: what they fired and refused was written
        self._read(ranges(jobs, None, done), self._definition, keys=None)
        self.late.clear()
        self.late_from_ms = None
        self._read(ranges(history, None, done), self._observed, keys=self._interest())
        self.pending.clear()
        self.letters = True
        self._read(ranges(jobs, done, end), self._definition, keys=None)
        if self.late:  # dependents defined since: their jobs' history before the commit
            self._read_late(until=done)
        self._read(ranges(history, done, end), self._observed, keys=self._interest())
        owed = list(self.pending.values())
        self.pending.clear()
        self.positions, self.done, self.clear = dict(end), done, dict(done)
        self._emit(owed, flagged=True)
        self.publisher.flush()
        self._queued = 0
        self._commit()
        self.live.assign([TopicPartition(t, p, o) for (t, p), o in end.items()])
        log.info(
            "dependency processor %s: %d dependents, %d dates waiting, %d runs owed at "
            "start emitted",
            self.config.name,
            len(self.jobs),
            self.deps.waiting_dates(),
            len(owed),
        )

    def step(self, timeout: float = 0.2) -> int:
        """One turn of the commit procedure (the module's text); the records read."""
        messages = [m for m in consume_ready(self.live, self.config.batch, timeout) if is_record(m)]
        keys = self._interest()
        wanted = [m for m in messages if m.topic() == self.topics.jobs or m.key() in keys]
        learn_writers(
            self.codec,
            wanted,
            what=f"dependency processor {self.config.name}",
            log=log,
            pause=sleeping(self.stop),
        )
        runs: Runs = []
        for msg in messages:
            if msg.topic() == self.topics.jobs:
                self._definition(msg)  # its runs wait in ``pending`` (``_definition``)
            elif msg.key() in keys:
                runs += self._outcome(msg)
            self.positions[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
        flagged = bool(self.late)
        if self.late:
            self._read_late()
        runs += self.pending.values()
        self.pending.clear()
        self._emit(runs, flagged=flagged)
        if self._queued:
            self.publisher.flush()
            self._queued = 0
        now = time.monotonic()
        if now - self._committed_at >= self.config.commit_ms / 1000:
            self._commit()
        if now - self._gauges_at >= GAUGES_EVERY_S:
            self._gauges_at = now
            self._gauges()
        return len(messages)

    def _gauges(self) -> None:
        metrics.count_deferred(self.held.rates.drain_deferred())
        metrics.dependency_dependents.set(len(self.jobs))
        metrics.dependency_waiting.set(self.deps.waiting_dates())
        history = [TopicPartition(t, p) for t, p in self.positions if t == self.topics.history]
        metrics.dependency_lag.set(sum(lag for _, lag in consumer_lag(self.live, history)))

    def _read_late(self, until: dict[tuple[str, int], int] | None = None) -> None:
        """The history topic read again for the jobs ``late`` names (what was kept of
        none of them: ``Dependencies.unknown``), from ``late_from_ms`` to ``until`` (the
        end as of now by default)."""
        history, since = self.topics.history, self.late_from_ms or 0
        ranges = []
        for p in self._partitions(history):
            low, high = watermarks(self.reader, TopicPartition(history, p))
            end = high if until is None else until[(history, p)]
            start = max(low, offset_since(self.reader, history, p, since)) if since else low
            ranges.append(Range(history, p, start, end))
        log.info(
            "reading history again for %d jobs (%s) from %s",
            len(self.late),
            ", ".join(sorted(self.late)[:5]),
            from_ms(since).isoformat(),
        )
        self._read(ranges, self._observed, keys=self._late_keys())
        self.late.clear()
        self.late_from_ms = None

    # -- records ----------------------------------------------------------------------------
    def _read(
        self,
        ranges: list[Range],
        handle: Callable[[ConsumedMessage], None],
        *,
        keys: set[bytes] | None,
    ) -> None:
        """``ranges`` read with the reader (``keys``: only those records)."""
        read_range(
            self.reader,
            ranges,
            handle,
            codec=self.codec,
            keys=keys,
            stop=self.stop,
            pause=sleeping(self.stop),
        )

    def _observed(self, msg: ConsumedMessage) -> None:
        """A history record read again: the runs it fires wait in ``pending``."""
        for run in self._outcome(msg):
            self.pending[run.run_id] = run

    def _definition(self, msg: ConsumedMessage) -> None:
        """A jobs record applied. The runs a definition fires at once (its upstream jobs'
        dates kept already) wait in ``pending``, so that a history read the definition
        calls for (``late``) can find them run already."""
        key = text_key(msg.key()) or ""
        try:
            verdict = judge(
                self.codec, key, msg.value(), max_payload_bytes=self.settings.max_payload_bytes
            )
            if verdict.refused is not None:
                self._refuse(dead_letter_for(msg, stage=STAGE, reason=verdict.refused))
            elif verdict.job is not None:
                unknown = self.deps.unknown(verdict.job)
                if unknown:
                    self.late |= unknown
                    start = read_from_ms(verdict.job)
                    self.late_from_ms = min(self.late_from_ms or start, start)
                self.jobs[key] = verdict.job
                self._keys = None
                for run in self.deps.define(verdict.job):
                    self.pending[run.run_id] = run
            elif not verdict.unreadable:
                self._forget(key)
        except Exception as exc:  # a bug this record reaches: dead-lettered, we go on
            fault = self.faults.fault_at(exc, msg)
            self._refuse(fault.letter(STAGE, value=msg.value()))
            self._forget(key)  # whatever the call left of it (as the scheduler drops it)
        else:
            self.faults.ok()

    def _forget(self, key: str) -> None:
        if self.jobs.pop(key, None) is not None:
            self.deps.forget(key)
            self._keys = None
            for run_id in [r for r, run in self.pending.items() if run.job_id == key]:
                del self.pending[run_id]

    def _outcome(self, msg: ConsumedMessage) -> Runs:
        """A history record observed: the runs it completes a date for. One that is not
        a RunOutcome is skipped (the history sink dead-letters it)."""
        try:
            outcome = self.codec.decode(msg.value(), RunOutcome)
        except DecodeError:
            return []
        self.pending.pop(outcome.run_id, None)  # emitted before: its outcome says so
        try:
            runs = self.deps.observe(outcome)
        except Exception as exc:  # a bug this record reaches: dead-lettered, we go on
            fault = self.faults.fault_at(exc, msg, tenant=outcome.tenant)
            self._refuse(fault.letter(STAGE, value=msg.value(), run_id=outcome.run_id))
            return []
        self.faults.ok()
        return runs

    def _refuse(self, letter: DeadLetter) -> None:
        log.warning(
            "%s[%s]@%s (job %s) refused: %s",
            letter.source_topic,
            letter.source_partition,
            letter.source_offset,
            letter.job_id,
            letter.reason,
        )
        if self.letters:
            self.publisher.publish(self.topics.dlq, letter)
            self._queued += 1

    # -- writing ----------------------------------------------------------------------------
    def _emit(self, runs: Iterable[DependencyRun], *, flagged: bool) -> None:
        """The held runs whose moment came, then ``runs``, each emitted or held by its
        tenant's rate; ``clear`` moves to the offsets read once none is held."""
        now = self.clock()
        now_ms = to_ms(now)
        for run, was_flagged in self.held.due(now_ms):
            self._publish(run, was_flagged, now)
        for run in runs:
            job = self.jobs.get(run.job_id)
            if job is not None and self.held.admit(job.tenant, (run, flagged), now_ms):
                self._publish(run, flagged, now)
        if not self.held:
            self.clear = dict(self.positions)

    def _publish(self, run: DependencyRun, flagged: bool, now: datetime) -> None:
        job = self.jobs.get(run.job_id)
        if job is None:  # deleted since it fired
            return
        request = job.run_request(
            run_id=run.run_id,
            scheduled_at=from_ms(run.scheduled_ms),
            fired_at=now,
            trigger=Trigger.DEPENDENCY,
        )
        request = replace(request, payload=run.payload, possible_duplicate=flagged)
        self.publisher.publish(self.topics.runs(request.priority), request)
        self._queued += 1
        metrics.labelled(metrics.dependency_runs, "true" if flagged else "false").inc()
        log.info("%s emitted%s", run.run_id, " (possibly again: flagged)" if flagged else "")

    def _commit(self) -> None:
        """Step 5: the next offsets of both topics as of the last moment no run was held
        (every run they make due is written: the caller flushed)."""
        self._committed_at = time.monotonic()
        if self.clear == self.done:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in self.clear.items()]
        then = "the records after the last commit are read again at the next start"
        if commit(self.live, offsets, wait=True, log=log, then=then):
            self.done = dict(self.clear)

    # -- helpers ----------------------------------------------------------------------------
    def _partitions(self, topic: str) -> list[int]:
        meta = self.reader.list_topics(topic, timeout=30).topics[topic]
        return sorted(meta.partitions)

    def _interest(self) -> set[bytes]:
        """The keys of the history records the core uses (``Dependencies.interest``)."""
        if self._keys is None:
            self._keys = {job_id.encode() for job_id in self.deps.interest()}
        return self._keys

    def _late_keys(self) -> set[bytes]:
        return {job_id.encode() for job_id in self.late}


def read_from_ms(job: JobDefinition) -> int:
    """Where reading history again for a new dependent may begin: the records of dates
    it can fire (from its ``since``, its definition's date) and of its own runs were
    written from that date's midnight UTC on, but for runs executed ahead of their slot
    (the scheduler's lookahead: a minute at most) or stamped by a skewed clock: an hour
    before it."""
    day = job.updated_at.astimezone(UTC).date()
    midnight = to_ms(datetime(day.year, day.month, day.day, tzinfo=UTC))
    return max(1, midnight - READ_AGAIN_MARGIN_MS)  # 1: from the start (a time Kafka takes)


__all__ = ["DependencyConfig", "DependencyProcessor"]
