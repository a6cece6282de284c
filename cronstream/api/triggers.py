"""What a job's triggers are doing (docs/event-triggers.md, "Watching a trigger"), for
``GET /v1/jobs/{id}/triggers`` and the dashboard's job page:

- **The last record matched** (``on:``): the job's newest run with trigger EVENT in
  history (``runs_by_job``, newest scheduled first: an event run is scheduled at its
  record's time). Its run id names the record (``schemas.ids.event_source``); for a
  debounce window or a batch, its first record. Looked for among the newest
  ``SCAN_ROWS`` runs of the last ``SCAN_DAYS`` days (a schedule beside ``on:`` adds its
  runs there too), so an older match, or a record stamped before that, is "none".
- **The lag** (``on:``), per source partition: the high watermark minus the offset the
  trigger processor committed in its group (``schemas.catalog.triggers_group``; the
  retained start instead when retention deleted past it). One group reads each topic
  for every job triggered from it and commits the lowest resume offset of their
  triggers, so the lag is the topic's, not the job's: an open batch holds it back. A
  partition with nothing committed yet shows none.
- **The upstream jobs** (``after:``) and, for today (UTC, the logical date), which
  succeeded (``streams.core.dependencies.success_of``, the dependency processor's own
  rule) and the dependent's own run of today, if history has it.

The figures are computed here from plain values; ``TriggerOffsets`` reads the offsets
from Kafka, the backend reads history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any

from cronstream.runtime.kafka.clients import KafkaException, TopicPartition, kafka_consumer
from cronstream.runtime.kafka.offsets import committed, watermarks
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import FLOWS_APP, triggers_group
from cronstream.schemas.events import JobDefinition, RunOutcome, Trigger, iso
from cronstream.schemas.ids import event_source
from cronstream.streams.core.dependencies import success_of

SCAN_DAYS = 7  # how far back the last record matched is looked for
SCAN_ROWS = 500  # of the job's newest runs
UPSTREAM_ROWS = 2000  # of an upstream job's runs of today, looked through for a success


@dataclass(frozen=True, slots=True)
class PartitionLag:
    partition: int
    start: int  # the low watermark: the first record retained
    end: int  # the high watermark: the next offset written
    committed: int | None  # the trigger group's; None: nothing committed yet

    @property
    def lag(self) -> int | None:
        """Records the trigger processor has yet to read and commit past."""
        if self.committed is None:
            return None
        return max(0, self.end - max(self.committed, self.start))


def partition_lags(
    ends: Mapping[int, tuple[int, int]], done: Mapping[int, int]
) -> list[PartitionLag]:
    """Per partition (``ends``: partition -> (low, high) watermarks; ``done``: partition ->
    committed offset, a negative one as librdkafka's "none")."""
    return [
        PartitionLag(p, low, high, c if (c := done.get(p, -1)) >= 0 else None)
        for p, (low, high) in sorted(ends.items())
    ]


@dataclass(frozen=True, slots=True)
class Matched:
    """The source record of an event run: where it is, when it was stamped."""

    run_id: str
    topic: str
    partition: int
    offset: int
    record_time: datetime  # the run's scheduled_at
    status: str  # of the run's latest attempt


def last_matched(rows: Iterable[RunOutcome]) -> Matched | None:
    """The newest event run among ``rows`` (a job's runs, newest scheduled first)."""
    for row in rows:
        source = event_source(row.run_id) if row.trigger is Trigger.EVENT else None
        if source is not None:
            return Matched(row.run_id, *source, row.scheduled_at, row.status.value)
    return None


@dataclass(frozen=True, slots=True)
class Upstream:
    job_id: str  # stored
    known: bool  # defined now (a job, or a flow's schedule job)
    succeeded: bool | None  # for today; None: not found in the newest UPSTREAM_ROWS runs
    run_id: str | None = None  # the run that succeeded


def upstream_today(job_id: str, known: bool, rows: Iterable[RunOutcome], day: date) -> Upstream:
    """Whether ``rows`` (``job_id``'s runs scheduled on ``day``, at most UPSTREAM_ROWS)
    hold a success for ``day`` by the dependency processor's rule."""
    seen = 0
    for row in rows:
        seen += 1
        if success_of(_as_recorded(row)) == (job_id, day):
            return Upstream(job_id, known, True, row.run_id)
    return Upstream(job_id, known, False if seen < UPSTREAM_ROWS else None)


def _as_recorded(row: RunOutcome) -> RunOutcome:
    """A history row as the record that made its status: a flow run's end is recorded by
    the flows coordinator without a target type, but its row keeps the type of the run
    that started it (``flow``), which the rule reads as "only published the start"."""
    if row.trigger is Trigger.FLOW and row.worker == FLOWS_APP:
        return replace(row, target_type=None)
    return row


def day_bounds(now: datetime) -> tuple[date, datetime, datetime]:
    """Today (UTC), its midnight and the next."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight.date(), midnight, midnight + timedelta(days=1)


@dataclass(frozen=True, slots=True)
class TopicLag:
    group: str
    topic: str
    partitions: list[PartitionLag]
    error: str | None = None  # why the offsets could not be read

    @property
    def total(self) -> int | None:
        known = [p.lag for p in self.partitions if p.lag is not None]
        return sum(known) if known else None


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerStatus:
    job: JobDefinition
    lag: TopicLag | None = None  # on: only
    matched: Matched | None = None
    day: date | None = None  # after: only
    upstream: tuple[Upstream, ...] = ()
    today: RunOutcome | None = None  # the dependent's own run of ``day``
    history_error: str | None = None

    def as_json(self, own: Callable[[str], str]) -> dict[str, Any]:
        """As the API answers; ``own`` names a stored id as the caller does."""
        out: dict[str, Any] = {
            "job_id": own(self.job.job_id),
            "describe": self.job.describe_schedule(),
        }
        if self.job.on is not None and self.lag is not None:
            m = self.matched
            out["on"] = {
                "topic": self.job.on.topic,
                "group": self.lag.group,
                "lag": self.lag.total,
                "lag_error": self.lag.error,
                "partitions": [
                    {
                        "partition": p.partition,
                        "start": p.start,
                        "end": p.end,
                        "committed": p.committed,
                        "lag": p.lag,
                    }
                    for p in self.lag.partitions
                ],
                "last_matched": None
                if m is None
                else {
                    "run_id": own(m.run_id),
                    "topic": m.topic,
                    "partition": m.partition,
                    "offset": m.offset,
                    "record_time": iso(m.record_time),
                    "status": m.status,
                },
            }
        if self.job.after:
            out["after"] = {
                "date": None if self.day is None else self.day.isoformat(),
                "jobs": [
                    {
                        "job_id": own(u.job_id),
                        "known": u.known,
                        "succeeded": u.succeeded,
                        "run_id": None if u.run_id is None else own(u.run_id),
                    }
                    for u in self.upstream
                ],
                "run": None
                if self.today is None
                else {"run_id": own(self.today.run_id), "status": self.today.status.value},
            }
        out["history_error"] = self.history_error
        return out


class TriggerOffsets:
    """The source topics' watermarks and the trigger group's committed offsets, read
    with one consumer of that group that never joins it nor commits (it only asks)."""

    def __init__(self, settings: Settings) -> None:
        self.group = triggers_group(settings.topic_prefix)
        self.consumer = kafka_consumer(settings, **{"group.id": self.group})
        self.lock = threading.Lock()  # one consumer, requests on several threads

    def lag(self, topic: str) -> TopicLag:
        """Never raises for the broker's refusals: they are the answer's ``error``."""
        try:
            with self.lock:
                return self._lag(topic)
        except (KafkaException, RuntimeError) as exc:
            return TopicLag(self.group, topic, [], f"Kafka refused: {exc}")

    def _lag(self, topic: str) -> TopicLag:
        meta = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            why = "no such topic" if meta is None else meta.error.str()
            return TopicLag(self.group, topic, [], f"topic {topic!r}: {why}")
        ends = {
            p: watermarks(self.consumer, TopicPartition(topic, p), timeout=10)
            for p in meta.partitions
        }
        found = committed(self.consumer, [TopicPartition(topic, p) for p in ends])
        refused = [tp.error.str() for tp in found if tp.error is not None]
        if refused:
            return TopicLag(self.group, topic, [], f"group {self.group}: {refused[0]}")
        return TopicLag(
            self.group, topic, partition_lags(ends, {tp.partition: tp.offset for tp in found})
        )

    def close(self) -> None:
        self.consumer.close()
