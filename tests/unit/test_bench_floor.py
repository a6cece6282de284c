"""The benches' measures of the machine and of a fault's gap: a bare loop's timer
lateness (``tests.bench.loop_lateness``) and the longest time without an effect
(``tests.chaos.measure.longest_gap``)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.bench import loop_lateness
from tests.chaos.measure import longest_gap


def test_every_timer_is_measured_once_and_none_runs_before_its_due_time() -> None:
    late = asyncio.run(loop_lateness.lateness(0.2, 200.0))
    assert len(late) == 40
    assert min(late) >= 0


def test_a_loop_held_up_shows_as_late_timers() -> None:
    async def held() -> list[float]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.06, time.sleep, 0.1)  # the loop stands still 100 ms
        return await loop_lateness.lateness(0.3, 100.0)

    late = asyncio.run(held())
    assert max(late) >= 50  # timers due during the stall ran when it ended


def test_the_command_refuses_no_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert loop_lateness.main([]) == 2
    assert "SECONDS" in capsys.readouterr().err


def test_the_longest_gap_and_where_it_began() -> None:
    assert longest_gap([1000, 1100, 1200, 4300, 4400]) == (3100, 1200)
    assert longest_gap([5]) == (0, 0)
    assert longest_gap([]) == (0, 0)
