"""One flow run, as the flows coordinator sees it: which node runs start, when, and how
the run ends. Pure: it takes events and returns what to emit.

A flow run ``FLOW@<slot>`` starts its root nodes (those that come after no node). Each
node run is ``FLOW@<slot>/NODE`` (``~rN`` appended for the N-th rerun), so a start
emitted twice names the same run and a worker executes it once. When a node's run ends
(succeeded, or failed for good: dead-lettered, not retried, cancelled), every node whose
upstream nodes have all ended is decided by its trigger rule:

- ALL_SUCCESS: runs when each upstream succeeded (or was SKIPPED); otherwise
  UPSTREAM_FAILED (not run);
- ALL_DONE: runs whatever they ended with;
- ANY_FAILED: runs when one of them failed (or was UPSTREAM_FAILED); otherwise SKIPPED.

Deciding one node can decide others (UPSTREAM_FAILED cascades). When every node has
ended, the flow run ends: FAILED if a node FAILED or was UPSTREAM_FAILED, else
SUCCEEDED. ``rerun_failed`` runs the FAILED and UPSTREAM_FAILED nodes again (and the
SKIPPED ones, whose rule is judged again), keeping what succeeded.

Concurrency per flow (``Active``, one per flow with a policy other than ALLOW): a new
run while an earlier one is RUNNING is SKIPPED (FORBID), QUEUED until the runs before
it ended (QUEUE: ``begin`` starts it), or starts after the running ones are CANCELED
(REPLACE: ``cancel`` gives the node runs to stop).

Replays: an event applied twice (the coordinator restarted between updating its table
and committing its input) changes nothing, and gives back the starts it caused the first
time, flagged as possible duplicates: a start lost in the crash is emitted again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class NodeState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    SKIPPED = "SKIPPED"


ENDED = frozenset(
    {NodeState.SUCCEEDED, NodeState.FAILED, NodeState.UPSTREAM_FAILED, NodeState.SKIPPED}
)
FAILED_ONES = frozenset({NodeState.FAILED, NodeState.UPSTREAM_FAILED})
# A worker's final outcomes of a node's run, as node states (FAILED and TIMED_OUT with a
# retry on its way are not final: the coordinator waits for the next attempt).
FINAL_OUTCOMES = {
    "SUCCEEDED": NodeState.SUCCEEDED,
    "DEAD_LETTERED": NodeState.FAILED,
    "CANCELED": NodeState.FAILED,
    "FAILED": NodeState.FAILED,
    "TIMED_OUT": NodeState.FAILED,
}
ALL_SUCCESS, ALL_DONE, ANY_FAILED = "ALL_SUCCESS", "ALL_DONE", "ANY_FAILED"
GOING = frozenset({"RUNNING", "QUEUED"})  # a flow run's statuses before it ended


@dataclass(frozen=True, slots=True)
class Node:
    """What the core needs of a FlowNode."""

    name: str
    after: tuple[str, ...] = ()
    rule: str = ALL_SUCCESS


@dataclass(frozen=True, slots=True)
class Start:
    node: str
    run_id: str
    possible_duplicate: bool = False


@dataclass
class FlowRun:
    flow_id: str
    run_id: str  # FLOW@<slot>
    nodes: dict[str, Node]
    states: dict[str, NodeState]
    generation: int = 0  # reruns so far
    # RUNNING, QUEUED (waits for an earlier run: concurrency QUEUE), or ended: SUCCEEDED,
    # FAILED, SKIPPED (concurrency FORBID) or CANCELED (concurrency REPLACE)
    status: str = "RUNNING"
    scheduled_ms: int = 0  # the flow run's slot
    tenant: str = "default"
    # node -> the run id of its current run (its latest start)
    runs: dict[str, str] = field(default_factory=dict)
    alerted_ms: int | None = None  # the deadline whose DEADLINE_MISSED alert was raised

    @property
    def ended(self) -> bool:
        return self.status not in GOING

    def node_of(self, run_id: str) -> str | None:
        """The node whose *current* run is ``run_id`` (None: another run, or a stale one)."""
        prefix = f"{self.run_id}/"
        if not run_id.startswith(prefix):
            return None
        name = run_id[len(prefix) :].partition("~")[0]
        return name if self.runs.get(name) == run_id else None


def to_record(run: FlowRun) -> dict[str, Any]:
    """``run`` as plain JSON values (the coordinator's table keeps these)."""
    return {
        "flow_id": run.flow_id,
        "run_id": run.run_id,
        "generation": run.generation,
        "status": run.status,
        "scheduled_ms": run.scheduled_ms,
        "tenant": run.tenant,
        "nodes": [[n.name, list(n.after), n.rule] for n in run.nodes.values()],
        "states": {name: state.value for name, state in run.states.items()},
        "runs": dict(run.runs),
        "alerted": run.alerted_ms,
    }


def from_record(record: Mapping[str, Any]) -> FlowRun:
    nodes = {name: Node(name, tuple(after), rule) for name, after, rule in record["nodes"]}
    return FlowRun(
        record["flow_id"],
        record["run_id"],
        nodes,
        {name: NodeState(state) for name, state in record["states"].items()},
        generation=record["generation"],
        status=record["status"],
        scheduled_ms=record["scheduled_ms"],
        tenant=record["tenant"],
        runs=dict(record["runs"]),
        alerted_ms=record.get("alerted"),
    )


def node_run_id(flow_run_id: str, node: str, generation: int) -> str:
    return f"{flow_run_id}/{node}" + (f"~r{generation}" if generation else "")


def start(
    flow_id: str,
    run_id: str,
    nodes: Iterable[Node],
    *,
    scheduled_ms: int = 0,
    tenant: str = "default",
    status: str = "RUNNING",
) -> tuple[FlowRun, list[Start]]:
    """A new flow run and the starts of its root nodes; with ``status`` QUEUED or
    SKIPPED, a run that starts nothing (yet)."""
    table = {node.name: node for node in nodes}
    run = FlowRun(
        flow_id,
        run_id,
        table,
        dict.fromkeys(table, NodeState.PENDING),
        scheduled_ms=scheduled_ms,
        tenant=tenant,
        status=status,
    )
    return run, _advance(run) if status == "RUNNING" else []


def begin(run: FlowRun) -> list[Start]:
    """A QUEUED run whose turn came: the starts of its root nodes."""
    if run.status != "QUEUED":
        return []
    run.status = "RUNNING"
    return _advance(run)


def cancel(run: FlowRun) -> list[str]:
    """End a run that is replaced: its running nodes FAILED (their runs are to be
    cancelled: returned), its pending ones SKIPPED; the run CANCELED."""
    if run.ended:
        return []
    stopped = [run.runs[n] for n, s in run.states.items() if s is NodeState.RUNNING]
    for name, state in run.states.items():
        if state is NodeState.RUNNING:
            run.states[name] = NodeState.FAILED
        elif state is NodeState.PENDING:
            run.states[name] = NodeState.SKIPPED
    run.status = "CANCELED"
    return stopped


@dataclass
class Active:
    """The runs of one flow under a concurrency policy: started and not ended (in start
    order), and queued (in arrival order)."""

    running: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)

    def admit(self, policy: str, run_id: str) -> str:
        """What a new run ``run_id`` does: "start", "skip", "queue" or "replace"."""
        if run_id in self.running or run_id in self.queued:
            return "again"  # its start seen before
        if not self.running and not self.queued:
            return "start"
        return {"FORBID": "skip", "QUEUE": "queue", "REPLACE": "replace"}.get(policy, "start")

    def ended(self, run_id: str) -> str | None:
        """``run_id`` ended: the queued run whose turn it is now, if any."""
        if run_id in self.running:
            self.running.remove(run_id)
        elif run_id in self.queued:
            self.queued.remove(run_id)
        if not self.running and self.queued:
            turn = self.queued.pop(0)
            self.running.append(turn)
            return turn
        return None

    def to_record(self) -> dict[str, Any]:
        return {"running": list(self.running), "queued": list(self.queued)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> Active:
        if not record:
            return cls()
        return cls(list(record["running"]), list(record["queued"]))


def active_key(flow_id: str) -> str:
    """The coordinator table's key of a flow's ``Active`` (no flow run id has '#')."""
    return f"#active/{flow_id}"


def restarted(run: FlowRun) -> list[Start]:
    """A start event seen again for a run that exists: its running nodes' starts,
    flagged (one may have been lost)."""
    return [Start(n, run.runs[n], True) for n, s in run.states.items() if s is NodeState.RUNNING]


def seen(run: FlowRun, run_id: str, outcome: str, *, retrying: bool = False) -> bool:
    """Whether this final outcome of a node's current run was settled before: the event
    is a replay (the coordinator that handled it stopped before its offset was
    committed), and what it caused may have been lost with that coordinator, though its
    row was written. Not a replay: the outcome of a node its run's cancel ended (the
    run replaced: ``cancel`` set the node's state, not an outcome)."""
    node = run.node_of(run_id)
    final = outcome in FINAL_OUTCOMES and not retrying and run.status != "CANCELED"
    return final and node is not None and run.states[node] in ENDED


def settle(run: FlowRun, run_id: str, outcome: str, *, retrying: bool = False) -> list[Start]:
    """A node run's outcome (a RunStatus value): the starts it causes. ``retrying``: a
    next attempt is on its way (a FAILED or TIMED_OUT outcome with ``next_attempt_at``).
    Outcomes that are not final, or of a run that is not a node's current one, change
    nothing."""
    node = run.node_of(run_id)
    state = FINAL_OUTCOMES.get(outcome)
    if node is None or state is None or retrying:
        return []
    return _apply(run, node, state)


def _apply(run: FlowRun, node: str, state: NodeState) -> list[Start]:
    current = run.states[node]
    if current in ENDED:
        # Seen before: the starts this outcome caused, again (flagged).
        return [
            Start(n, run.runs[n], True)
            for n, other in run.nodes.items()
            if node in other.after and run.states[n] is NodeState.RUNNING
        ]
    if current is not NodeState.RUNNING:
        return []  # an outcome for a node never started: not ours to trust
    run.states[node] = state
    return _advance(run)


def rerun_failed(run: FlowRun) -> list[Start]:
    """Run the failed part again: FAILED, UPSTREAM_FAILED and SKIPPED nodes go back to
    pending (what succeeded stays), under run ids of a new generation."""
    if not any(s in FAILED_ONES for s in run.states.values()):
        return []
    run.generation += 1
    for name, state in run.states.items():
        if state in FAILED_ONES or state is NodeState.SKIPPED:
            run.states[name] = NodeState.PENDING
    run.status = "RUNNING"
    return _advance(run)


def _advance(run: FlowRun) -> list[Start]:
    """Decide every pending node whose upstream nodes all ended, until none changes;
    end the flow run when every node ended."""
    starts: list[Start] = []
    changed = True
    while changed:
        changed = False
        for name, node in run.nodes.items():
            if run.states[name] is not NodeState.PENDING:
                continue
            upstream = [run.states[u] for u in node.after]
            if any(s not in ENDED for s in upstream):
                continue
            decided = _rule(node.rule, upstream)
            run.states[name] = decided
            if decided is NodeState.RUNNING:
                run_id = node_run_id(run.run_id, name, run.generation)
                run.runs[name] = run_id
                starts.append(Start(name, run_id))
            else:
                changed = True
    if all(s in ENDED for s in run.states.values()):
        failed = any(s in FAILED_ONES for s in run.states.values())
        run.status = "FAILED" if failed else "SUCCEEDED"
    return starts


def _rule(rule: str, upstream: list[NodeState]) -> NodeState:
    if rule == ALL_DONE:
        return NodeState.RUNNING
    failed = any(s in FAILED_ONES for s in upstream)
    if rule == ANY_FAILED:
        return NodeState.RUNNING if failed else NodeState.SKIPPED
    ok = all(s in (NodeState.SUCCEEDED, NodeState.SKIPPED) for s in upstream)
    return NodeState.RUNNING if ok else NodeState.UPSTREAM_FAILED


def summary(run: FlowRun) -> Mapping[str, int]:
    """How many nodes are in each state."""
    out: dict[str, int] = {}
    for state in run.states.values():
        out[state.value] = out.get(state.value, 0) + 1
    return out
