"""The dashboard's server-side drawings (``cronstream.ui.dag``, ``cronstream.ui.charts``):
pure functions of their data, so their rules are pinned with plain values."""

from __future__ import annotations

import re

from cronstream.ui.charts import COLOURS, line_chart
from cronstream.ui.dag import MAX_DRAWN, NODE_COLOURS, DagNode, columns, dag_svg, layers

DIAMOND = [DagNode("a"), DagNode("b", ("a",)), DagNode("c", ("a",)), DagNode("d", ("b", "c"))]


def node_fills(svg: str) -> dict[str, str]:
    """Each drawn node's fill colour, by its name (a page holding a drawing will do)."""
    return dict(
        re.findall(
            r'data-node="([^"]+)" data-status="[^"]+"><title>[^<]*</title>'
            r'<rect [^>]*fill="([^"]+)"',
            svg,
        )
    )


def test_a_nodes_layer_is_one_past_the_deepest_node_it_comes_after() -> None:
    assert layers(DIAMOND) == {"a": 0, "b": 1, "c": 1, "d": 2}
    chain = [DagNode("x"), DagNode("y", ("x",)), DagNode("z", ("x", "y"))]
    assert layers(chain) == {"x": 0, "y": 1, "z": 2}  # not 1: every edge points right


def test_a_layer_is_ordered_by_the_nodes_it_comes_after() -> None:
    nodes = [DagNode("p"), DagNode("q"), DagNode("from-q", ("q",)), DagNode("from-p", ("p",))]
    assert columns(nodes, layers(nodes)) == [["p", "q"], ["from-p", "from-q"]]


def test_a_cycle_or_an_unknown_edge_does_not_loop_or_fail() -> None:
    nodes = [DagNode("a", ("b",)), DagNode("b", ("a",)), DagNode("c", ("gone",))]
    assert layers(nodes) == {"a": 1, "b": 1, "c": 0}
    assert dag_svg(nodes).count('class="node"') == 3


def test_each_node_is_filled_with_its_status_colour_and_links_to_its_run() -> None:
    statuses = {"a": "SUCCEEDED", "b": "FAILED", "c": "STARTED", "d": "UPSTREAM_FAILED"}
    nodes = [
        DagNode(
            n.name, n.after, statuses[n.name], "1.2 s · 1 attempt", f"/ui/runs?run_id=f@1/{n.name}"
        )
        for n in DIAMOND
    ]
    svg = dag_svg(nodes)
    assert node_fills(svg) == {n: NODE_COLOURS[s] for n, s in statuses.items()}
    assert NODE_COLOURS["SUCCEEDED"] == COLOURS["SUCCEEDED"]
    assert NODE_COLOURS["FAILED"] == COLOURS["FAILED"]
    assert svg.count('<path class="edge"') == 4
    assert '<a href="/ui/runs?run_id=f@1/b">' in svg
    assert "1.2 s · 1 attempt" in svg


def test_names_are_text_never_markup() -> None:
    svg = dag_svg([DagNode('<script>x</script>"', href='/ui/runs?run_id="><x')])
    assert "<script>" not in svg
    assert 'href="/ui/runs?run_id=&quot;&gt;&lt;x"' in svg


def test_a_flow_too_large_to_draw_says_so() -> None:
    nodes = [DagNode(f"n{i}") for i in range(MAX_DRAWN + 1)]
    assert "too many to draw" in dag_svg(nodes)


def test_a_line_chart_without_points_says_no_data() -> None:
    assert "no data" in line_chart({}, title="fires/s", unit="/s", start=0, end=60)
    assert "no data" in line_chart({"x": []}, title="fires/s", unit="/s", start=0, end=60)


def test_a_line_chart_draws_a_line_per_series_in_its_status_colour() -> None:
    svg = line_chart(
        {"FAILED": [(0, 1.0), (30, 2.0)], "other": [(0, 0.0), (60, 4.0)]},
        title="runs/s",
        unit="/s",
        start=0,
        end=60,
    )
    assert svg.count("<polyline") == 2
    failed = f'data-series="FAILED" points="28.0,98.5 230.0,75.0" fill="none" stroke="{COLOURS["FAILED"]}"'
    assert failed in svg
    assert "4.00 /s" in svg  # the y axis's top
