"""What a process's ``/healthz`` and ``/readyz`` answer (``runtime.metrics_server``):
``runtime.metrics.PROBES``, beaten by its main loop."""

from __future__ import annotations

import time
from collections.abc import Callable


class Probes:
    """What ``/healthz`` and ``/readyz`` answer. Live: the process's main loop went round
    within ``LIVE_WITHIN_S`` (``beat``; before its first beat, while it starts or waits
    for the registry, it counts as live). Ready: live and ``set_ready(True)`` (also the
    gauge ``cronstream_member_ready``, through ``on_ready``)."""

    LIVE_WITHIN_S = 60.0  # a worker's revoke may wait a grace period for its runs

    def __init__(self, on_ready: Callable[[bool], None] | None = None) -> None:
        self.last_beat: float | None = None
        self.is_ready = False
        self.on_ready = on_ready

    def set_ready(self, ready: bool) -> None:
        self.is_ready = ready
        if self.on_ready is not None:
            self.on_ready(ready)

    def beat(self) -> None:
        self.last_beat = time.monotonic()

    def live(self) -> tuple[bool, str]:
        if self.last_beat is None:
            return True, "starting"
        quiet = time.monotonic() - self.last_beat
        if quiet > self.LIVE_WITHIN_S:
            return False, f"main loop stuck: last went round {quiet:.0f} s ago"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        live, why = self.live()
        if not live:
            return False, why
        if not self.is_ready:
            return False, "not ready: waiting for its dependencies or its group"
        return True, "ok"
