"""What a chaos scenario did, counted from the outside: the runs topics (what was
requested), the history topic (what workers and schedulers recorded), the Cassandra
history (what the sink wrote) and the target's log (what was executed).

Expected runs: every slot of every firing job scheduled in the measured window, and
every manual run whose trigger Kafka acknowledged. For each:

- *lost*: not recorded MISSED/SKIPPED, and no effect at the target or no SUCCEEDED
  row in Cassandra;
- *silently missed*: a slot with no run request on the runs topics and no
  MISSED/SKIPPED record;
- *unflagged repeats*: a run request (run id, attempt) written again without
  ``possible_duplicate`` (counted over every run request of our jobs);
- *repeat deliveries*: run ids the target received more than once; the target applies a
  run id once (``Idempotency-Key``), so the extra requests are *deduplicated*, not effects.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority, RunOutcome, from_ms
from cronstream.schemas.ids import slot_run_id
from cronstream.schemas.serde import Codec
from cronstream.streams.core.schedule import jitter_offset
from tests.integration.helpers import read_topic

LATE_MS = 3000  # an effect later than this after its due time is "not yet recovered"


@dataclass
class Result:
    name: str
    expected: int = 0
    lost: int = 0
    lost_no_effect: int = 0
    lost_no_history: int = 0
    silently_missed: int = 0
    unflagged_repeats: int = 0
    flagged_repeats: int = 0
    flagged_requests: int = 0
    misfires: int = 0
    repeat_deliveries: int = 0
    deduplicated: int = 0
    effects: int = 0
    worker_duplicates: int = 0
    dead_letters: int = 0
    stale: int = 0  # run ids whose records reached the topic out of emission order
    early: int = 0  # effects before their run's due time (slot + jitter)
    # Runs with their effect whose last outcome was a failed attempt: its retry (a
    # timer the schedulers hold) was pending when the drain stopped them. Not lost.
    retry_pending: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # FAILED... outcomes by error
    recovery_s: float = 0.0
    stall_s: float = 0.0  # the longest a slot waited past its due time for its effect
    gap_s: float = 0.0  # the longest time without any effect (a stall of starts)
    gap_from_ms: int = 0  # the effect that began it (epoch ms)
    crashes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """Slots scheduled at or after ``start_ms`` and due (slot + jitter) before
    ``end_ms`` are expected; recovery is measured from ``fault_end`` (epoch s)."""

    start_ms: int
    end_ms: int
    fault_end: float


def expected_slots(jobs: list[str], every_ms: int, window: Window) -> dict[str, tuple[str, int]]:
    """run id -> (job id, due ms) of every slot of the firing jobs in the window."""
    first = -(-window.start_ms // every_ms) * every_ms
    out = {}
    for job_id in jobs:
        jitter = jitter_offset(job_id, every_ms - 1)
        for slot in range(first, window.end_ms, every_ms):
            if slot + jitter < window.end_ms:  # due before the schedulers stopped
                out[slot_run_id(job_id, slot)[0]] = (job_id, slot + jitter)
    return out


def _runs(settings: Settings, ours: set[str], result: Result) -> set[str]:
    """Run ids requested; counts repeats of (run id, attempt), flagged or not, in the
    order they were emitted (the record's CreateTime, stamped at ``produce``): a record
    a frozen scheduler had queued reaches the topic only when it resumes, after the
    new owner's flagged re-emission of the same run id (counted as ``stale``)."""
    topics = Topics(settings)
    emitted: dict[tuple[str, str], list[tuple[int, int, bool]]] = {}
    arrival = 0
    for priority in Priority:
        for record in read_topic(settings, topics.runs(priority)):
            h = record.headers
            if h.get("job_id") not in ours:
                continue
            flagged = h.get("possible_duplicate") == "true"
            result.flagged_requests += flagged
            key = (h.get("run_id", ""), h.get("attempt", ""))
            arrival += 1
            emitted.setdefault(key, []).append((record.timestamp_ms, arrival, flagged))
    for (run_id, _), records in emitted.items():
        if len(records) < 2:
            continue
        records.sort()
        for _, _, flagged in records[1:]:
            if flagged:
                result.flagged_repeats += 1
            else:
                result.unflagged_repeats += 1
                result.examples.setdefault("unflagged", []).append(run_id)
        if [a for _, a, _ in records] != sorted(a for _, a, _ in records):
            result.stale += 1
            result.examples.setdefault("stale", []).append(run_id)
    return {run_id for run_id, _ in emitted}


def _history(
    settings: Settings, result: Result, slots: dict[str, tuple[str, int]]
) -> tuple[set[str], set[str]]:
    """(run ids recorded MISSED/SKIPPED, run ids whose last outcome is a failed attempt
    to be retried); counts DUPLICATE records. A summary record
    (headers ``slots`` and ``last_slot``: the scheduler's one record for many slots of
    one outage) stands for every expected slot of its job from its ``scheduled_at`` to
    its ``last_slot``."""
    recorded: set[str] = set()
    retrying: set[str] = set()
    summaries: dict[str, list[tuple[str, str]]] = {}
    codec = Codec(registry_client(settings, writer=True))
    for record in read_topic(settings, Topics(settings).history):
        headers = record.headers
        status = headers.get("status")
        if status in ("MISSED", "SKIPPED"):
            recorded.add(headers.get("run_id", ""))
            result.misfires += int(headers.get("slots", "1"))
            if "last_slot" in headers:
                summaries.setdefault(headers.get("job_id", ""), []).append(
                    (headers.get("scheduled_at", ""), headers["last_slot"])
                )
        elif status == "DUPLICATE":
            result.worker_duplicates += 1
        elif status in ("FAILED", "TIMED_OUT", "DEAD_LETTERED") and record.value:
            outcome = codec.decode(record.value, RunOutcome)
            result.failures[f"{status}: {(outcome.error or '')[:80]}"] += 1
            if outcome.next_attempt_at is not None:  # a retry is due then
                retrying.add(outcome.run_id)
        if status == "SUCCEEDED":
            retrying.discard(headers.get("run_id", ""))
    for run_id, (job_id, _) in slots.items():
        slot = run_id.rpartition("@")[2]  # the wire form of an instant sorts as it
        if any(first <= slot <= last for first, last in summaries.get(job_id, ())):
            recorded.add(run_id)
    result.dead_letters = sum(1 for _ in read_topic(settings, Topics(settings).dlq))
    return recorded, retrying


def _target(log: Path, result: Result) -> dict[str, int]:
    """run id -> the time (ms) of its effect; counts repeat deliveries."""
    effects: dict[str, int] = {}
    calls: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        ms, kind, _attempt, run_id = line.split(" ", 3)
        calls[run_id] += 1
        if kind == "effect":
            effects[run_id] = int(ms)
    result.effects = len(effects)
    result.repeat_deliveries = sum(1 for n in calls.values() if n > 1)
    result.deduplicated = sum(n - 1 for n in calls.values())
    return effects


def _cassandra(settings: Settings, jobs: list[str], days: set[date]) -> set[str]:
    """Run ids with a SUCCEEDED row in the sink's ``runs_by_job``."""
    from cassandra.concurrent import execute_concurrent_with_args

    from cronstream.runtime.cassandra import cassandra_session

    cluster, session = cassandra_session(settings, timeout=60)
    try:
        statement = session.prepare(
            f"SELECT run_id, status FROM {settings.keyspace}.runs_by_job "
            "WHERE job_id = ? AND day = ?"
        )
        args = [(j, d) for j in jobs for d in days]
        succeeded: set[str] = set()
        for ok, rows in execute_concurrent_with_args(session, statement, args, concurrency=64):
            if not ok:
                raise RuntimeError(f"history query failed: {rows}")
            succeeded.update(r.run_id for r in rows if r.status == "SUCCEEDED")
        return succeeded
    finally:
        cluster.shutdown()


def measure(
    name: str,
    settings: Settings,
    *,
    jobs: list[str],
    every_ms: int,
    manual: list[str],
    window: Window,
    target_log: Path,
) -> Result:
    result = Result(name)
    slots = expected_slots(jobs, every_ms, window)
    from tests.chaos.load import MANUAL_JOB

    requested = _runs(settings, {*jobs, MANUAL_JOB}, result)
    recorded, retrying = _history(settings, result, slots)
    effects = _target(target_log, result)
    days = {from_ms(window.start_ms).date(), from_ms(window.end_ms).date()}
    stored = _cassandra(settings, [*jobs, MANUAL_JOB], days)
    result.expected = len(slots) + len(manual)
    for run_id in [*slots, *manual]:
        if run_id in recorded:
            continue
        if run_id in effects and run_id not in stored and run_id in retrying:
            result.retry_pending += 1
            result.examples.setdefault("retry pending", []).append(run_id)
        elif run_id not in effects or run_id not in stored:
            result.lost += 1
            result.lost_no_effect += run_id not in effects
            result.lost_no_history += run_id not in stored
            result.examples.setdefault("lost", []).append(run_id)
        if run_id in slots and run_id not in requested:
            result.silently_missed += 1
            result.examples.setdefault("missed", []).append(run_id)
    result.recovery_s = recovery(slots, effects, window.fault_end)
    late = [effects[r] - due for r, (_, due) in slots.items() if r in effects]
    early = [r for r, (_, due) in slots.items() if r in effects and effects[r] < due]
    result.early = len(early)
    if early:
        result.examples["early"] = early
    result.stall_s = max(late, default=0) / 1000
    times = sorted(ms for ms in effects.values() if window.start_ms <= ms <= window.end_ms)
    gap, result.gap_from_ms = longest_gap(times)
    result.gap_s = gap / 1000
    return result


def longest_gap(times: list[int]) -> tuple[int, int]:
    """(the longest time between two consecutive of the sorted ``times``, the time it
    began), both ms; (0, 0) with fewer than two."""
    return max(((b - a, a) for a, b in itertools.pairwise(times)), default=(0, 0))


def recovery(slots: dict[str, tuple[str, int]], effects: dict[str, int], fault_end: float) -> float:
    """Seconds from ``fault_end`` until the last slot executed more than LATE_MS after
    its due time was executed (0 when none was late)."""
    late = [
        (due, effects[r])
        for r, (_, due) in slots.items()
        if r in effects and effects[r] - due > LATE_MS
    ]
    if not late:
        return 0.0
    _, done = max(late)
    return max(0.0, done / 1000 - fault_end)
