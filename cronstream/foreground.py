"""Running one long-lived cronstream process (scheduler, worker) in the foreground."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from typing import Any, Protocol

from runtime import metrics


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
    """Set up logging, build the member, announce it, and run it until signalled."""
    setup_logging()
    member = start()
    logging.getLogger(f"cronstream.{role}").info("%s %s joining group %s", role, name, group)
    return run_until_signalled(member.run, metrics_port=metrics_port)


def run_until_signalled(run: Callable[[Callable[[], bool]], None], *, metrics_port: int) -> int:
    """Serve metrics, then ``run(should_stop)`` until SIGTERM or SIGINT asks it to stop
    (the process then finishes its own clean handover and returns 0)."""
    metrics.serve(metrics_port)
    stopping: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    run(lambda: bool(stopping))
    return 0
