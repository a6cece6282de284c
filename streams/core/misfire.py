"""Slots that came due while nobody fired them: which run now, which are recorded.

Applied whenever a job's slots between a fired-through point and ``now`` have to be
settled: on startup, on partition takeover, and for a definition that arrived while no
scheduler owned its partition. The rules, for the slots due in ``(owed_from, now]``:

1. A paused job runs none of them: they are SKIPPED ("job paused").
2. A slot late by at most ``threshold_ms`` is merely late: it fires (trigger SCHEDULE).
   A failover takes seconds, so a takeover loses nothing whatever the policy.
3. A slot late by more is a misfire. Outside the job's catch-up window it is MISSED.
   Inside: ``skip`` records it SKIPPED; ``once`` runs the latest one (trigger CATCHUP)
   unless a merely-late slot already runs, and records the others SKIPPED; ``all`` runs
   the latest ``max_catchup`` and records the older ones MISSED.

**Bounded by the policy, not by the outage.** The slots not run form at most two groups,
oldest first: MISSED (too old; with ``all``, also those beyond ``max_catchup``) and
SKIPPED (in the window, by ``skip`` or ``once``; or all of a paused job's). A group of at
most ``LIST_LIMIT`` slots is recorded slot by slot, each under its own run id; a larger
one is ONE summary record (``Record.slots`` > 1) under its first slot's run id, naming
its last slot and how many slots it stands for. So a settlement writes at most
``max_catchup`` CATCHUP runs (1 for ``once``, 0 for ``skip``), the merely-late slots
(those due within ``threshold_ms`` of now) and ``2 * LIST_LIMIT`` records, whatever the outage
(measured: a 1 s job, ``all``, a 30-day window, a 30-day outage: 2,592,000 records and
6.9 s of CPU before; now 60 late fires, 10 CATCHUP and 1 summary in under 1 ms, 2 ms
for cron ``* * * * * *``, which took 25 s). Every slot not run is covered by exactly
one record, listed or summarised: none is silent.

Slots are counted, never walked, wherever there can be many of them
(``JobSchedule.count_slots``/``latest_slots``: arithmetic for an interval, per day for
cron); only the slots that are emitted one by one are walked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronstream.streams.core.schedule import JobSchedule

# A group of slots not run up to this size is listed slot by slot (a short outage shows
# each missed run under its own id); a larger one is one summary record.
LIST_LIMIT = 10


@dataclass(frozen=True, slots=True)
class Fire:
    """Emit one run request. ``timer`` carries a pending timer's body (retry/delay)."""

    job_id: str
    slot_ms: int
    due_ms: int
    trigger: str = "SCHEDULE"
    possible_duplicate: bool = False
    job: JobSchedule | None = None
    timer: Any = None


@dataclass(frozen=True, slots=True)
class Record:
    """Slots that do not run: written to history as MISSED or SKIPPED. One slot
    (``slot_ms``), or a summary of ``slots`` slots from ``slot_ms`` to ``last_ms``;
    ``reason`` says why (a summary's: each cause with its count)."""

    job_id: str
    slot_ms: int
    status: str
    reason: str
    job: JobSchedule | None = None
    timer: Any = None
    slots: int = 1
    last_ms: int | None = None  # a summary's last slot


Action = Fire | Record


@dataclass(slots=True)
class Settled:
    """``actions`` for the slots due in ``(owed_from, now]``, oldest first; ``next_slot``:
    the first slot due after both (None: the job has no more)."""

    actions: list[Action]
    next_slot: int | None


@dataclass(frozen=True, slots=True)
class _Span:
    """The slots due in ``(after, through]``, not run for ``why``."""

    after: int
    through: int
    why: str


def settle(
    job: JobSchedule,
    *,
    owed_from: int,
    now: int,
    threshold_ms: int,
    possible_duplicate: bool,
) -> Settled:
    """What to do with the job's slots whose due time is in ``(owed_from, now]``."""
    next_slot = job.slot_due_after(max(owed_from, now))
    if owed_from >= now:
        return Settled([], next_slot)
    if job.paused:
        return Settled(_not_run(job, "SKIPPED", [_Span(owed_from, now, "job paused")]), next_slot)
    policy = job.misfire
    # Due times: (owed_from, old] too old to run, (old, late] misfired, (late, now] late.
    late = max(owed_from, now - threshold_ms)
    old = max(owed_from, min(now - policy.window_ms, late))
    merely_late = _walk(job, late, now)  # at most threshold_ms worth of slots
    if policy.policy == "SKIP" or (policy.policy == "ONCE" and merely_late):
        catchup: list[int] = []
    else:
        count = policy.max_catchup if policy.policy == "ALL" else 1
        catchup = job.latest_slots(old - job.jitter, late - job.jitter, count)
    # The misfired slots not caught up: those due before the first catch-up slot.
    unrun = late if not catchup else catchup[0] + job.jitter - 1
    too_old = _Span(
        owed_from, old, f"misfired and older than the catch-up window ({policy.window_ms} ms)"
    )
    actions: list[Action]
    if policy.policy == "ALL":
        why = f"misfire=all ran the latest {policy.max_catchup}"
        actions = _not_run(job, "MISSED", [too_old, _Span(old, unrun, why)])
    else:
        why = "misfire=skip" if policy.policy == "SKIP" else "misfire=once ran one slot"
        actions = _not_run(job, "MISSED", [too_old])
        actions += _not_run(job, "SKIPPED", [_Span(old, unrun, why)])
    dup = possible_duplicate
    actions.extend(Fire(job.job_id, s, s + job.jitter, "CATCHUP", dup, job) for s in catchup)
    actions.extend(Fire(job.job_id, s, s + job.jitter, "SCHEDULE", dup, job) for s in merely_late)
    return Settled(actions, next_slot)


def _walk(job: JobSchedule, after: int, through: int) -> list[int]:
    """The slots due in ``(after, through]``, one by one: for short spans only."""
    out = []
    slot = job.slot_due_after(after)
    while slot is not None and slot + job.jitter <= through:
        out.append(slot)
        slot = job.slot_due_after(slot + job.jitter)
    return out


def _not_run(job: JobSchedule, status: str, spans: list[_Span]) -> list[Action]:
    """The records of contiguous spans of slots not run, all with ``status``: one per
    slot if they are ``LIST_LIMIT`` at most, else one summary."""
    jitter = job.jitter
    counts = [job.count_slots(s.after - jitter, s.through - jitter) for s in spans]
    total = sum(counts)
    if total <= LIST_LIMIT:
        return [
            Record(job.job_id, slot, status, s.why, job)
            for s, n in zip(spans, counts, strict=True)
            if n
            for slot in _walk(job, s.after, s.through)
        ]
    after, through = spans[0].after - jitter, spans[-1].through - jitter
    first = job.slot_after(after)
    last = job.latest_slots(after, through, 1)
    assert first is not None, (job, after, total)  # total > 0: the span has a first
    assert last, (job, through, total)
    why = "; ".join(f"{s.why} ({n:,})" for s, n in zip(spans, counts, strict=True) if n)
    return [Record(job.job_id, first, status, why, job, slots=total, last_ms=last[0])]
