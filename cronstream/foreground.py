"""Running one long-lived cronstream process (scheduler, worker) in the foreground."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from typing import Any, Protocol

from runtime import metrics
from schemas.errors import RegistryUnavailable


def setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)


class Member(Protocol):
    """A long-lived group member: the scheduler's Processor, a Worker."""

    def run(self, should_stop: Callable[[], bool]) -> None: ...


def run_member(
    role: str, *, name: str, group: str, start: Callable[[], Member], metrics_port: int
) -> int:
    """Set up logging, build the member, announce it, and run it until signalled.

    A member cannot start without the schema registry (it resolves its writer schemas
    first). While the registry is unreachable it waits, retrying with a growing delay
    (``cronstream_member_ready`` is 0 meanwhile) instead of exiting: a restart during a
    registry outage must not leave nothing running once the registry is back."""
    setup_logging()
    log = logging.getLogger(f"cronstream.{role}")
    metrics.zero_counters(role)
    metrics.serve(metrics_port)
    stopping = _stop_on_signals()
    delay = 0.5
    while True:
        try:
            member = start()
            break
        except RegistryUnavailable as exc:
            log.warning("%s %s waiting for the schema registry (%s); retrying in %.1f s",
                        role, name, exc, delay)  # fmt: skip
            metrics.PROBES.beat()  # waiting is alive, not ready
            if _sleep_unless(stopping, delay):
                return 0
            delay = min(2 * delay, 30.0)
    metrics.PROBES.set_ready(True)
    log.info("%s %s joining group %s", role, name, group)
    beat = metrics.PROBES.beat

    def should_stop() -> bool:  # asked once per round of the member's loop
        beat()
        return bool(stopping)

    member.run(should_stop)
    return 0


def _stop_on_signals() -> list[int]:
    """A list that gets the signal number when SIGTERM or SIGINT arrives."""
    stopping: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return stopping


def _sleep_unless(stopping: list[int], seconds: float) -> bool:
    """Sleep up to ``seconds``; True (at once) if a stop signal came."""
    deadline = time.monotonic() + seconds
    while not stopping and time.monotonic() < deadline:
        time.sleep(min(0.1, seconds))
    return bool(stopping)
