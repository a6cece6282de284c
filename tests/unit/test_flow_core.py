"""A flow run's core (streams.core.flow): dependency order, trigger rules, the ends of a
flow run, reruns and replays; and, over random DAGs and outcomes, its invariants."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.streams.core.flow import (
    ALL_DONE,
    ANY_FAILED,
    FlowRun,
    Node,
    NodeState,
    Start,
    rerun_failed,
    restarted,
    settle,
    start,
)

RUN = "etl@2026-11-25T02:00:00.000Z"
DIAMOND = [Node("a"), Node("b", ("a",)), Node("c", ("a",)), Node("d", ("b", "c"))]


def names(starts: list[Start]) -> list[str]:
    return [s.node for s in starts]


def finish(run: FlowRun, node: str, outcome: str = "SUCCEEDED") -> list[Start]:
    return settle(run, run.runs[node], outcome)


def test_a_diamond_runs_each_node_once_in_dependency_order() -> None:
    run, first = start("etl", RUN, DIAMOND)
    assert first == [Start("a", f"{RUN}/a")]
    assert names(finish(run, "a")) == ["b", "c"]
    assert finish(run, "b") == []  # d waits for c
    assert names(finish(run, "c")) == ["d"]
    assert run.status == "RUNNING"
    assert finish(run, "d") == []
    assert run.status == "SUCCEEDED"
    assert run.runs == {n: f"{RUN}/{n}" for n in "abcd"}


def test_a_dead_letter_marks_the_descendants_upstream_failed_and_the_flow_failed() -> None:
    nodes = [*DIAMOND, Node("cleanup", ("d",), ANY_FAILED), Node("report", ("d",), ALL_DONE)]
    run, _ = start("etl", RUN, nodes)
    finish(run, "a")
    assert finish(run, "b", "DEAD_LETTERED") == []
    # d cannot run (b failed): decided once c ends, and the cascade starts cleanup/report
    assert names(finish(run, "c")) == ["cleanup", "report"]
    assert run.states["d"] is NodeState.UPSTREAM_FAILED
    finish(run, "cleanup")
    finish(run, "report")
    assert run.status == "FAILED"


def test_a_failed_attempt_with_a_retry_on_its_way_changes_nothing() -> None:
    run, _ = start("etl", RUN, DIAMOND)
    assert settle(run, run.runs["a"], "FAILED", retrying=True) == []
    assert run.states["a"] is NodeState.RUNNING
    assert names(settle(run, run.runs["a"], "SUCCEEDED")) == ["b", "c"]


def test_a_cleanup_node_is_skipped_when_nothing_failed_and_the_flow_succeeds() -> None:
    run, _ = start(
        "etl", RUN, [Node("a"), Node("cleanup", ("a",), ANY_FAILED), Node("z", ("cleanup",))]
    )
    assert names(finish(run, "a")) == ["z"]  # cleanup SKIPPED; z after it runs
    assert run.states["cleanup"] is NodeState.SKIPPED
    finish(run, "z")
    assert run.status == "SUCCEEDED"


def test_rerun_from_failed_runs_only_the_failed_part_under_new_run_ids() -> None:
    run, _ = start("etl", RUN, DIAMOND)
    finish(run, "a")
    finish(run, "b", "DEAD_LETTERED")
    finish(run, "c")
    assert run.status == "FAILED"
    again = rerun_failed(run)
    assert again == [Start("b", f"{RUN}/b~r1")]
    assert run.status == "RUNNING"
    assert settle(run, f"{RUN}/b", "SUCCEEDED") == []  # the old run of b is not current
    assert names(finish(run, "b")) == ["d"]
    assert run.runs["d"] == f"{RUN}/d~r1"
    finish(run, "d")
    assert run.status == "SUCCEEDED"
    assert rerun_failed(run) == []  # nothing failed: nothing to rerun


def test_an_outcome_applied_twice_gives_its_starts_again_flagged() -> None:
    run, _ = start("etl", RUN, DIAMOND)
    first = finish(run, "a")
    again = settle(run, f"{RUN}/a", "SUCCEEDED")
    assert again == [Start(s.node, s.run_id, True) for s in first]
    assert restarted(run) == again  # a start event seen again: the running nodes


def test_outcomes_of_other_runs_and_nodes_not_started_are_ignored() -> None:
    run, _ = start("etl", RUN, DIAMOND)
    assert settle(run, "etl@2026-11-24T02:00:00.000Z/a", "SUCCEEDED") == []
    assert settle(run, f"{RUN}/d", "SUCCEEDED") == []  # d never started
    assert settle(run, f"{RUN}/nope", "SUCCEEDED") == []
    assert run.states["d"] is NodeState.PENDING


@st.composite
def dags(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 12))
    rules = st.sampled_from(["ALL_SUCCESS", ALL_DONE, ANY_FAILED])
    nodes = []
    for i in range(count):
        after = draw(st.sets(st.integers(0, i - 1), max_size=3)) if i else set()
        nodes.append(Node(f"n{i}", tuple(f"n{j}" for j in sorted(after)), draw(rules)))
    return nodes


@settings(max_examples=300, deadline=None)
@given(
    dags(),
    st.lists(st.sampled_from(["SUCCEEDED", "DEAD_LETTERED"]), min_size=12, max_size=12),
    st.randoms(use_true_random=False),
)
def test_any_dag_runs_each_node_at_most_once_after_its_upstream_and_ends_once(
    nodes: list[Node], outcomes: list[str], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    run, pending = start("f", RUN, nodes)
    started: list[str] = []
    by_name = {n.name: n for n in nodes}
    ended_at: dict[str, int] = {}
    step = 0
    while pending:
        rnd.shuffle(pending)
        item = pending.pop()
        node = by_name[item.node]
        assert not item.possible_duplicate
        assert item.node not in started, "a node started twice"
        assert all(
            u in ended_at or run.states[u] in (NodeState.UPSTREAM_FAILED, NodeState.SKIPPED)
            for u in node.after
        ), "started before an upstream ended"
        started.append(item.node)
        outcome = outcomes[int(item.node[1:])]
        before = dict(run.states)
        pending += settle(run, item.run_id, outcome)
        ended_at[item.node] = step
        step += 1
        replay = settle(run, item.run_id, outcome)  # a replay changes nothing
        assert all(s.possible_duplicate for s in replay)
        assert before != run.states
    assert run.status in ("SUCCEEDED", "FAILED")
    assert all(s not in (NodeState.PENDING, NodeState.RUNNING) for s in run.states.values())
    failed = any(s in (NodeState.FAILED, NodeState.UPSTREAM_FAILED) for s in run.states.values())
    assert run.status == ("FAILED" if failed else "SUCCEEDED")
