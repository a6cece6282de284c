"""The lookahead's two pure parts: the scheduler's memory of runs emitted ahead (what a
pause must cancel) and the worker's delay queue (runs held until due)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cronstream.consumers.core.delay import DelayQueue
from cronstream.streams.core.ahead import AheadRuns


def test_a_pause_takes_only_the_jobs_runs_not_yet_due() -> None:
    ahead = AheadRuns()
    ahead.add("a", 1_000, "a@1")
    ahead.add("b", 1_000, "b@1")
    ahead.add("a", 2_000, "a@2")
    ahead.add("a", 3_000, "a@3")
    assert ahead.take("a", 1_500) == ["a@2", "a@3"]
    assert ahead.take("a", 1_500) == []  # taken once
    assert ahead.take("b", 1_000) == []  # due: the worker starts it, whatever comes


def test_pruning_forgets_what_came_due_and_keeps_the_rest() -> None:
    ahead = AheadRuns()
    for k in range(10):
        ahead.add("j", 1_000 * k, f"j@{k}")
        ahead.add(f"other{k}", 1_000 * k, f"o@{k}")
    ahead.prune(4_500)
    assert len(ahead) == 10  # five due times each of two jobs went
    assert ahead.take("j", 0) == [f"j@{k}" for k in range(5, 10)]
    assert ahead.take("other3", 0) == []
    assert ahead.take("other7", 0) == ["o@7"]
    ahead.prune(10_000)
    assert len(ahead) == 0


def test_pruning_after_a_take_and_new_runs_keeps_the_new_ones() -> None:
    ahead = AheadRuns()
    ahead.add("j", 1_000, "j@1")
    assert ahead.take("j", 0) == ["j@1"]
    ahead.add("j", 5_000, "j@5")
    ahead.prune(2_000)  # walks j's old entry: j's new run stays
    assert ahead.take("j", 2_000) == ["j@5"]


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 5))), st.integers(0, 100))
def test_the_delay_queue_hands_over_exactly_what_is_due_in_due_order(
    items: list[tuple[int, int]], now: int
) -> None:
    queue: DelayQueue[tuple[int, int, int]] = DelayQueue()
    for seq, (due, tag) in enumerate(items):
        queue.push(due, (due, seq, tag))
    out = queue.pop_due(now)
    assert out == sorted(
        item for item in ((d, s, t) for s, (d, t) in enumerate(items)) if item[0] <= now
    )
    assert len(queue) == len(items) - len(out)
    assert queue.next_due() is None or queue.next_due() > now  # type: ignore[operator]
    queue.keep(lambda item: item[2] != 0)
    rest = queue.pop_due(10**9)
    assert all(item[2] != 0 for item in rest)
    assert rest == sorted(rest)
