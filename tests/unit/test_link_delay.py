"""The user-space link delay of the cluster suite (tests.chaos.link_delay.Delay): each
packet released its delay after it came, in arrival order; a stop releases every packet
held at once, none lost."""

from __future__ import annotations

import threading
import time

from tests.chaos.link_delay import Delay


class Packet:
    def __init__(self, n: int, released: list[tuple[int, float]]) -> None:
        self.n, self.released = n, released

    def accept(self) -> None:
        self.released.append((self.n, time.monotonic()))


def _releasing(delay: Delay) -> threading.Thread:
    releaser = threading.Thread(target=delay.release, daemon=True)  # never holds pytest
    releaser.start()
    return releaser


def test_each_packet_is_released_its_delay_after_it_came_in_arrival_order() -> None:
    delay, released = Delay(0.2), list[tuple[int, float]]()
    releaser = _releasing(delay)
    came = []
    try:
        for n in range(5):
            came.append(time.monotonic())
            delay.hold(Packet(n, released))
            time.sleep(0.03)
        time.sleep(0.35)
    finally:
        delay.stop()
        releaser.join(5)
    assert [n for n, _ in released] == [0, 1, 2, 3, 4]
    held = [at - came[n] for n, at in released]
    assert all(0.2 <= s < 1.0 for s in held), held  # never early; late only by load
    assert delay.count == 5
    assert delay.most >= 2  # all 5 when the sleeps keep time; on a loaded machine fewer


def test_a_stop_releases_every_packet_held_at_once() -> None:
    delay, released = Delay(60.0), list[tuple[int, float]]()
    releaser = _releasing(delay)
    try:
        for n in range(3):
            delay.hold(Packet(n, released))
        time.sleep(0.05)
        assert released == []
        stopped = time.monotonic()
    finally:
        delay.stop()
        releaser.join(5)
    assert not releaser.is_alive()
    assert [n for n, _ in released] == [0, 1, 2]
    assert all(at - stopped < 1 for _, at in released)
