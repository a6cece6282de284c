"""An outage writes bounded records: at most max_catchup runs (1 for once, 0 for skip),
the merely-late slots, and per status one summary of the slots not run, whatever its
length; every slot owed is covered by exactly one action. Virtual clock throughout."""

from __future__ import annotations

import time
from itertools import pairwise
from typing import Any

import pytest

from cronstream.streams.core.misfire import LIST_LIMIT, Action, Fire, Record, settle
from cronstream.streams.core.partition import PartitionScheduler
from cronstream.streams.core.schedule import JobSchedule, Misfire

S = 1000
DAY = 86_400 * S
T0 = 1_800_000_000_000 - 1_800_000_000_000 % DAY  # a UTC midnight
NOW = T0 + 30 * DAY
THRESHOLD = 60 * S
# A 1 s job over (T0, NOW]: 30 x 86,400 = 2,592,000 slots. The last 60 are merely late
# (due within the 60 s threshold) and fire; the 2,591,940 before them are misfires.
SLOTS, LATE = 30 * 86_400, 60
MISFIRED = SLOTS - LATE


def _settle(job: JobSchedule, owed_from: int = T0, now: int = NOW) -> list[Action]:
    return settle(
        job, owed_from=owed_from, now=now, threshold_ms=THRESHOLD, possible_duplicate=True
    ).actions


def _every_second(policy: str, *, cap: int = 10, window: int = 30 * DAY, **kw: Any) -> JobSchedule:
    return JobSchedule("j", every_ms=S, misfire=Misfire(policy, cap, window), **kw)


def _covered(actions: list[Action]) -> list[tuple[int, int]]:
    """Each action's slots as (first, last), checked to be in order and disjoint."""
    spans = []
    for a in actions:
        last = a.last_ms if type(a) is Record and a.last_ms is not None else a.slot_ms
        assert a.slot_ms <= last
        spans.append((a.slot_ms, last))
    assert all(b[0] > a[1] for a, b in pairwise(spans)), spans
    return spans


def _slots_of(actions: list[Action]) -> int:
    return sum(a.slots if type(a) is Record else 1 for a in actions)


def test_a_30_day_outage_of_a_1s_job_with_misfire_all_is_10_catchups_and_one_summary() -> None:
    actions = _settle(_every_second("ALL"))
    summary, *fires = actions
    assert type(summary) is Record
    assert (summary.status, summary.slots) == ("MISSED", MISFIRED - 10) == ("MISSED", 2_591_930)
    assert (summary.slot_ms, summary.last_ms) == (T0 + S, NOW - (LATE + 10) * S)
    assert summary.reason == "misfire=all ran the latest 10 (2,591,930)"
    assert [(f.slot_ms, f.trigger) for f in fires if type(f) is Fire] == [
        *((NOW - k * S, "CATCHUP") for k in range(LATE + 9, LATE - 1, -1)),
        *((NOW - k * S, "SCHEDULE") for k in range(LATE - 1, -1, -1)),
    ]
    assert len(actions) == 1 + 10 + LATE
    _covered(actions)
    assert _slots_of(actions) == SLOTS  # none silent


@pytest.mark.parametrize(
    ("policy", "paused", "status", "reason", "catchups"),
    [
        ("SKIP", False, "SKIPPED", "misfire=skip", 0),
        ("ONCE", False, "SKIPPED", "misfire=once ran one slot", 0),  # a late slot ran
        ("ALL", True, "SKIPPED", "job paused", 0),
    ],
)
def test_skip_once_and_paused_write_one_summary_for_a_30_day_outage(
    policy: str, paused: bool, status: str, reason: str, catchups: int
) -> None:
    actions = _settle(_every_second(policy, paused=paused))
    summary = actions[0]
    assert type(summary) is Record
    owed = SLOTS if paused else MISFIRED  # a paused job fires no late slot either
    assert (summary.status, summary.slots, summary.reason) == (status, owed, f"{reason} ({owed:,})")
    assert (summary.slot_ms, summary.last_ms) == (T0 + S, T0 + owed * S)
    fires = [a for a in actions if type(a) is Fire]
    assert [f.trigger for f in fires] == ["SCHEDULE"] * (0 if paused else LATE)
    assert len(actions) == 1 + len(fires)
    _covered(actions)
    assert _slots_of(actions) == SLOTS


def test_misfire_once_without_a_late_slot_runs_the_latest_misfire() -> None:
    # A 500 ms threshold at NOW + 600: no slot is merely late.
    actions = settle(
        _every_second("ONCE"),
        owed_from=T0,
        now=NOW + 600,
        threshold_ms=500,
        possible_duplicate=True,
    ).actions
    summary, fire = actions
    assert type(summary) is Record
    assert type(fire) is Fire
    assert (summary.status, summary.slots, summary.last_ms) == ("SKIPPED", SLOTS - 1, NOW - S)
    assert (fire.slot_ms, fire.trigger) == (NOW, "CATCHUP")


def test_too_old_and_in_window_slots_are_one_record_per_status() -> None:
    """skip: MISSED for the slots older than the window, SKIPPED for those in it; all:
    one MISSED record for both kinds of slot not run, each cause counted."""
    window = DAY
    in_window = window // S - LATE  # misfired inside the window
    skip = _settle(_every_second("SKIP", window=window))
    assert [(a.status, a.slots) for a in skip if type(a) is Record] == [
        ("MISSED", SLOTS - window // S),
        ("SKIPPED", in_window),
    ]
    assert _slots_of(skip) == SLOTS
    every = _settle(_every_second("ALL", window=window))
    (missed,) = [a for a in every if type(a) is Record]
    assert missed.slots == SLOTS - LATE - 10
    assert missed.reason == (
        f"misfired and older than the catch-up window ({window} ms) ({SLOTS - window // S:,}); "
        f"misfire=all ran the latest 10 ({in_window - 10:,})"
    )
    _covered(every)


def test_a_short_outage_lists_each_slot_and_a_longer_one_is_summarised() -> None:
    """Up to LIST_LIMIT slots of one status are listed under their own run ids."""
    job = _every_second("SKIP", window=DAY)
    owed = T0 + THRESHOLD + LIST_LIMIT * S  # exactly LIST_LIMIT misfires
    listed = [a for a in _settle(job, T0, owed) if type(a) is Record]
    assert [(a.slot_ms, a.slots, a.reason) for a in listed] == [
        (T0 + k * S, 1, "misfire=skip") for k in range(1, LIST_LIMIT + 1)
    ]
    summarised = [a for a in _settle(job, T0, owed + S) if type(a) is Record]
    assert [(a.slot_ms, a.slots, a.last_ms) for a in summarised] == [
        (T0 + S, LIST_LIMIT + 1, T0 + (LIST_LIMIT + 1) * S)
    ]


def test_jitter_shifts_what_is_owed_by_due_time() -> None:
    job = _every_second("ALL", cap=3, jitter_ms=999)
    jitter = job.jitter
    assert 0 < jitter < S
    actions = _settle(job, owed_from=T0 + jitter, now=NOW + jitter)  # due = slot + jitter
    fires = [a for a in actions if type(a) is Fire]
    assert [f.due_ms - f.slot_ms for f in fires] == [jitter] * (3 + LATE)
    assert fires[-1].slot_ms == NOW
    assert _slots_of(actions) == SLOTS
    _covered(actions)


def test_bounds_cut_what_an_outage_owes() -> None:
    job = _every_second("SKIP", start_ms=T0 + DAY + 1, end_ms=T0 + 2 * DAY)
    (summary,) = _settle(job)
    assert type(summary) is Record
    assert (summary.slot_ms, summary.last_ms, summary.slots) == (T0 + DAY + S, T0 + 2 * DAY, 86_400)


def test_a_cron_job_firing_every_second_is_settled_without_walking_its_slots() -> None:
    """Before: 2,592,000 records and 25 s of CPU (UTC; 30 s in Europe/Paris, whose
    30 days here hold no transition)."""
    for zone in ("UTC", "Europe/Paris"):
        job = JobSchedule(
            "c", cron="* * * * * *", timezone=zone, misfire=Misfire("ALL", 10, 30 * DAY)
        )
        started = time.process_time()
        actions = _settle(job)
        cpu = time.process_time() - started
        assert [(type(a).__name__, _slots_of([a])) for a in actions[:2]] == [
            ("Record", MISFIRED - 10),
            ("Fire", 1),
        ]
        assert len(actions) == 1 + 10 + LATE
        assert _slots_of(actions) == SLOTS
        assert cpu < 0.5, f"{zone}: {cpu:.3f} s"


def test_a_summary_keeps_the_watermark_and_the_next_slot() -> None:
    """The partition holds the first slot after now; nothing owed is fired twice."""
    core = PartitionScheduler(0, fired_through=T0, threshold_ms=THRESHOLD)
    actions = core.recover(_every_second("ALL"), now=NOW, known=True, arrived_ms=0)
    assert _slots_of(actions) == SLOTS
    assert [(a.slot_ms, a.trigger) for a in core.due(NOW + S) if type(a) is Fire] == [
        (NOW + S, "SCHEDULE")
    ]
    assert core.fired_through == NOW + S
