"""The brokers' controller quorum (KRaft), and how a stack grows from one node to three.

Every node is formatted for a *dynamic* quorum (KIP-853, ``kraft.version`` 1): its
config names the controllers to ask (``controller.quorum.bootstrap.servers``), and the
voters themselves live in the metadata log, so a controller can be added to a running
cluster. A fresh stack writes the voters it starts with once
(``data/kafka-controllers``: ``id@host:port:directory-id`` each, the same for every
node) and formats each of its nodes with that list (``--initial-controllers``). A node
formatted later, when the cluster already exists (``make up NODES=3`` on a one-node
stack with data), is formatted with ``--no-initial-controllers``: it starts as an
observer that copies the metadata log, and ``infra.growth.grow`` makes it a voter
(``kafka-metadata-quorum add-controller``) once it answers.

Stacks formatted before this (a *static* quorum: ``controller.quorum.voters`` in the
config, ``kraft.version`` 0) keep their shape until they grow: then, before the new
nodes start, ``infra.growth.upgrade_static`` finalises ``kraft.version`` 1 (``kafka-features
upgrade``, Kafka's own procedure), marks their nodes dynamic and stops them, to start
again with the new config.

Each node formatted by this code carries a marker (``data/kafka*/quorum``); a node with
data and no marker is one of a static quorum.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import uuid
from pathlib import Path
from typing import Protocol

from cronstream.infra.errors import StackError
from cronstream.runtime.settings import Settings, kafka_node_host, node_name, node_port


class Kafka(Protocol):
    """What these read of a broker of the local stack (``infra.services.Kafka``)."""

    node: int
    name: str
    settings: Settings
    data: Path
    conf: Path

    @property
    def properties(self) -> Path: ...

    def tool(self, main_class: str, *args: str) -> subprocess.CompletedProcess[str]: ...

    def admin_tool(self, main_class: str, *args: str, config: str | None = None) -> str: ...


MARKER = "quorum"  # in a broker's data directory: formatted (or upgraded) dynamic
QUORUM_COMMAND = "org.apache.kafka.tools.MetadataQuorumCommand"
FEATURE_COMMAND = "org.apache.kafka.tools.FeatureCommand"


def kafka_uuid() -> str:
    """A random id as Kafka prints one (url-safe base64 of 16 bytes, no padding; never
    starting with '-', which its tools would read as a flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def controller_endpoint(settings: Settings, node: int) -> str:
    host = kafka_node_host(node, settings.netns)
    return f"{host}:{node_port(settings.kafka_controller_port, node)}"


def _initial_file(settings: Settings) -> Path:
    return settings.home / "data" / "kafka-controllers"


def formatted(node: Kafka) -> bool:
    return _formatted_at(node.data)


def _formatted_at(data: Path) -> bool:
    return (data / "logs" / "meta.properties").exists()


def static(node: Kafka) -> bool:
    """The node has data from before dynamic quorums (``_static_at``)."""
    return _static_at(node.settings, node.data)


def _static_at(settings: Settings, data: Path) -> bool:
    """A broker's data directory ``data`` is one of a static quorum: formatted, without
    the marker (written before each format), in a stack without initial voters (the list
    a dynamic stack writes first)."""
    return (
        _formatted_at(data)
        and not (data / MARKER).exists()
        and not _initial_file(settings).exists()
    )


def mark_dynamic(node: Kafka) -> None:
    node.data.mkdir(parents=True, exist_ok=True)
    (node.data / MARKER).write_text("dynamic\n")


def _static_voters(node: Kafka) -> list[int]:
    """The voters of a static quorum formatted before this code: every node with such
    data (one on a one-node stack; all three on an old cluster)."""
    data = node.settings.home / "data"
    nodes = range(1, node.settings.nodes + 1)
    olds = [n for n in nodes if _static_at(node.settings, data / node_name("kafka", n))]
    return olds or [node.node]


def recorded_voters(settings: Settings) -> set[int]:
    """The voters this stack knows it has (its initial ones, and each added since), so
    a warm ``make up`` asks no tool."""
    ids = set()
    for path in (_initial_file(settings), settings.home / "data" / "kafka-voters"):
        if path.exists():
            ids |= {int(v.split("@", 1)[0]) for v in path.read_text().split(",") if v.strip()}
    return ids


def record_voters(settings: Settings, ids: set[int]) -> None:
    path = settings.home / "data" / "kafka-voters"
    path.write_text(",".join(str(i) for i in sorted(ids)) + "\n")


def quorum_line(node: Kafka) -> str:
    """The config line that tells ``node`` where the controllers are."""
    s = node.settings
    if static(node):
        voters = ",".join(f"{n}@{controller_endpoint(s, n)}" for n in _static_voters(node))
        return f"controller.quorum.voters={voters}"
    servers = ",".join(controller_endpoint(s, n) for n in range(1, s.nodes + 1))
    return f"controller.quorum.bootstrap.servers={servers}"


def format_flags(node: Kafka) -> list[str]:
    """How ``node``'s empty storage is formatted: with the stack's initial voters when it
    is one of them (a fresh stack: node 1 writes the list for all), else as an observer
    of the cluster that exists (``--no-initial-controllers``; ``grow`` adds it)."""
    path = _initial_file(node.settings)
    if node.node == 1 and not path.exists():
        s = node.settings
        voters = [f"{n}@{controller_endpoint(s, n)}:{kafka_uuid()}" for n in range(1, s.nodes + 1)]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(",".join(voters) + "\n")
    initial = path.read_text().strip() if path.exists() else ""
    if any(v.split("@", 1)[0] == str(node.node) for v in initial.split(",") if v):
        return ["--initial-controllers", initial]
    return ["--no-initial-controllers"]


def admin_config(node: Kafka) -> str:
    """``node``'s properties as a tool's config (``add-controller`` reads its id, its
    metadata directory and its controller listener there), speaking TLS with its
    certificate (the broker is a super user)."""
    path = node.conf / f"{node.name}-tool.properties"
    path.write_text(node.properties.read_text() + "security.protocol=SSL\n")
    return str(path)


def voters(node: Kafka) -> set[int]:
    """The quorum's voters (``kafka-metadata-quorum describe --status``)."""
    return parse_voters(node.admin_tool(QUORUM_COMMAND, "describe", "--status"))


def add_controller(node: Kafka) -> None:
    """``node`` (running, formatted with ``--no-initial-controllers``) made a voter;
    StackError while it has not caught up with the metadata log."""
    node.admin_tool(QUORUM_COMMAND, "add-controller", config=admin_config(node))


def parse_voters(out: str) -> set[int]:
    """The voters' ids in what ``kafka-metadata-quorum describe --status`` printed."""
    match = re.search(r"^CurrentVoters:\s*(\[.*?\])\s*$", out, re.MULTILINE | re.DOTALL)
    if match is None:
        raise StackError(f"kafka-metadata-quorum describe printed no voters:\n{out[-2000:]}")
    text = match.group(1)
    if text.lstrip("[").lstrip().startswith("{"):
        return {int(v["id"]) for v in json.loads(text)}
    return {int(v) for v in re.findall(r"\d+", text)}  # older releases print [1,2,3]
