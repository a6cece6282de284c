"""Targets the benchmarks point python jobs at."""

from __future__ import annotations

from cronstream.consumers.executors.base import RunContext


def noop(context: RunContext) -> None:
    """Does nothing: what is left is the cost of scheduling, executing and recording."""
    return None
