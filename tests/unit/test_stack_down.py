"""`make down` stops every service that runs, whatever CRONSTREAM_NODES says when it is
run: a stack started with NODES=3 and stopped without it left cassandra-2 and
cassandra-3 running."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from cronstream.infra.cassandra_node import Cassandra
from cronstream.infra.service import Service
from cronstream.infra.services import Kafka
from cronstream.infra.stack import down, nodes_started
from cronstream.runtime.settings import Settings


@contextmanager
def posing_as(service: Service) -> Iterator[subprocess.Popen[bytes]]:
    """A process that passes for ``service``: its marker on its command line, its pid
    file written."""
    node = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", service.marker],
        start_new_session=True,
    )
    try:
        service.pidfile.parent.mkdir(parents=True, exist_ok=True)
        service.pidfile.write_text(str(node.pid))
        yield node
    finally:
        node.kill()
        node.wait()


def test_the_nodes_running_are_read_from_the_pid_files(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert nodes_started(settings) == 1
    three = replace(settings, nodes=3)
    stale = Kafka(three, 3).pidfile  # a crashed node's: its pid is not a node
    stale.parent.mkdir(parents=True)
    stale.write_text("1")
    (tmp_path / "run" / "odd-x.pid").write_text("1")
    with posing_as(Kafka(three, 2)):
        assert nodes_started(settings) == 2
        assert not stale.exists()
    assert nodes_started(replace(settings, nodes=5)) == 5


def test_down_without_nodes_stops_a_third_node(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert settings.nodes == 1
    third = Cassandra(replace(settings, nodes=3), 3)
    with posing_as(third) as node:
        assert third.running()
        said: list[str] = []
        down(settings, say=said.append)
        assert node.wait(timeout=10) is not None
        assert "stopping cassandra-3" in said
        assert not third.pidfile.exists()
