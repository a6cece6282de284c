"""A flow's DAG drawn on the server as inline SVG (no script, no CDN): a pure function of
its nodes. Layered left to right: a node's layer is the longest path to it from a node
that comes after none (so every edge points right), and the nodes of a layer are
ordered by where the nodes they come after sit (one sweep, ties in definition order),
which keeps a diamond a diamond. Each node is a box in its run's status colour with its
name, its duration and attempts, and a link to its run's page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from cronstream.ui.charts import COLOURS, legend

# The chart colours of final statuses, and those a node has before or without one.
NODE_COLOURS = {
    **COLOURS,
    "STARTED": "#1565c0",  # running
    "RETRYING": "#f9a825",  # an attempt failed, the next one is due
    "PENDING": "#cfd8dc",  # not started yet
    "SKIPPED": "#9e9e9e",  # its trigger rule said no (any_failed, nothing failed)
    "UPSTREAM_FAILED": "#e57373",  # not run: a node it comes after failed
}
LIGHT = frozenset({"#cfd8dc", "#f9a825"})  # fills that take dark text
OTHER = "#78909c"  # a status without a colour of its own
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 46, 60, 18, 12
NAME_CHARS = 20  # of a node's name in its box (the whole name in its tooltip)
MAX_DRAWN = 400  # nodes; a larger flow is shown as its table only


@dataclass(frozen=True, slots=True)
class DagNode:
    name: str
    after: tuple[str, ...] = ()
    status: str = "PENDING"
    detail: str = ""  # the second line: duration and attempts
    href: str | None = None  # the node's run page


def layers(nodes: Sequence[DagNode]) -> dict[str, int]:
    """Node name -> its layer (0: comes after nothing; else one past the deepest node it
    comes after). Edges to no node of the list are ignored; nodes on a cycle (a flow is
    checked acyclic when put; this only must not loop) go one past the deepest."""
    names = {n.name for n in nodes}
    parents = {n.name: [p for p in n.after if p in names and p != n.name] for n in nodes}
    children: dict[str, list[str]] = {n.name: [] for n in nodes}
    for name, ups in parents.items():
        for up in ups:
            children[up].append(name)
    waiting = {name: len(ups) for name, ups in parents.items()}
    layer = {name: 0 for name in names}
    ready = [n.name for n in nodes if waiting[n.name] == 0]
    placed: set[str] = set()
    while ready:
        name = ready.pop()
        placed.add(name)
        for child in children[name]:
            layer[child] = max(layer[child], layer[name] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    deepest = max(layer.values(), default=0)
    for name in names - placed:
        layer[name] = deepest + 1
    return layer


def columns(nodes: Sequence[DagNode], layer: Mapping[str, int]) -> list[list[str]]:
    """The names of each layer, top to bottom: the first in definition order, each next
    by the mean position of the nodes it comes after (ties in definition order)."""
    order = {n.name: i for i, n in enumerate(nodes)}
    by_name = {n.name: n for n in nodes}
    out: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in nodes:
        out[layer[n.name]].append(n.name)
    row: dict[str, float] = {}
    for column in out:

        def place(name: str) -> tuple[float, int]:
            ups = [row[p] for p in by_name[name].after if p in row]
            return (sum(ups) / len(ups) if ups else -1.0, order[name])

        column.sort(key=place)
        row.update({name: float(i) for i, name in enumerate(column)})
    return out


def dag_svg(nodes: Sequence[DagNode]) -> str:
    """The DAG as an ``<svg class="dag">``: a ``<g class="node">`` per node (its
    ``data-node`` and ``data-status``, a ``rect`` filled with its status colour) inside
    a link to its run page when it has one, an arrow per edge."""
    if not nodes:
        return '<p class="muted">no nodes</p>'
    if len(nodes) > MAX_DRAWN:
        return f'<p class="muted">{len(nodes)} nodes: too many to draw (see the table)</p>'
    layer = layers(nodes)
    grid = columns(nodes, layer)
    at = {
        name: (PAD + x * (NODE_W + GAP_X), PAD + y * (NODE_H + GAP_Y))
        for x, column in enumerate(grid)
        for y, name in enumerate(column)
    }
    width = PAD * 2 + len(grid) * NODE_W + (len(grid) - 1) * GAP_X
    height = PAD * 2 + max(len(c) for c in grid) * (NODE_H + GAP_Y) - GAP_Y
    parts = [
        f'<svg class="dag" role="img" aria-label="flow graph" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#78909c"/>'
        "</marker></defs>",
    ]
    parts += [_edge(at[up], at[n.name]) for n in nodes for up in n.after if up in at]
    parts += [_node(n, *at[n.name]) for n in nodes]
    parts.append("</svg>")
    return "".join(parts)


def _edge(start: tuple[int, int], end: tuple[int, int]) -> str:
    x1, y1 = start[0] + NODE_W, start[1] + NODE_H / 2
    x2, y2 = end[0], end[1] + NODE_H / 2
    bend = (x2 - x1) / 2
    return (
        f'<path class="edge" d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}" '
        'fill="none" stroke="#78909c" stroke-width="1.5" marker-end="url(#arrow)"/>'
    )


def _node(node: DagNode, x: int, y: int) -> str:
    fill = NODE_COLOURS.get(node.status, OTHER)
    ink = "#222" if fill in LIGHT else "#fff"
    name = node.name if len(node.name) <= NAME_CHARS else node.name[: NAME_CHARS - 1] + "…"
    tip = f"{node.name}: {node.status}" + (f", {node.detail}" if node.detail else "")
    box = (
        f'<g class="node" data-node="{escape(node.name)}" data-status="{escape(node.status)}">'
        f"<title>{escape(tip)}</title>"
        f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="{fill}"/>'
        f'<text x="{x + 8}" y="{y + 18}" font-size="13" font-weight="bold" fill="{ink}">'
        f"{escape(name)}</text>"
        f'<text x="{x + 8}" y="{y + 36}" font-size="11" fill="{ink}">'
        f"{escape(node.detail or node.status.lower())}</text></g>"
    )
    if node.href is None:
        return box
    return f'<a href="{escape(node.href)}">{box}</a>'


def dag_legend() -> str:
    """The node colours, named."""
    return legend(list(NODE_COLOURS.items()))
