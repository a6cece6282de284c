"""Turn a flow spec (a flows.yaml entry) into a validated FlowDefinition.

A flow is a named DAG of nodes; a node is a target with a job's retry, timeout and
priority, run after the nodes it names in ``after``::

    id: nightly-etl
    nodes:
      - name: extract
        target: http
        url: https://etl.example.com/extract
      - name: transform
        after: [extract]
        target: python
        callable: "etl.tasks:transform"
        max_attempts: 5
      - name: page-oncall
        after: [transform]
        trigger: any_failed         # all_success (default) | all_done | any_failed
        target: http
        url: https://alerts.example.com/hook

A node's target fields are read and checked by the job rules (``schemas.definition``), so a
node refuses what a job would. The graph is refused, with every problem at once and the
path named, when a node name repeats, an edge names no node of the flow (or the node
itself), or the edges close a cycle (``cycle: a -> b -> c -> a``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from cronstream.producers.spec import yaml_entries
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.definition.spec import TARGET_KEYS
from cronstream.schemas.errors import SpecError
from cronstream.schemas.events import Concurrency, JobDefinition, execution, utc_now
from cronstream.schemas.flows import FlowDefinition, FlowNode, FlowTriggerRule
from cronstream.schemas.limits import MAX_JOB_ID, name_problems

MAX_NODES = 5_000
MAX_NODE_NAME = 100
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # no '/', '@', '~': run ids
# What a node may say besides its name, edges and trigger rule: a job's target part.
NODE_JOB_KEYS = TARGET_KEYS
NODE_KEYS = NODE_JOB_KEYS | {"name", "after", "trigger"}
# A flow's schedule: what a job says about when it runs (the flow's job, target flow),
# its triggers too: a record of its source topic or its upstream jobs' day starts a flow
# run as it would start a job's run (the flow run is named by that run's id).
SCHEDULE_KEYS = frozenset(
    {
        "cron",
        "every",
        "anchor",
        "at",
        "tz",
        "start",
        "end",
        "jitter",
        "misfire",
        "catchup",
        "catchup_window",
        "paused",
        "priority",
        "deadline",
        "on",
        "after",
    }
)
# ``concurrency`` is the flow run's (the coordinator's), not its schedule job's: that
# job's run only publishes the start, in milliseconds.
FLOW_KEYS = frozenset({"id", "tenant", "nodes", "concurrency"}) | SCHEDULE_KEYS


def flow_from_spec(
    spec: Mapping[str, Any], *, max_payload_bytes: int, now: datetime | None = None
) -> FlowDefinition:
    """Build and validate a FlowDefinition; SpecError lists every problem."""
    flow_id = str(spec.get("id") or "")
    problems = name_problems("flow id", flow_id, MAX_JOB_ID)
    unknown = sorted(set(spec) - FLOW_KEYS)
    if unknown:
        problems.append(f"unknown keys {unknown}")
    raw_nodes = spec.get("nodes")
    nodes: list[FlowNode] = []
    if not isinstance(raw_nodes, list) or not raw_nodes:
        problems.append("nodes must be a non-empty list")
    elif len(raw_nodes) > MAX_NODES:
        problems.append(f"{len(raw_nodes):,} nodes, over the {MAX_NODES:,} limit")
    else:
        for index, raw in enumerate(raw_nodes):
            node, found = _node(flow_id, index, raw, max_payload_bytes)
            problems += found
            if node is not None:
                nodes.append(node)
        if len(nodes) == len(raw_nodes):
            problems += graph_problems(nodes)
    policy = str(spec.get("concurrency") or "allow").upper()
    if policy not in Concurrency.__members__:
        problems.append(
            f"concurrency {policy.lower()[:40]!r} must be one of "
            f"{', '.join(c.value.lower() for c in Concurrency)}"
        )
    if problems:
        raise SpecError(f"flow {flow_id or '(no id)'}", problems)
    return FlowDefinition(
        flow_id=flow_id,
        tenant=str(spec.get("tenant") or "default"),
        nodes=tuple(nodes),
        updated_at=now or utc_now(),
        concurrency=Concurrency(policy),
    )


def flow_schedule(spec: Mapping[str, Any], *, max_payload_bytes: int) -> JobDefinition:
    """The flow's job: its schedule keys (none: manual triggers only), target ``flow``;
    each of its runs ``FLOW@<slot>`` starts a flow run."""
    job_spec = {k: v for k, v in spec.items() if k in SCHEDULE_KEYS}
    return job_from_spec(
        {**job_spec, "id": spec.get("id"), "tenant": spec.get("tenant"), "target": "flow"},
        max_payload_bytes=max_payload_bytes,
    )


def load_flows_file(
    path: Path, *, max_payload_bytes: int
) -> list[tuple[FlowDefinition, JobDefinition]]:
    """Read a flows YAML file (a list, or ``flows:`` with a list): every flow and its
    schedule, all checked; SpecError naming each entry's problems."""
    entries = yaml_entries(path, "flows")
    out, problems = [], []
    for index, entry in enumerate(entries):
        try:
            flow = flow_from_spec(entry, max_payload_bytes=max_payload_bytes)
            out.append((flow, flow_schedule(entry, max_payload_bytes=max_payload_bytes)))
        except SpecError as exc:
            problems += [f"entry {index + 1} ({exc.subject}): {p}" for p in exc.problems]
    if problems:
        raise SpecError(str(path), problems)
    return out


def _node(
    flow_id: str, index: int, raw: Any, max_payload_bytes: int
) -> tuple[FlowNode | None, list[str]]:
    if not isinstance(raw, Mapping):
        return None, [f"nodes[{index}] is not a mapping"]
    name = str(raw.get("name") or "")
    where = f"nodes[{index}] ({name})" if name else f"nodes[{index}]"
    problems = [f"{where}: {p}" for p in node_name_problems(name)]
    unknown = sorted(set(raw) - NODE_KEYS)
    if unknown:
        problems.append(f"{where}: unknown keys {unknown} (a node has no schedule of its own)")
    after = raw.get("after") or []
    if isinstance(after, str):
        after = [after]
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        problems.append(f"{where}: after must be a list of node names")
        after = []
    text = str(raw.get("trigger") or "all_success").upper()
    if text not in FlowTriggerRule.__members__:
        problems.append(
            f"{where}: trigger {text.lower()!r} is not one of all_success, all_done, any_failed"
        )
    try:
        job = job_from_spec(
            {"id": flow_id or "flow", **{k: v for k, v in raw.items() if k in NODE_JOB_KEYS}},
            max_payload_bytes=max_payload_bytes,
        )
    except SpecError as exc:
        problems += [f"{where}: {p}" for p in exc.problems]
        return None, problems
    if problems:
        return None, problems
    return FlowNode(
        name=name,
        **execution(job),
        after=tuple(after),
        trigger_rule=FlowTriggerRule[text],
    ), []


def node_name_problems(name: str) -> list[str]:
    if not name:
        return ["a node needs a name"]
    if len(name) > MAX_NODE_NAME or not _NODE_NAME.match(name):
        return [
            f"node name {name[:80]!r} must be 1-{MAX_NODE_NAME} letters, digits, '.', "
            "'_' or '-', starting with a letter or digit"
        ]
    return []


def graph_problems(nodes: Sequence[FlowNode]) -> list[str]:
    """Repeated names, edges to no node of the flow, and cycles (each named by its
    path), in the order of the nodes."""
    problems = []
    names: dict[str, int] = {}
    for index, node in enumerate(nodes):
        if node.name in names:
            problems.append(
                f"nodes[{index}]: node name {node.name!r} repeats nodes[{names[node.name]}]"
            )
        names.setdefault(node.name, index)
    for index, node in enumerate(nodes):
        for upstream in node.after:
            if upstream == node.name:
                problems.append(f"nodes[{index}] ({node.name}): after names the node itself")
            elif upstream not in names:
                problems.append(
                    f"nodes[{index}] ({node.name}): after {upstream!r} is not a node of the flow"
                )
        if len(set(node.after)) != len(node.after):
            problems.append(f"nodes[{index}] ({node.name}): after names a node twice")
    if problems:
        return problems
    cycle = find_cycle({node.name: node.after for node in nodes})
    if cycle:
        problems.append("cycle: " + " -> ".join(cycle))
    return problems


def find_cycle(after: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle of the graph (node -> the nodes it comes after) as a path whose last
    node is its first, or None. Iterative: a 5,000-node chain is no recursion limit."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in after:
        if state.get(root):
            continue
        path = [root]
        todo = [iter(after[root])]
        state[root] = 1
        while todo:
            step = next(todo[-1], None)
            if step is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(step) == 1:
                start = path.index(step)
                return [*reversed([*path[start:], step])]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                todo.append(iter(after[step]))
    return None
