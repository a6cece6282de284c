"""``make bench`` interrupted stops what it started (found by review: a bench killed
with SIGTERM left its scheduler and workers firing 12,000 runs/s into its prefix)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.settings import Settings

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> dict[int, str]:
    """pid -> topic prefix of the cronstream processes ``pid`` started."""
    found = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(
                int(line.split()[1])
                for line in status.read_text().splitlines()
                if line.startswith("PPid:")
            )
            env = (status.parent / "environ").read_bytes().split(b"\0")
        except (OSError, StopIteration):
            continue
        if ppid == pid:
            prefix = next(
                (
                    e.split(b"=", 1)[1].decode()
                    for e in env
                    if e.startswith(b"CRONSTREAM_TOPIC_PREFIX=")
                ),
                "",
            )
            found[int(status.parent.name)] = prefix
    return found


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_bench_stopped_by_sigterm_stops_its_processes_and_deletes_its_topics(
    stack: Settings, tmp_path: Path
) -> None:
    log = (tmp_path / "bench.log").open("w")
    bench = subprocess.Popen(
        [sys.executable, "-m", "tests.bench", "--quick", "--only", "drain"],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        children: dict[int, str] = {}
        while time.monotonic() < deadline and not children:
            time.sleep(0.5)
            children = _children(bench.pid)
            assert bench.poll() is None, (tmp_path / "bench.log").read_text()[-3000:]
        assert children, "the bench started no process"
        time.sleep(3)  # its scheduler is firing
        bench.send_signal(signal.SIGTERM)
        bench.wait(timeout=120)
    finally:
        if bench.poll() is None:
            bench.kill()
        log.close()
    prefixes = {p for p in children.values() if p}
    assert prefixes, children
    time.sleep(1)
    assert not [pid for pid in children if _alive(pid)], "a process outlived its bench"
    topics = kafka_admin(stack, superuser=True).list_topics(timeout=10).topics
    left = [t for t in topics if any(t.startswith(p + ".") for p in prefixes)]
    assert left == [], left
