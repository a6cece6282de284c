"""The link faults of the cluster's test hosts (infra.hosts), on a real network
namespace of their own: a host held 200 ms answers each round trip 200 ms later
(``tests.chaos.link_delay``: no netem in this kernel); a host losing every packet does
not answer; restored, it answers at once again."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from cronstream.infra import hosts
from tests.chaos.link_delay import Delayer

pytestmark = pytest.mark.integration

CLEAR_S = 0.15  # a clear link's round trip on the bridge (a millisecond; the rest is load)

# A client inside the host: the median of 5 round trips to the machine, or "refused".
ROUND_TRIPS = """
import socket, statistics, sys, time
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
except OSError as exc:
    print("unreachable", exc)
    sys.exit(0)
times = []
for _ in range(5):
    began = time.monotonic()
    c.sendall(b"x")
    c.recv(1)
    times.append(time.monotonic() - began)
print(statistics.median(times))
"""


@pytest.fixture
def host() -> Iterator[hosts.Host]:
    made = hosts.role_host("cstest-link", 9)
    hosts.ensure(made)
    yield made
    hosts.restore(made)
    hosts.remove(made)


@pytest.fixture
def echo() -> Iterator[int]:
    """An echo server on the machine's bridge address; its port."""
    server = socket.create_server((hosts.GATEWAY, 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(64):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _round_trip(host: hosts.Host, port: int) -> str:
    done = subprocess.run(
        [*hosts.prefix(host), sys.executable, "-c", ROUND_TRIPS, hosts.GATEWAY, str(port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_a_held_host_answers_each_round_trip_its_delay_later_and_at_once_when_restored(
    host: hosts.Host, echo: int
) -> None:
    assert float(_round_trip(host, echo)) < CLEAR_S
    delayer = Delayer(host, 200)
    delayer.start()
    try:
        hosts.hold(host, delayer.queue)
        held = [float(_round_trip(host, echo)) for _ in range(2)]
    finally:
        hosts.restore(host)
        said = delayer.stop()
    assert all(0.2 <= s < 1.0 for s in held), held  # never sooner; later only by load
    assert said.startswith("held ")
    assert " 0 overflows" in said
    assert float(_round_trip(host, echo)) < CLEAR_S


def test_a_host_losing_every_packet_does_not_answer_until_restored(
    host: hosts.Host, echo: int
) -> None:
    hosts.lossy(host, 100.0)
    try:
        assert _round_trip(host, echo).startswith("unreachable")
    finally:
        hosts.restore(host)
    assert float(_round_trip(host, echo)) < CLEAR_S
