"""Worker logic with plain values: backoff bounds and contiguous commit points."""

from __future__ import annotations

import random

import pytest

from cronstream.consumers.core.backoff import backoff_ceiling_ms, next_attempt_due
from cronstream.consumers.core.dedup import Dedup
from cronstream.consumers.core.offsets import OffsetTracker
from cronstream.schemas.events import RetryPolicy

POLICY = RetryPolicy(max_attempts=5, initial_backoff_ms=1000, max_backoff_ms=5000)


@pytest.mark.parametrize(
    ("attempt", "ceiling"), [(1, 1000), (2, 2000), (3, 4000), (4, 5000), (40, 5000), (100, 5000)]
)
def test_backoff_ceiling_doubles_up_to_the_cap(attempt: int, ceiling: int) -> None:
    assert backoff_ceiling_ms(POLICY, attempt) == ceiling


def test_full_jitter_stays_within_zero_and_the_ceiling() -> None:
    rng = random.Random(7)
    waits = [next_attempt_due(POLICY, 3, 0, uniform=rng.uniform) for _ in range(2000)]
    assert all(w is not None and 0 <= w <= 4000 for w in waits)
    assert min(w for w in waits if w is not None) < 400  # spread, not a fixed delay
    assert max(w for w in waits if w is not None) > 3600


def test_no_attempt_after_the_last() -> None:
    assert next_attempt_due(POLICY, 5, 0) is None
    assert next_attempt_due(RetryPolicy(max_attempts=1), 1, 0) is None


def test_commit_point_never_passes_an_unfinished_offset() -> None:
    tracker = OffsetTracker()
    assert tracker.commit_point() is None
    for offset in (10, 11, 12, 13):
        tracker.start(offset)
    assert tracker.commit_point() == 10
    tracker.finish(12)
    tracker.finish(11)
    assert tracker.commit_point() == 10
    tracker.finish(10)
    assert tracker.commit_point() == 13
    tracker.finish(13)
    assert tracker.commit_point() == 14
    assert len(tracker) == 0


def test_finishing_an_offset_never_started_is_a_bug() -> None:
    with pytest.raises(KeyError):
        OffsetTracker().finish(3)


def test_random_completion_orders_keep_the_commit_point_contiguous() -> None:
    rng = random.Random(3)
    for _ in range(200):
        offsets = list(range(50, 50 + rng.randint(1, 40)))
        tracker = OffsetTracker()
        for o in offsets:
            tracker.start(o)
        done: set[int] = set()
        for o in rng.sample(offsets, len(offsets)):
            tracker.finish(o)
            done.add(o)
            point = tracker.commit_point()
            assert point is not None
            assert all(x in done for x in range(50, point))
            assert point == 50 + len(offsets) or point not in done


HOUR = 3_600_000


def test_dedup_knows_settled_runs_and_finished_attempts() -> None:
    dedup = Dedup(24 * HOUR, 1000, now_ms=0)
    dedup.note("a", 1, "FAILED")
    dedup.note("b", 2, "SUCCEEDED")
    dedup.note("c", 1, "STARTED")  # not an end: ignored
    dedup.note("d", 3, "TIMED_OUT")
    assert [dedup.seen("a", 1), dedup.seen("a", 2)] == [True, False]
    assert [dedup.seen("b", 1), dedup.seen("b", 2), dedup.seen("b", 3)] == [True, True, True]
    assert not dedup.seen("c", 1)
    assert [dedup.seen("d", 2), dedup.seen("d", 3), dedup.seen("d", 4)] == [True, True, False]
    dedup.note("a", 2, "DEAD_LETTERED")
    assert [dedup.seen("a", 2), dedup.seen("a", 7)] == [True, True]
    assert len(dedup) == 3


def test_dedup_finds_runs_across_generations_until_the_lookback() -> None:
    dedup = Dedup(8 * HOUR, 10_000, now_ms=0)
    dedup.note("old", 1, "FAILED")
    for hour in range(1, 9):
        assert dedup.prune(hour * HOUR) == 0
        dedup.note(f"run-{hour}", 1, "SUCCEEDED")
    dedup.note("old", 2, "CANCELED")  # the run settles generations later
    assert [dedup.seen("old", 1), dedup.seen("old", 2)] == [True, True]
    assert dedup.seen("run-1", 1)
    dedup.prune(9 * HOUR + 1)  # the first generation (0-1 h) is past the 8 h lookback
    assert dedup.seen("old", 1)  # settled at 8 h: every attempt counts as seen
    assert dedup.seen("run-1", 1)  # noted at 1 h, in a generation that ran until 2 h
    dedup.prune(10 * HOUR + 1)
    assert [dedup.seen("run-1", 1), dedup.seen("run-2", 1)] == [False, True]
    dedup.prune(20 * HOUR)
    assert [dedup.seen("run-8", 1), dedup.seen("old", 2)] == [False, False]
    assert dedup.forgotten == 0


def test_dedup_memory_is_capped_oldest_first() -> None:
    dedup = Dedup(24 * HOUR, 800, now_ms=0)
    forgotten = 0
    for i in range(5000):
        dedup.note(f"r{i}", 1, "SUCCEEDED")
        if i % 50 == 49:  # a prune every 50 notes (the worker's: every 5 s)
            forgotten += dedup.prune(1000 + i)
    assert len(dedup) <= 800 + 100
    assert [dedup.seen("r4999", 1), dedup.seen("r4300", 1)] == [True, True]
    assert [dedup.seen("r0", 1), dedup.seen("r3000", 1)] == [False, False]
    assert forgotten == dedup.forgotten == 5000 - len(dedup)


def test_dedup_keeps_everything_while_held_and_never_drops_the_newest() -> None:
    dedup = Dedup(24 * HOUR, 800, now_ms=0)
    for i in range(2000):  # far more than the capacity between two prunes
        dedup.note(f"r{i}", 1, "SUCCEEDED")
    assert dedup.prune(1000) == 0  # over the capacity, but it is the newest generation
    assert [dedup.seen("r0", 1), dedup.seen("r1999", 1)] == [True, True]
    dedup.note("later", 1, "SUCCEEDED")
    assert dedup.prune(2000, hold=True) == 0  # a history replay is going on: keep all
    assert len(dedup) == 2001
    assert dedup.prune(3000) == 2000  # the oldest generation goes, the newest stays
    assert [dedup.seen("r0", 1), dedup.seen("later", 1)] == [False, True]
