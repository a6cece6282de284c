"""The process's one stop flag: set when SIGTERM or SIGINT arrives
(``cronstream.foreground.stop_on_signals``), and looked at by every retry that can
outlast a stop. A loop that retries while a broker is away (``runtime.kafka.offsets``
``retrying``: the committed offsets and watermarks a new owner asks for) gives up with
``StopWaiting`` once it is set, instead of retrying for two minutes: a role with its
broker down stops when told to (a scheduler ignored SIGTERM for over 90 s, issue 48).
What is not done is done again by the partition's next owner, as after a crash."""

from __future__ import annotations

import threading

REQUESTED = threading.Event()


class StopWaiting(Exception):
    """Asked to stop while a dependency was away: what waited for it was not done."""


def requested() -> bool:
    """Whether this process was asked to stop."""
    return REQUESTED.is_set()
