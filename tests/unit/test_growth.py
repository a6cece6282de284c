"""Growing a stack from one node to three: the reassignment plan, the quorum's config
and formatting per node, the voters read from Kafka's tool (``infra.quorum``,
``infra.growth``). The growth itself, on real brokers and Cassandra nodes:
tests/integration/test_grow.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from cronstream.infra.errors import StackError
from cronstream.infra.growth import check_shape, plan
from cronstream.infra.quorum import (
    format_flags,
    mark_dynamic,
    parse_voters,
    quorum_line,
    record_voters,
    recorded_voters,
    static,
)
from cronstream.infra.services import Kafka
from cronstream.runtime.settings import Settings


@dataclass
class Part:
    replicas: list[int]


@dataclass
class Topic:
    partitions: dict[int, Part]
    error: object = None


@dataclass
class Metadata:
    brokers: dict[int, object]
    topics: dict[str, Topic] = field(default_factory=dict)


def test_the_plan_spreads_the_new_copies_and_the_preferred_leaders() -> None:
    meta = Metadata(
        brokers={1: None, 2: None, 3: None},
        topics={
            "jobs": Topic({0: Part([1]), 1: Part([1]), 2: Part([1])}),
            "runs": Topic({0: Part([2, 1])}),
            "done": Topic({0: Part([1, 2, 3])}),
        },
    )
    moves = plan(meta, 3)
    assert moves == {
        ("jobs", 0): [1, 2, 3],
        ("jobs", 1): [2, 3, 1],
        ("jobs", 2): [3, 1, 2],
        ("runs", 0): [1, 2, 3],
    }
    two = plan(
        Metadata(brokers={1: None, 2: None, 3: None}, topics={"t": Topic({1: Part([1])})}), 2
    )
    assert two == {("t", 1): [2, 1]}  # the one it had kept, one added


def test_no_plan_without_the_brokers_for_it_or_for_a_topic_in_error() -> None:
    meta = Metadata(brokers={1: None}, topics={"jobs": Topic({0: Part([1])})})
    assert plan(meta, 3) == {}
    broken = Metadata(
        brokers={1: None, 2: None, 3: None}, topics={"x": Topic({0: Part([1])}, error="UNKNOWN")}
    )
    assert plan(broken, 3) == {}


VOTERS_JSON = """ClusterId:              fMCL8kv1SWm87L_Md-I2hg
LeaderId:               1
LeaderEpoch:            2
HighWatermark:          10
CurrentVoters:          [{"id": 1, "directoryId": "ILZ5MPTeRWakmJu99uBJCA", "endpoints": ["CONTROLLER://127.0.0.1:9096"]}, {"id": 2, "directoryId": null, "endpoints": ["CONTROLLER://127.0.0.1:9106"]}]
CurrentObservers:       [{"id": 3, "directoryId": "L3rJBUUegA3Db5QLSqSZie"}]
"""


def test_voters_are_read_from_the_tools_status_in_either_form() -> None:
    assert parse_voters(VOTERS_JSON) == {1, 2}
    assert parse_voters("LeaderId: 1\nCurrentVoters:          [1,2,3]\n") == {1, 2, 3}
    with pytest.raises(StackError, match="no voters"):
        parse_voters("Error: the controller did not answer\n")


def _node(tmp_path: Path, node: int, nodes: int) -> Kafka:
    settings = replace(Settings.from_env(), home=tmp_path, nodes=nodes, netns=False)
    return Kafka(settings, node)


def _format(node: Kafka) -> None:
    """What a successful StorageTool format leaves that these read."""
    (node.data / "logs").mkdir(parents=True, exist_ok=True)
    (node.data / "logs" / "meta.properties").write_text("node.id=x\n")


def test_a_fresh_cluster_formats_every_node_with_the_same_initial_voters(tmp_path: Path) -> None:
    first = _node(tmp_path, 1, 3)
    flags = format_flags(first)
    assert flags[0] == "--initial-controllers"
    voters = flags[1].split(",")
    assert [v.split("@")[0] for v in voters] == ["1", "2", "3"]
    assert len({v.rsplit(":", 1)[1] for v in voters}) == 3  # a directory id each
    assert format_flags(_node(tmp_path, 3, 3)) == flags
    assert quorum_line(first).startswith("controller.quorum.bootstrap.servers=")
    assert quorum_line(first).count(",") == 2


def test_a_node_added_to_a_one_node_stack_joins_as_an_observer(tmp_path: Path) -> None:
    alone = _node(tmp_path, 1, 1)
    assert format_flags(alone)[0] == "--initial-controllers"
    _format(alone)
    mark_dynamic(alone)
    second = _node(tmp_path, 2, 3)
    assert format_flags(second) == ["--no-initial-controllers"]
    assert quorum_line(_node(tmp_path, 1, 3)).count(",") == 2  # asks all three


def test_a_node_formatted_before_dynamic_quorums_keeps_its_static_voters(tmp_path: Path) -> None:
    old = _node(tmp_path, 1, 3)
    _format(old)  # formatted by the earlier code: no marker, no initial list
    assert quorum_line(old) == "controller.quorum.voters=1@127.0.0.1:" + str(
        old.settings.kafka_controller_port
    )
    assert format_flags(_node(tmp_path, 2, 3)) == ["--no-initial-controllers"]
    for n in (2, 3):
        _format(_node(tmp_path, n, 3))
    assert quorum_line(old).count("@") == 3  # an old cluster of three stays as it was


def test_a_grown_stack_started_with_fewer_nodes_is_refused_with_the_count_to_use(
    tmp_path: Path,
) -> None:
    check_shape(_node(tmp_path, 1, 1).settings)  # nothing there yet
    for n in (1, 2, 3):
        _format(_node(tmp_path, n, 3))
    check_shape(_node(tmp_path, 1, 3).settings)
    with pytest.raises(StackError, match="NODES=3"):
        check_shape(_node(tmp_path, 1, 1).settings)


def test_a_stack_that_wrote_initial_voters_has_no_static_node_and_knows_its_voters(
    tmp_path: Path,
) -> None:
    first = _node(tmp_path, 1, 3)
    format_flags(first)
    _format(first)  # cut off before its marker: still not taken for an old static node
    assert not static(first)
    assert recorded_voters(first.settings) == {1, 2, 3}
    alone = _node(tmp_path / "one", 1, 1)
    format_flags(alone)
    assert recorded_voters(alone.settings) == {1}
    record_voters(alone.settings, {1, 2})
    assert recorded_voters(_node(tmp_path / "one", 1, 3).settings) == {1, 2}
