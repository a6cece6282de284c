"""Slots that came due while nobody fired them: which run now, which are recorded.

Applied whenever a job's slots between a fired-through point and ``now`` have to be
settled: on startup, on partition takeover, and for a definition that arrived while no
scheduler owned its partition. The rules, for each slot in ``(owed_from, now]``:

1. A paused job runs none of them: each is SKIPPED ("job paused").
2. A slot late by at most ``threshold_ms`` is merely late: it fires (trigger SCHEDULE).
   A failover takes seconds, so a takeover loses nothing whatever the policy.
3. A slot late by more is a misfire. Outside the job's catch-up window it is MISSED.
   Inside: ``skip`` records it SKIPPED; ``once`` runs the latest one (trigger CATCHUP)
   unless a merely-late slot already runs, and records the others SKIPPED; ``all`` runs
   the latest ``max_catchup`` and records the older ones MISSED.

Enumeration is bounded: at most ``LIST_LIMIT`` slots that can no longer run (older than
the window) are listed one by one; the rest become one MISSED record that names the
range and the count it stands for, so an outage of any length is recorded, never silent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streams.core.schedule import JobSchedule

LIST_LIMIT = 10_000


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
    """A slot that does not run: written to history as MISSED or SKIPPED."""

    job_id: str
    slot_ms: int
    status: str
    reason: str
    job: JobSchedule | None = None
    timer: Any = None


Action = Fire | Record


@dataclass(slots=True)
class Settled:
    """``actions`` for the slots due in ``(owed_from, now]``, oldest first; ``next_slot``:
    the first slot due after both (None: the job has no more), found on the way."""

    actions: list[Action]
    next_slot: int | None


def settle(
    job: JobSchedule,
    *,
    owed_from: int,
    now: int,
    threshold_ms: int,
    possible_duplicate: bool,
) -> Settled:
    """What to do with the job's slots whose due time is in ``(owed_from, now]``."""
    policy = job.misfire
    late_cut = now - threshold_ms  # due at or before this: a misfire
    window_cut = now - policy.window_ms  # due at or before this: too old to run
    floor = min(late_cut, window_cut)
    actions: list[Action] = []
    misfired: list[int] = []
    late: list[int] = []
    listed = 0
    after = owed_from
    while True:
        slot = job.slot_due_after(after)
        if slot is None or slot + job.jitter > now:
            next_slot: int | None = slot
            break
        due = slot + job.jitter
        if due <= floor and not job.paused:
            if listed == LIST_LIMIT:
                actions.append(_summary(job, slot, floor))
                after = floor
                listed += 1
                continue
            listed += 1
            actions.append(Record(job.job_id, slot, "MISSED", _too_old(policy.window_ms), job))
        elif job.paused:
            if listed == LIST_LIMIT:
                actions.append(_summary(job, slot, now, status="SKIPPED"))
                next_slot = job.slot_due_after(now)
                break
            listed += 1
            actions.append(Record(job.job_id, slot, "SKIPPED", "job paused", job))
        elif due <= late_cut:
            misfired.append(slot)
        else:
            late.append(slot)
        after = due
    actions.extend(_apply_policy(job, misfired, ran_anyway=bool(late), dup=possible_duplicate))
    actions.extend(
        Fire(job.job_id, s, s + job.jitter, "SCHEDULE", possible_duplicate, job) for s in late
    )
    return Settled(actions, next_slot)


def _apply_policy(
    job: JobSchedule, misfired: list[int], *, ran_anyway: bool, dup: bool
) -> list[Action]:
    policy = job.misfire
    out: list[Action] = []
    if not misfired:
        return out
    if policy.policy == "SKIP":
        run: list[int] = []
    elif policy.policy == "ALL":
        run = misfired[-policy.max_catchup :]
    else:
        run = [] if ran_anyway else misfired[-1:]
    keep = set(run)
    for slot in misfired:
        if slot in keep:
            out.append(Fire(job.job_id, slot, slot + job.jitter, "CATCHUP", dup, job))
        elif policy.policy == "ALL":
            out.append(
                Record(
                    job.job_id,
                    slot,
                    "MISSED",
                    f"misfire=all ran the latest {policy.max_catchup}",
                    job,
                )
            )
        else:
            why = "misfire=skip" if policy.policy == "SKIP" else "misfire=once ran one slot"
            out.append(Record(job.job_id, slot, "SKIPPED", why, job))
    return out


def _too_old(window_ms: int) -> str:
    return f"misfired and older than the catch-up window ({window_ms} ms)"


def _summary(job: JobSchedule, first: int, until: int, status: str = "MISSED") -> Record:
    return Record(
        job.job_id,
        first,
        status,
        f"this and every later slot due up to {until} ms were not run; over {LIST_LIMIT} "
        "slots in one outage, so they are not listed one by one",
        job,
    )
