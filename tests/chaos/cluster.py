"""The node-loss faults of the 3-node cluster (``python -m tests.chaos --cluster``, and
``tests/integration/test_cluster.py``): a broker, the active controller or a Cassandra
node killed (kill -9) and left down while the load runs, and a rolling restart of the
three brokers. Each scenario's ``restore`` starts what it left down, after the
measurement, so the next scenario finds the whole cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from runtime.kafka.clients import kafka_admin
from runtime.settings import Settings
from tests.chaos import stack
from tests.chaos.load import Pipeline, say
from tests.chaos.scenarios import Fault, Scenario

BROKERS = ("kafka", "kafka-2", "kafka-3")


def under_replicated(settings: Settings) -> int:
    """Partitions of the cluster whose in-sync replicas are fewer than their replicas
    (-1 while the metadata does not answer)."""
    try:
        md = kafka_admin(settings, superuser=True, log_level=0).list_topics(timeout=5)
    except Exception:
        return -1
    return sum(
        1
        for topic in md.topics.values()
        for part in topic.partitions.values()
        if len(part.isrs) < len(part.replicas) or part.leader < 0
    )


def active_controller(settings: Settings) -> str:
    """The broker whose controller leads the quorum: each node's ``quorum-state`` file
    names the leader it knows (the one most nodes name)."""
    votes: dict[int, int] = {}
    for name in BROKERS:
        state = (
            stack.service(settings, name).data / "logs" / "__cluster_metadata-0" / "quorum-state"
        )
        leader = json.loads(state.read_text()).get("leaderId", -1)
        votes[leader] = votes.get(leader, 0) + 1
    leader = max(votes, key=lambda k: votes[k])
    return "kafka" if leader == 1 else f"kafka-{leader}"


def lose(name: str | Callable[[Settings], str]) -> Fault:
    """kill -9 the node ``name`` (or the one a function picks) and leave it down."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        node = name if isinstance(name, str) else name(settings)
        t = time.time()
        say(f"kill -9 {node}; left down")
        stack.kill9(stack.service(settings, node))
        LEFT_DOWN.append(node)
        return t, t

    return fault


LEFT_DOWN: list[str] = []


def restore(settings: Settings) -> None:
    """Start the nodes a scenario left down; wait until no partition is
    under-replicated."""
    while LEFT_DOWN:
        node = LEFT_DOWN.pop()
        say(f"restarting {node} (left down by the scenario)")
        stack.start(stack.service(settings, node), timeout=300)
    wait_replicated(settings)


def wait_replicated(settings: Settings, timeout: float = 180) -> float:
    began = time.monotonic()
    while under_replicated(settings) != 0:
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"partitions still under-replicated after {timeout:.0f} s")
        time.sleep(1)
    return time.monotonic() - began


def rolling_restart(_p: Pipeline, settings: Settings) -> tuple[float, float]:
    """Each broker in turn: stopped (SIGTERM: a controlled shutdown moves its
    leadership first), started, and the next only once no partition is
    under-replicated (the upgrade path)."""
    t = time.time()
    for name in BROKERS:
        svc = stack.service(settings, name)
        say(f"rolling restart: stopping {name}")
        svc.stop()
        took = stack.start(svc, timeout=300)
        waited = wait_replicated(settings)
        say(f"{name} back in {took:.1f} s, in sync {waited:.1f} s later")
    return t, time.time()


CLUSTER_SCENARIOS = [
    Scenario("broker-loss", "one broker kill -9, left down", lose("kafka-2"), restore=restore),
    Scenario(
        "controller-loss",
        "the active controller's node kill -9, left down",
        lose(active_controller),
        restore=restore,
    ),
    Scenario("rolling-restart", "the three brokers restarted one at a time", rolling_restart),
    Scenario(
        "cassandra-node-loss",
        "one Cassandra node kill -9, left down",
        lose("cassandra-2"),
        restore=restore,
    ),
]
