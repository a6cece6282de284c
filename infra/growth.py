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

from cronstream.consumers.migrations import keyspace_replication, replication_of
from cronstream.infra import hosts
from cronstream.infra.cassandra_node import Cassandra
from cronstream.infra.errors import BootstrapError, StackError
from cronstream.infra.quorum import (
    FEATURE_COMMAND,
    add_controller,
    formatted,
    mark_dynamic,
    record_voters,
    recorded_voters,
    static,
    voters,
)
from cronstream.infra.service import CASSANDRA_JPMS
from cronstream.infra.services import Kafka
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

# How long a new controller may take to copy the metadata log before add-controller is
# given up (it is refused until the node has caught up).
CATCH_UP_S = 120.0
# How long the new replicas may take to copy the logs (seconds); the local stack's
# topics hold megabytes, a production cluster's would need its own throttled plan.
REASSIGN_WITHIN_S = 600.0
REASSIGN_COMMAND = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def local(settings: Settings, kind: type[Kafka | Cassandra]) -> bool:
    """Every node of ``kind`` of ``settings.nodes`` is the local stack's and runs: only
    then does the bootstrap change replication itself (a cluster of your own is
    reported)."""
    return all(kind(settings, n).running() for n in range(1, settings.nodes + 1))


def plan(metadata: Any, factor: int) -> dict[tuple[str, int], list[int]]:
    """The new replica list of every partition with fewer than ``factor`` replicas: its
    replicas and the brokers added, in an order that starts at a different broker for
    each partition, so that the copies and the preferred leaders spread (the brokers
    move leadership to the first replica on their own: ``auto.leader.rebalance``)."""
    brokers = sorted(metadata.brokers)
    if len(brokers) < factor:
        return {}
    moves: dict[tuple[str, int], list[int]] = {}
    for name, topic in sorted(metadata.topics.items()):
        if topic.error is not None:
            continue
        for pid, part in sorted(topic.partitions.items()):
            have = set(part.replicas)
            if len(have) >= factor:
                continue
            start = pid % len(brokers)
            order = brokers[start:] + brokers[:start]
            added = [b for b in order if b not in have][: factor - len(have)]
            moves[(name, pid)] = [b for b in order if b in have or b in added]
    return moves


def grow_topics(
    settings: Settings,
    admin: Any,
    replication: tuple[int, int],
    say: Callable[[str], None],
    timeout: float = REASSIGN_WITHIN_S,
) -> list[str]:
    """On the local stack: every topic with fewer replicas than ``replication`` wants
    reassigned to that many, or with a lower ``min.insync.replicas`` (a growth cut off
    before its end), waited for until each partition's replicas are in sync, then its
    ``min.insync.replicas`` set. Returns the topics changed."""
    factor, insync = replication
    if factor <= 1 or not local(settings, Kafka):
        return []
    metadata = admin.list_topics(timeout=30)
    moves = plan(metadata, factor)
    low = _low_insync(admin, [n for n, t in metadata.topics.items() if t.error is None], insync)
    topics = sorted({name for name, _ in moves} | set(low))
    if not topics:
        return []
    if moves:
        say(f"replication: {len(moves)} partitions of {len(topics)} topics to {factor} replicas")
        _reassign(settings, moves)
    _wait_in_sync(admin, topics, factor, timeout)
    _set_insync(admin, topics, insync)
    return topics


def _low_insync(admin: Any, names: list[str], insync: int) -> list[str]:
    """The topics whose ``min.insync.replicas`` is below ``insync``."""
    if not names:
        return []
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    low = []
    for resource, future in admin.describe_configs(resources).items():
        entry = future.result(30).get("min.insync.replicas")
        if entry is not None and int(entry.value) < insync:
            low.append(resource.name)
    return low


def _set_insync(admin: Any, topics: list[str], insync: int) -> None:
    entry = ConfigEntry(
        "min.insync.replicas", str(insync), incremental_operation=AlterConfigOpType.SET
    )
    resources = [
        ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[entry])
        for name in topics
    ]
    for resource, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result(30)
        except Exception as exc:  # KafkaException: the broker's refusal, with its reason
            raise BootstrapError(f"min.insync.replicas={insync} on {resource.name}: {exc}") from exc


def _reassign(settings: Settings, moves: dict[tuple[str, int], list[int]]) -> None:
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
        Kafka(settings).admin_tool(
            REASSIGN_COMMAND,
            "--reassignment-json-file",
            str(path),
            "--execute",
            error=BootstrapError,
        )


def _wait_in_sync(admin: Any, names: list[str], factor: int, timeout: float) -> None:
    """Until every partition of ``names`` has ``factor`` replicas, all in sync (a topic
    deleted meanwhile is left out)."""
    deadline = time.monotonic() + timeout
    while True:
        topics = admin.list_topics(timeout=30).topics
        behind = [
            f"{name}[{pid}]"
            for name in names
            if name in topics and topics[name].error is None
            for pid, part in topics[name].partitions.items()
            if len(part.replicas) < factor or len(part.isrs) < factor
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
    """On the local stack: ``keyspace``'s replication raised to the settings' when it
    has fewer, and its rows repaired onto the new replicas (a repair cut off is run
    again by the next bootstrap: ``data/cassandra-repair-pending``, written before the
    ALTER, names the keyspace until its repair ends). True when it repaired."""
    want = settings.cassandra_replication
    have = replication_of(session, keyspace, settings.cassandra_datacenter)
    pending = settings.home / "data" / "cassandra-repair-pending"
    if have < want:
        if not local(settings, Cassandra):
            say(
                f"cassandra: keyspace {keyspace!r} has {have} replicas, the settings want "
                f"{want}: ALTER KEYSPACE it, then run 'nodetool repair --full -pr {keyspace}' "
                "on every node"
            )
            return False
        say(f"cassandra: keyspace {keyspace!r} from {have} to {want} replicas")
        pending.parent.mkdir(parents=True, exist_ok=True)
        pending.write_text(keyspace + "\n")
        replication = keyspace_replication(want, settings.cassandra_datacenter)
        session.execute(f"ALTER KEYSPACE {keyspace} WITH replication = {replication}")
    if not pending.exists() or keyspace not in pending.read_text().split():
        return False
    if not local(settings, Cassandra):
        raise BootstrapError(
            f"keyspace {keyspace!r} awaits its repair ({pending}) and a Cassandra node of "
            "the stack is down: start it (make up) and the bootstrap repairs it"
        )
    for node in (Cassandra(settings, n) for n in range(1, settings.nodes + 1)):
        proc = nodetool(node, "repair", "--full", "-pr", keyspace)
        if proc.returncode != 0:
            raise BootstrapError(
                f"nodetool repair on {node.name} failed:\n" + (proc.stdout + proc.stderr)[-2000:]
            )
        say(f"cassandra: {keyspace!r} repaired on {node.name}")
    pending.unlink()
    return True


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
            f"with NODES={grown[-1]} ({o.NODES.env}), not {settings.nodes}; a cluster "
            "is not shrunk by starting fewer nodes"
        )


def upgrade_static(settings: Settings, say: Callable[[str], None]) -> bool:
    """Before a stack whose brokers form a static quorum grows (a node of
    ``settings.nodes`` not formatted yet): its nodes started as they were, ``kraft.version``
    1 finalised (Kafka's procedure; finalising it again is a no-op, so a cut-off upgrade
    is done again), the nodes marked dynamic and stopped, so that they start again with
    ``controller.quorum.bootstrap.servers`` beside the new ones (a new node started as an
    observer of a static quorum is refused: "Expected to be Follower", and exits). True
    when it upgraded."""
    nodes = [Kafka(settings, n) for n in range(1, settings.nodes + 1)]
    olds = [n for n in nodes if static(n)]
    if not olds or all(formatted(n) for n in nodes):
        return False
    say(f"controller quorum: static ({', '.join(n.name for n in olds)}); making it dynamic")
    for node in olds:
        node.start()
    for node in olds:
        node.wait_ready()
    olds[0].admin_tool(FEATURE_COMMAND, "upgrade", "--feature", "kraft.version=1")
    for node in olds:
        mark_dynamic(node)
        node.stop()  # started again by up() with the dynamic quorum's config
    return True


def grow(settings: Settings, say: Callable[[str], None]) -> bool:
    """Make each broker of ``settings.nodes`` (all running: ``up`` waited for them) a
    controller voter, then restart the ones that were voters before, one at a time: their
    config was written for fewer nodes (where to find the controllers, the defaults of
    topics the brokers make themselves). True when the quorum changed."""
    nodes = [Kafka(settings, n) for n in range(1, settings.nodes + 1)]
    if len(nodes) == 1 or recorded_voters(settings) >= {n.node for n in nodes}:
        return False  # a warm make up asks no tool
    have = voters(nodes[0])
    missing = [n for n in nodes if n.node not in have]
    for node in missing:
        say(f"{node.name}: joining the controller quorum (voters now {sorted(have)})")
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            try:
                add_controller(node)
                break
            except StackError as exc:  # refused until it has caught up with the log
                if time.monotonic() > deadline:
                    raise StackError(f"{node.name} did not join the quorum: {exc}") from exc
                time.sleep(2.0)
        have = _wait_for_voter(nodes[0], node.node)
    record_voters(settings, have)
    if not missing:
        return False
    say(f"controller quorum: voters {sorted(have)}")
    for node in nodes:
        if node not in missing:
            say(f"{node.name}: restarting with the config of {len(nodes)} nodes")
            node.stop()
            node.start()
            node.wait_ready()
    return True


def _wait_for_voter(first: Kafka, node: int) -> set[int]:
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        have = voters(first)
        if node in have:
            return have
        if time.monotonic() > deadline:
            raise StackError(f"kafka node {node} is still not a voter ({sorted(have)})")
        time.sleep(1.0)
