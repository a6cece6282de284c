"""`cronstream runs backfill`: a job's slots in a past range, run now.

Each slot in ``[from, to)`` becomes a run request with the slot's own run id
(``JOB@<slot>``, what the scheduler would have fired), trigger CATCHUP, flagged
``possible_duplicate`` so that a worker first checks history for it. Before anything is
sent, the job's history in Cassandra for the range says which slots already ran
(any record but MISSED or SKIPPED: succeeded, failed, dead-lettered, cancelled, in
progress): those are left alone, so running the same backfill twice runs nothing twice.
``--rerun`` runs every slot again under a fresh run id per slot (``JOB@<slot>~<key>``).

Pacing: at most ``max_parallel`` backfilled runs are in flight (sent, no final outcome
on the history topic yet); the next is sent when one ends. A tenant's runs are also held
to its fire rate (``--tenant-fires-per-second``, the scheduler's; ``TenantRates.take``):
a slot beyond it waits its turn, none is skipped. Runs go to the low priority
topic unless told otherwise, so workers start live runs of higher priorities first.
Progress is printed as it goes; Ctrl-C stops sending and cancels the runs in flight.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from cronstream.producers.client import JobClient
from cronstream.runtime.kafka.clients import TopicPartition, consume_ready, kafka_consumer
from cronstream.runtime.kafka.offsets import watermarks
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import (
    JobDefinition,
    Priority,
    RunOutcome,
    Trigger,
    from_ms,
    iso,
    text_headers,
    utc_now,
)
from cronstream.schemas.ids import partition_for, slot_run_id
from cronstream.schemas.timing import schedule_args
from cronstream.streams.core.rates import TenantRates
from cronstream.streams.core.schedule import JobSchedule

MAX_SLOTS = 100_000
MAX_PARALLEL = 10_000
# The statuses of a slot that never ran: a backfill runs it.
NEVER_RAN = frozenset({"MISSED", "SKIPPED"})
# Outcomes after which a run is over (FAILED and TIMED_OUT are attempts: a retry follows).
OVER = frozenset({"SUCCEEDED", "DEAD_LETTERED", "CANCELED", "DUPLICATE", "MISSED", "SKIPPED"})


def backfill_slots(job: JobDefinition, start_ms: int, end_ms: int, *, now_ms: int) -> list[int]:
    """The job's slots due in ``[start_ms, end_ms)``, as the scheduler computes them
    (jitter aside); SpecError for a range that is empty, in the future or too long."""
    problems = []
    if start_ms >= end_ms:
        problems.append("--from must be before --to")
    if end_ms > now_ms:
        problems.append("--to is in the future: the scheduler fires those slots itself")
    if job.schedule is None:
        problems.append("the job has no schedule (manual only): use 'runs trigger'")
    if problems:
        raise SpecError(f"backfill {job.job_id}", problems)
    assert job.schedule is not None
    schedule = JobSchedule(job.job_id, timezone=job.timezone, **schedule_args(job.schedule))
    slots: list[int] = []
    after = start_ms - 1
    while (slot := schedule.slot_after(after)) is not None and slot < end_ms:
        if len(slots) == MAX_SLOTS:
            raise SpecError(
                f"backfill {job.job_id}",
                [f"more than {MAX_SLOTS:,} slots in the range: backfill it in parts"],
            )
        slots.append(slot)
        after = slot
    return slots


def ran_already(outcomes: Iterable[RunOutcome]) -> set[str]:
    """The run ids of ``outcomes`` (a job's history over the range) that ran, or are
    running: every record but MISSED and SKIPPED."""
    return {o.run_id for o in outcomes if o.status.value not in NEVER_RAN}


@dataclass
class Progress:
    total: int  # slots to run
    left_alone: int  # slots in the range that ran already
    sent: int = 0
    ended: Counter[str] = field(default_factory=Counter)  # final status -> runs
    cancelled: int = 0  # in flight when stopped: a cancel was sent

    @property
    def done(self) -> int:
        return sum(self.ended.values())

    def line(self, job_id: str) -> str:
        ended = ", ".join(f"{n} {s.lower()}" for s, n in sorted(self.ended.items()))
        return (
            f"backfill {job_id}: {self.done}/{self.total} ended"
            f"{f' ({ended})' if ended else ''}, {self.sent - self.done} running, "
            f"{self.total - self.sent} to send"
        )


@dataclass(frozen=True, slots=True)
class Pace:
    """How fast a backfill sends: runs in flight at most, and its tenant's fire rate."""

    max_parallel: int
    rates: TenantRates


class Backfill:
    clock: Callable[[], int] = staticmethod(lambda: time.time_ns() // 1_000_000)  # ms

    def __init__(
        self,
        client: JobClient,
        job: JobDefinition,
        slots: list[int],
        *,
        pace: Pace,
        priority: Priority,
        rerun: bool,
        left_alone: int = 0,
        say: Callable[[str], None] = print,
    ) -> None:
        self.client = client
        self.job = job
        self.pace = pace
        self.priority = priority
        self.say = say
        self.key = uuid.uuid4().hex[:8] if rerun else None
        self.todo = deque(slots)
        self.progress = Progress(total=len(slots), left_alone=left_alone)
        self.in_flight: set[str] = set()
        topic = client.topics.history
        spec = client.topics.spec(topic)
        assert spec is not None
        # Outcomes go to the job's own history partition: read it from its end as of now.
        self.history = kafka_consumer(client.settings)
        part = TopicPartition(topic, partition_for(job.job_id, client.topics.partitions(spec)))
        part.offset = watermarks(self.history, part)[1]
        self.history.assign([part])

    def run_id(self, slot_ms: int) -> str:
        run_id, _ = slot_run_id(self.job.job_id, slot_ms)
        return run_id if self.key is None else f"{run_id}~{self.key}"

    def run(self) -> Progress:
        """Send, pace and follow the runs until every one ended; Ctrl-C (SIGINT) cancels
        the runs in flight and raises KeyboardInterrupt.

        The signal sets a flag the loop reads each round: a KeyboardInterrupt raised
        while librdkafka ran a callback of ours was lost (make test saw a backfill go on
        for 30 s after SIGINT)."""
        progress = self.progress
        shown = 0.0
        asked: list[int] = []
        previous = _on_sigint(asked.append)
        try:
            while (self.todo or self.in_flight) and not asked:
                self._send()
                self._follow()
                if time.monotonic() - shown >= 1.0:
                    shown = time.monotonic()
                    self.say(progress.line(self.job.job_id))
            if asked:
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            for run_id in sorted(self.in_flight):
                self.client.cancel(run_id, reason="backfill interrupted")
            progress.cancelled = len(self.in_flight)
            self.say(
                f"{progress.line(self.job.job_id)}; interrupted: {progress.cancelled} "
                f"cancel(s) sent, {len(self.todo)} slot(s) not sent"
            )
            raise
        finally:
            self.history.close()
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        self.say(progress.line(self.job.job_id))
        return progress

    def _send(self) -> None:
        room = self.pace.max_parallel - len(self.in_flight)
        if room <= 0 or not self.todo:
            return
        count = self.pace.rates.take(self.job.tenant, min(room, len(self.todo)), self.clock())
        if not count:
            return  # the tenant's rate: the slots wait their turn
        now = utc_now()
        topic = self.client.topics.runs(self.priority)
        publisher = self.client.publisher
        for _ in range(count):
            slot = self.todo.popleft()
            run = replace(
                self.job.run_request(
                    run_id=self.run_id(slot),
                    scheduled_at=from_ms(slot),
                    fired_at=now,
                    trigger=Trigger.CATCHUP,
                ),
                priority=self.priority,
                possible_duplicate=True,
            )
            publisher.publish(topic, run)
            self.in_flight.add(run.run_id)
            self.progress.sent += 1
        publisher.flush()

    def _follow(self) -> None:
        for msg in consume_ready(self.history, 1000, 0.2):
            if msg.error():
                continue
            headers = text_headers(msg.headers())
            run_id, status = headers.get("run_id"), headers.get("status", "")
            if run_id in self.in_flight and status in OVER:
                self.in_flight.discard(run_id)
                self.progress.ended[status] += 1


def _on_sigint(note: Callable[[int], object]) -> Any:
    """Have SIGINT call ``note`` (in the main thread only: where a handler can be set);
    the handler it replaces, to put back (None: none was replaced)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, lambda signum, _frame: note(signum))


def describe(job: JobDefinition, slots: list[int], left_alone: int) -> str:
    first = iso(from_ms(slots[0])) if slots else "-"
    last = iso(from_ms(slots[-1])) if slots else "-"
    return (
        f"backfill {job.job_id}: {len(slots)} slot(s) to run ({first} .. {last}), "
        f"{left_alone} already ran"
    )


__all__ = [
    "MAX_PARALLEL",
    "Backfill",
    "Pace",
    "Progress",
    "backfill_slots",
    "describe",
    "ran_already",
]
