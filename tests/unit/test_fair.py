"""FairQueue: one tenant's burst does not hold back another's runs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cronstream.consumers.core.fair import FairQueue


def tenant(item: tuple[str, int]) -> str:
    return item[0]


def test_a_burst_waits_its_turn() -> None:
    queue: FairQueue[tuple[str, int]] = FairQueue(tenant)
    for i in range(100_000):
        queue.append(("a", i))
    queue.append(("b", 0))
    queue.append(("b", 1))
    taken = [queue.popleft() for _ in range(4)]
    assert taken == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert len(queue) == 100_000 - 2
    assert queue.peek() == ("a", 2)


def test_weights_give_a_tenant_more_starts_per_round() -> None:
    queue: FairQueue[tuple[str, int]] = FairQueue(tenant, {"a": 3})
    for i in range(6):
        queue.append(("a", i))
        queue.append(("b", i))
    taken = [queue.popleft()[0] for _ in range(8)]
    assert taken == ["a", "a", "a", "b", "a", "a", "a", "b"]


def test_keep_drops_and_keeps_each_tenants_order() -> None:
    queue: FairQueue[tuple[str, int]] = FairQueue(tenant)
    for i in range(5):
        queue.append(("a", i))
        queue.append(("b", i))
    queue.keep(lambda item: item[1] % 2 == 0)
    assert len(queue) == 6
    taken = [queue.popleft() for _ in range(6)]
    assert [i for t, i in taken if t == "a"] == [0, 2, 4]
    assert [i for t, i in taken if t == "b"] == [0, 2, 4]


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=200))
def test_every_run_comes_out_once_in_its_tenants_order(ops: list[tuple[str, bool]]) -> None:
    """Appends (True) and pops (False) interleaved: each tenant's FIFO holds, nothing
    is lost or repeated, and no tenant waits more than one round."""
    queue: FairQueue[tuple[str, int]] = FairQueue(tenant)
    sent: dict[str, int] = {}
    taken: list[tuple[str, int]] = []
    for who, push in ops:
        if push or not queue:
            sent[who] = sent.get(who, 0) + 1
            queue.append((who, sent[who]))
        else:
            taken.append(queue.popleft())
    while queue:
        waiting = {t for t, _ in queue}
        round_ = [queue.popleft() for _ in range(min(len(waiting), len(queue)))]
        assert {t for t, _ in round_} == waiting  # one round serves every waiting tenant
        taken.extend(round_)
    for who, count in sent.items():
        assert [i for t, i in taken if t == who] == list(range(1, count + 1))
