"""Worker logic with plain values: backoff bounds and contiguous commit points."""

from __future__ import annotations

import random

import pytest

from consumers.core.backoff import backoff_ceiling_ms, next_attempt_due
from consumers.core.offsets import OffsetTracker
from schemas.events import RetryPolicy

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
