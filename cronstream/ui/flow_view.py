"""A flow run as its page shows it, from history's rows (``History.flow_run``) and the
flow's definition: pure. A node run is ``FLOW@slot/NODE`` (``~rN``: the N-th rerun of
the failed part, ``streams.core.flow``); a node's state is its latest run's latest
attempt (a rerun's over the first run's; a later attempt's over an earlier one's); a
node with no run yet is PENDING. The flow run's own row says how it ended once the
flows coordinator wrote its end (``worker`` = the coordinator); before, it is RUNNING."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cronstream.schemas.catalog import FLOWS_APP
from cronstream.schemas.events import RunOutcome
from cronstream.schemas.flows import FlowDefinition
from cronstream.ui.dag import DagNode

_NODE_RUN = re.compile(r"(?P<node>.+?)(?:~r(?P<rerun>[0-9]+))?")


@dataclass(frozen=True, slots=True)
class NodeRun:
    """One node's latest attempt."""

    node: str
    rerun: int  # 0: the flow run's first run of the node
    row: RunOutcome
    status: str  # the row's, or RETRYING (failed, its next attempt due)


def node_of(flow_run_id: str, run_id: str) -> tuple[str, int] | None:
    """(node, rerun) of a node run id of ``flow_run_id``; None for another run id."""
    prefix = flow_run_id + "/"
    if not run_id.startswith(prefix):
        return None
    found = _NODE_RUN.fullmatch(run_id[len(prefix) :])
    return None if found is None else (found["node"], int(found["rerun"] or 0))


def latest_runs(flow_run_id: str, rows: Sequence[RunOutcome]) -> dict[str, NodeRun]:
    """Node -> its latest attempt (highest rerun, then attempt)."""
    out: dict[str, NodeRun] = {}
    for row in rows:
        found = node_of(flow_run_id, row.run_id)
        if found is None:
            continue
        node, rerun = found
        seen = out.get(node)
        if seen is not None and (seen.rerun, seen.row.attempt) > (rerun, row.attempt):
            continue
        status = row.status.value
        if status == "FAILED" and row.next_attempt_at is not None:
            status = "RETRYING"
        out[node] = NodeRun(node, rerun, row, status)
    return out


def flow_status(flow_run_id: str, rows: Sequence[RunOutcome]) -> str:
    """SUCCEEDED / FAILED / SKIPPED (its end as the coordinator recorded it), RUNNING
    (started, not ended), or UNKNOWN (no row of the flow run itself)."""
    own = [r for r in rows if r.run_id == flow_run_id]
    if not own:
        return "UNKNOWN"
    ended = [r for r in own if r.worker == FLOWS_APP]
    return ended[0].status.value if ended else "RUNNING"


def _detail(run: NodeRun | None) -> str:
    if run is None:
        return ""
    if run.row.worker == FLOWS_APP:  # decided without running (upstream failed, skipped)
        return "not run" + (f" · rerun {run.rerun}" if run.rerun else "")
    ms = run.row.duration_ms
    took = "" if ms is None else (f"{ms} ms · " if ms < 1000 else f"{ms / 1000:.1f} s · ")
    attempts = f"{run.row.attempt} attempt" + ("s" if run.row.attempt != 1 else "")
    return took + attempts + (f" · rerun {run.rerun}" if run.rerun else "")


def dag_nodes(
    flow_run_id: str,
    rows: Sequence[RunOutcome],
    flow: FlowDefinition | None,
    link: Callable[[str], str],
) -> list[DagNode]:
    """The DAG's nodes: the definition's (its edges), then any node history has that
    the definition no longer does (a flow changed since the run; drawn without edges),
    each with its latest run's state and ``link(run_id)`` to that run's page."""
    runs = latest_runs(flow_run_id, rows)
    defined = [(n.name, n.after) for n in flow.nodes] if flow is not None else []
    names = {name for name, _ in defined}
    defined += [(name, ()) for name in runs if name not in names]
    out = []
    for name, after in defined:
        run = runs.get(name)
        out.append(
            DagNode(
                name,
                tuple(after),
                run.status if run else "PENDING",
                _detail(run),
                link(run.row.run_id) if run else None,
            )
        )
    return out


def flow_run_rows(flow_id: str, rows: Sequence[RunOutcome]) -> list[RunOutcome]:
    """The flow runs among a flow's job rows (its node runs left out), one per run id:
    the coordinator's end when written, else the start."""
    out: dict[str, RunOutcome] = {}
    for row in rows:
        head, _, slot = row.run_id.rpartition("@")
        if head != flow_id or "/" in slot:
            continue
        if row.run_id not in out or row.worker == FLOWS_APP:
            out[row.run_id] = row
    return list(out.values())
