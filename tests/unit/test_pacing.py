"""The worker loop's pause after a step that found little to do (consumers.core.pacing)."""

from __future__ import annotations

import pytest

from cronstream.consumers.core.pacing import PACE_BATCH, PACE_S, pause_s


def test_a_step_with_a_few_events_pauses_until_pace_s_after_it_began() -> None:
    assert pause_s(worked=1, running=3, waiting=0, began=10.0, now=10.0005) == pytest.approx(
        PACE_S - 0.0005
    )
    assert pause_s(worked=0, running=1, waiting=0, began=10.0, now=10.0) == pytest.approx(PACE_S)


def test_a_step_that_took_pace_s_or_longer_does_not_pause() -> None:
    assert pause_s(worked=1, running=3, waiting=0, began=10.0, now=10.0 + PACE_S) == 0
    assert pause_s(worked=1, running=3, waiting=0, began=10.0, now=11.0) == 0


def test_a_busy_step_does_not_pause() -> None:
    assert pause_s(worked=PACE_BATCH, running=64, waiting=0, began=10.0, now=10.0) == 0


def test_runs_waiting_for_a_slot_are_started_as_soon_as_one_ends() -> None:
    # a worker held back by its concurrency: pausing would cap it at its slots per PACE_S
    assert pause_s(worked=2, running=4, waiting=100, began=10.0, now=10.0) == 0


def test_nothing_running_leaves_the_wait_to_the_consumer() -> None:
    assert pause_s(worked=1, running=0, waiting=0, began=10.0, now=10.0) == 0
