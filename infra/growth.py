"""A stack grown from one node to three keeps its data, and gets the copies a cluster
should have.

- The controller quorum (``infra.quorum`` for how each node is formatted and told where
  the controllers are): ``stack.up`` checks the data's shape (``check_shape``), makes an
  old static quorum dynamic before new brokers start (``upgrade_static``), and makes each
  new broker a voter once it answers (``grow``).

Then the bootstrap:

- Topics: every topic of the cluster (cronstream's, tenants', the flows coordinator's
  changelogs, Kafka Connect's, the brokers' own offsets) with fewer replicas than
  ``infra.replication`` wants is given more by a partition reassignment (Kafka's
  ``kafka-reassign-partitions``: the new replicas copy the log from the current ones,
  nothing is rewritten), then its ``min.insync.replicas`` raised.
- Cassandra: the keyspace's replication raised (``ALTER KEYSPACE``), then a full repair
  of it on every node of the local stack (``nodetool repair --full -pr``: each node its
  primary ranges, so every row reaches its new replicas once). Elsewhere the bootstrap
  says which repair to run.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from consumers.migrations import keyspace_replication, replication_of
from infra import hosts
from infra.errors import BootstrapError, StackError
from infra.quorum import (
    admin_config,
    controller_endpoint,
    dynamic,
    formatted,
    mark_dynamic,
    quorum_tool,
    voters,
)
from infra.service import CASSANDRA_JPMS
from infra.services import Cassandra, Kafka
from runtime.settings import Settings

# How long a new controller may take to copy the metadata log before add-controller is
# given up (it is refused until the node has caught up).
CATCH_UP_S = 120.0
# How long the new replicas may take to copy the logs (seconds); the local stack's
# topics hold megabytes, a production cluster's would need its own throttled plan.
REASSIGN_WITHIN_S = 600.0


def plan(metadata: Any, factor: int) -> dict[tuple[str, int], list[int]]:
    """The new replica list of every partition with fewer than ``factor`` replicas: its
    replicas kept in their order (the leader stays first) and brokers added, starting at
    a different broker for each partition so the new copies spread."""
    brokers = sorted(metadata.brokers)
    if len(brokers) < factor:
        return {}
    moves: dict[tuple[str, int], list[int]] = {}
    for name, topic in sorted(metadata.topics.items()):
        if topic.error is not None:
            continue
        for pid, part in sorted(topic.partitions.items()):
            replicas = list(part.replicas)
            if len(replicas) >= factor:
                continue
            start = pid % len(brokers)
            for broker in brokers[start:] + brokers[:start]:
                if len(replicas) == factor:
                    break
                if broker not in replicas:
                    replicas.append(broker)
            moves[(name, pid)] = replicas
    return moves


def grow_topics(
    settings: Settings,
    admin: Any,
    replication: tuple[int, int],
    say: Callable[[str], None],
    timeout: float = REASSIGN_WITHIN_S,
) -> list[str]:
    """Every topic with fewer replicas than ``replication`` wants reassigned to that
    many, waited for until each partition's new replicas are in sync, and its
    ``min.insync.replicas`` set. Returns the topics grown."""
    factor, insync = replication
    moves = plan(admin.list_topics(timeout=30), factor)
    if not moves:
        return []
    topics = sorted({name for name, _ in moves})
    say(f"replication: {len(moves)} partitions of {len(topics)} topics to {factor} replicas")
    _reassign(settings, moves)
    _wait_in_sync(admin, moves, factor, timeout)
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(
                    "min.insync.replicas",
                    str(insync),
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        for name in topics
    ]
    for name, future in zip(
        topics, admin.incremental_alter_configs(resources).values(), strict=True
    ):
        try:
            future.result(30)
        except Exception as exc:  # KafkaException: the broker's refusal, with its reason
            raise BootstrapError(f"min.insync.replicas={insync} on {name}: {exc}") from exc
    return topics


def _reassign(settings: Settings, moves: dict[tuple[str, int], list[int]]) -> None:
    nodes = [Kafka(settings, n) for n in range(1, settings.nodes + 1)]
    servers = ",".join(f"{n.host}:{n.other_ports[1]}" for n in nodes)  # the mTLS listener
    body = {
        "version": 1,
        "partitions": [
            {"topic": name, "partition": pid, "replicas": replicas}
            for (name, pid), replicas in sorted(moves.items())
        ],
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "reassignment.json"
        path.write_text(json.dumps(body))
        proc = nodes[0].tool(
            "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
            "--bootstrap-server",
            servers,
            "--command-config",
            str(admin_config(nodes[0])),
            "--reassignment-json-file",
            str(path),
            "--execute",
        )
    if proc.returncode != 0:
        raise BootstrapError(
            "kafka-reassign-partitions --execute failed:\n" + (proc.stdout + proc.stderr)[-2000:]
        )


def _wait_in_sync(
    admin: Any, moves: dict[tuple[str, int], list[int]], factor: int, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=30).topics
        behind = [
            f"{name}[{pid}]"
            for name, pid in moves
            if len(topics[name].partitions[pid].replicas) < factor
            or len(topics[name].partitions[pid].isrs) < factor
        ]
        if not behind:
            return
        if time.monotonic() > deadline:
            raise BootstrapError(
                f"{len(behind)} partitions still without {factor} replicas in sync after "
                f"{timeout:.0f} s: {', '.join(behind[:10])}"
            )
        time.sleep(1.0)


def grow_keyspace(
    settings: Settings, session: Any, keyspace: str, say: Callable[[str], None]
) -> bool:
    """``keyspace``'s replication raised to the settings' when it has fewer, and its rows
    repaired onto the new replicas. True when it grew."""
    want = settings.cassandra_replication
    have = replication_of(session, keyspace, settings.cassandra_datacenter)
    if have >= want:
        return False
    say(f"cassandra: keyspace {keyspace!r} from {have} to {want} replicas")
    replication = keyspace_replication(want, settings.cassandra_datacenter)
    session.execute(f"ALTER KEYSPACE {keyspace} WITH replication = {replication}")
    repair(settings, keyspace, say)
    return True


def repair(settings: Settings, keyspace: str, say: Callable[[str], None]) -> None:
    """A full repair of ``keyspace``, each node its primary ranges, on the local stack's
    nodes; elsewhere (no node of the local stack runs) the command to run is said."""
    nodes = [Cassandra(settings, n) for n in range(1, settings.nodes + 1)]
    if not all(node.running() for node in nodes):
        say(
            f"cassandra: run 'nodetool repair --full -pr {keyspace}' on every node: its "
            "rows are on their old replicas only until then"
        )
        return
    for node in nodes:
        proc = nodetool(node, "repair", "--full", "-pr", keyspace)
        if proc.returncode != 0:
            raise BootstrapError(
                f"nodetool repair on {node.name} failed:\n" + (proc.stdout + proc.stderr)[-2000:]
            )
        say(f"cassandra: {keyspace!r} repaired on {node.name}")


def nodetool(node: Cassandra, *args: str) -> subprocess.CompletedProcess[str]:
    """Cassandra's nodetool on ``node`` (its JMX port is on the loopback of the node's
    host: inside its network namespace when it has one)."""
    inside = hosts.prefix(node.net_host) if node.net_host is not None else []
    command = [
        "java",
        "-Xmx256m",
        *CASSANDRA_JPMS,
        "-cp",
        f"{node.lib / 'jars'}/*",
        "org.apache.cassandra.tools.NodeTool",
        "-h",
        "127.0.0.1",
        "-p",
        str(node.other_ports[1]),
        *args,
    ]
    return subprocess.run([*inside, *command], capture_output=True, text=True, check=False)


def grow(settings: Settings, say: Callable[[str], None]) -> bool:
    """Make every running broker of ``settings.nodes`` a controller voter; True when the
    quorum changed (a static one was made dynamic before, ``upgrade_static``)."""
    nodes = [Kafka(settings, n) for n in range(1, settings.nodes + 1)]
    if len(nodes) == 1:
        return False
    first = nodes[0]
    have = voters(first, via=1)
    missing = [n for n in nodes if n.node not in have]
    if not missing:
        return False
    for node in missing:
        say(f"{node.name}: joining the controller quorum (voters now {sorted(have)})")
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            try:
                quorum_tool(node, min(have), "add-controller")
                break
            except StackError as exc:  # refused until it has caught up with the log
                if time.monotonic() > deadline:
                    raise StackError(f"{node.name} did not join the quorum: {exc}") from exc
                time.sleep(2.0)
        have = _wait_for_voter(first, node.node, min(have))
    say(f"controller quorum: voters {sorted(have)}")
    return True


def _wait_for_voter(first: Kafka, node: int, via: int) -> set[int]:
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        have = voters(first, via=via)
        if node in have:
            return have
        if time.monotonic() > deadline:
            raise StackError(f"kafka node {node} is still not a voter ({sorted(have)})")
        time.sleep(1.0)


def check_shape(settings: Settings) -> None:
    """StackError when the stack's data holds more brokers than ``settings.nodes`` (a
    stack grown to three started with ``NODES=1``: node 1 alone is no majority of the
    voters, and would wait for the others until its start timed out)."""
    grown = sorted(
        int(path.parent.parent.name.rpartition("-")[2])
        for path in (settings.home / "data").glob("kafka-*/logs/meta.properties")
        if path.parent.parent.name.rpartition("-")[2].isdigit()
    )
    if grown and grown[-1] > settings.nodes:
        raise StackError(
            f"this stack has the data of {grown[-1]} Kafka nodes (it was grown): start it "
            f"with NODES={grown[-1]} (CRONSTREAM_NODES), not {settings.nodes}; a cluster "
            "is not shrunk by starting fewer nodes"
        )


def upgrade_static(settings: Settings, say: Callable[[str], None]) -> bool:
    """Before a stack whose brokers form a static quorum grows (a node of
    ``settings.nodes`` not formatted yet): its nodes started as they were, ``kraft.version``
    1 finalised (Kafka's procedure), the nodes marked dynamic and stopped, so that they
    start again with ``controller.quorum.bootstrap.servers`` beside the new ones (a new
    node started as an observer of a static quorum is refused: "Expected to be
    Follower", and exits). True when it upgraded."""
    nodes = [Kafka(settings, n) for n in range(1, settings.nodes + 1)]
    olds = [n for n in nodes if formatted(n) and not dynamic(n)]
    if not olds or all(formatted(n) for n in nodes):
        return False
    say(f"controller quorum: static ({', '.join(n.name for n in olds)}); making it dynamic")
    for node in olds:
        node.start()
    for node in olds:
        deadline = time.monotonic() + node.start_timeout
        while not node.ready():
            node.check_alive()
            if time.monotonic() > deadline:
                raise StackError(f"{node.name} did not answer to be upgraded")
            time.sleep(0.5)
    first = olds[0]
    proc = first.tool(
        "org.apache.kafka.tools.FeatureCommand",
        "--bootstrap-controller",
        controller_endpoint(settings, first.node),
        "--command-config",
        str(admin_config(first)),
        "upgrade",
        "--feature",
        "kraft.version=1",
    )
    if proc.returncode != 0:
        raise StackError(
            "kafka-features upgrade --feature kraft.version=1 failed:\n"
            + (proc.stdout + proc.stderr)[-2000:]
        )
    for node in olds:
        mark_dynamic(node)
        node.stop()  # started again by up() with the dynamic quorum's config
    return True
