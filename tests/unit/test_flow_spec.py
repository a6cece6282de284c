"""Flow specs (producers.flows): a DAG is accepted as written; a cycle, a dangling edge,
an unknown node or a node a job would refuse is refused with the path named."""

from __future__ import annotations

from typing import Any

import pytest

from cronstream.producers.flows import MAX_NODES, find_cycle, flow_from_spec, flow_schedule
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import Priority
from cronstream.schemas.flows import FlowDefinition, FlowTriggerRule
from cronstream.schemas.serde import Codec
from tests.fakes import FakeRegistry


def node(name: str, *after: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "after": list(after), "target": "python", "callable": "m:f", **more}


def refused(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        flow_from_spec(spec, max_payload_bytes=65536)
    return caught.value.problems


def test_a_diamond_is_read_with_each_nodes_job_fields() -> None:
    flow = flow_from_spec(
        {
            "id": "etl",
            "nodes": [
                node("a", priority="high", max_attempts=5, timeout="2m", payload={"day": 1}),
                node("b", "a"),
                node("c", "a"),
                node("d", "b", "c", trigger="all_done"),
            ],
        },
        max_payload_bytes=65536,
    )
    a, _, _, d = flow.nodes
    assert (a.priority, a.retry.max_attempts, a.timeout_ms, a.payload) == (
        Priority.HIGH,
        5,
        120_000,
        '{"day":1}',
    )
    assert d.after == ("b", "c")
    assert d.trigger_rule is FlowTriggerRule.ALL_DONE
    codec = Codec(FakeRegistry())
    assert codec.decode(codec.encode("cstest.flows", flow), FlowDefinition) == flow


def test_a_cycle_is_refused_with_its_path() -> None:
    problems = refused({"id": "f", "nodes": [node("a", "c"), node("b", "a"), node("c", "b")]})
    assert problems == ["cycle: a -> b -> c -> a"]


def test_dangling_edges_repeated_names_and_self_edges_are_each_named() -> None:
    problems = refused({"id": "f", "nodes": [node("a", "ghost"), node("a"), node("b", "b")]})
    assert problems == [
        "nodes[1]: node name 'a' repeats nodes[0]",
        "nodes[0] (a): after 'ghost' is not a node of the flow",
        "nodes[2] (b): after names the node itself",
    ]


def test_a_node_is_held_to_the_job_rules_and_has_no_schedule() -> None:
    problems = refused(
        {
            "id": "f",
            "nodes": [
                node("a", cron="* * * * *"),
                {"name": "b/x", "target": "ftp"},
                node("c", trigger="sometimes"),
            ],
        }
    )
    assert "nodes[0] (a): unknown keys ['cron'] (a node has no schedule of its own)" in problems
    assert any(p.startswith("nodes[1] (b/x): node name 'b/x' must be") for p in problems)
    assert any(p.startswith("nodes[1] (b/x): target type 'ftp' is not one of") for p in problems)
    assert (
        "nodes[2] (c): trigger 'sometimes' is not one of all_success, all_done, any_failed"
        in problems
    )


def test_a_flow_needs_an_id_and_nodes_within_the_limit() -> None:
    assert refused({"nodes": []}) == ["a flow id is required", "nodes must be a non-empty list"]
    problems = refused({"id": "f", "nodes": [node(f"n{i}") for i in range(MAX_NODES + 1)]})
    assert problems == [f"{MAX_NODES + 1:,} nodes, over the {MAX_NODES:,} limit"]


def test_a_5000_node_chain_is_checked_without_recursion() -> None:
    chain = {f"n{i}": ((f"n{i - 1}",) if i else ()) for i in range(5000)}
    assert find_cycle(chain) is None
    chain["n0"] = ("n4999",)
    cycle = find_cycle(chain)
    assert cycle is not None
    assert cycle[0] == cycle[-1]
    assert len(cycle) == 5001


def test_the_example_flows_file_is_valid_and_each_flow_has_its_schedule_job() -> None:
    from cronstream.producers.flows import load_flows_file
    from cronstream.runtime.settings import REPO_ROOT
    from cronstream.schemas.events import Concurrency

    ((flow, schedule),) = load_flows_file(
        REPO_ROOT / "examples" / "flows.yaml", max_payload_bytes=65536
    )
    assert flow.flow_id == schedule.job_id == "example-etl"
    assert schedule.target.type == "flow"
    # A flow's concurrency is its runs', kept by the coordinator (docs/concepts.md, Flows).
    assert schedule.concurrency is Concurrency.ALLOW
    assert [n.name for n in flow.nodes] == [
        "extract",
        "transform",
        "validate",
        "load",
        "page-oncall",
    ]


def test_a_flows_deadline_is_its_schedule_jobs() -> None:
    spec = {
        "id": "etl",
        "every": "1h",
        "deadline": "10m",
        "nodes": [{"name": "a", "target": "python", "callable": "m:f"}],
    }
    assert flow_schedule(spec, max_payload_bytes=100).deadline_ms == 600_000
    flow_from_spec(spec, max_payload_bytes=100)  # a key of the flow's too
