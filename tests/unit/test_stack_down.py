"""`make down` stops every service that runs, whatever CRONSTREAM_NODES says when it is
run: a stack started with NODES=3 and stopped without it left cassandra-2 and
cassandra-3 running (issue 48, "Operating the shape")."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from infra.services import Cassandra
from infra.stack import down, nodes_started
from runtime.settings import Settings


def test_the_nodes_started_are_read_from_the_pid_files(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert nodes_started(settings) == 1
    run = tmp_path / "run"
    run.mkdir()
    for name in ("kafka.pid", "kafka-2.pid", "cassandra-3.pid", "s3proxy.pid", "odd-x.pid"):
        (run / name).write_text("1")
    assert nodes_started(settings) == 3
    assert nodes_started(replace(settings, nodes=5)) == 5


def test_down_without_nodes_stops_a_third_node(tmp_path: Path) -> None:
    settings = Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})
    assert settings.nodes == 1
    third = Cassandra(replace(settings, nodes=3), 3)
    # A process that passes for the third Cassandra node: its marker on its command line.
    node = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", third.marker],
        start_new_session=True,
    )
    try:
        third.pidfile.parent.mkdir(parents=True)
        third.pidfile.write_text(str(node.pid))
        assert third.running()
        said: list[str] = []
        down(settings, say=said.append)
        assert node.wait(timeout=10) is not None
        assert "stopping cassandra-3" in said
        assert not third.pidfile.exists()
    finally:
        node.kill()
        node.wait()
