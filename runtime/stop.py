"""The process's one stop flag: set when SIGTERM or SIGINT arrives
(``cronstream.foreground.stop_on_signals``), and looked at by every retry that can
outlast a stop. A loop that retries while a broker is away (``runtime.kafka.offsets``
``retrying``: the committed offsets and watermarks a new owner asks for) gives up with
``StopWaiting`` once it is set, instead of retrying for two minutes: a role with its
broker down stops when told to (a scheduler ignored SIGTERM for over 90 s).
What is not done is done again by the partition's next owner, as after a crash.

**The stop budget.** Some waits cannot look at a flag: a client's close that leaves
its group, a flush, a commit, each talking to a broker that is frozen (SIGSTOP, a long
GC pause) or cut off answers only when its socket times out, a minute later. So a stop
also arms a deadline (``arm``): once ``budget_s`` has passed since the signal (10 s,
``STOP_BUDGET_S``; a worker adds its ``--grace`` for the runs it lets finish), the
process logs where it was stuck and exits at once with ``EXIT_STOP_OVERRUN``. What it
had not handed over is done again by the next owner, as after a crash: committed
offsets never pass what was made durable, so nothing is lost, and what is repeated is
flagged ``possible_duplicate`` where the role flags it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback

REQUESTED = threading.Event()
STOP_BUDGET_S = 10.0
# The exit status of a process that overran its stop budget (EX_TEMPFAIL): not 0, since
# it did not hand over cleanly; what it held is redone by the next owner.
EXIT_STOP_OVERRUN = 75
# Seconds kept back from the budget for logging and the exit itself.
_MARGIN_S = 0.5

log = logging.getLogger("cronstream.stop")
_lock = threading.Lock()


class _Deadline:
    at: float | None = None  # the monotonic time the process exits at, once armed


_DEADLINE = _Deadline()


class StopWaiting(Exception):
    """Asked to stop while a dependency was away: what waited for it was not done."""


def requested() -> bool:
    """Whether this process was asked to stop."""
    return REQUESTED.is_set()


def arm(budget_s: float = STOP_BUDGET_S) -> None:
    """The process exits with ``EXIT_STOP_OVERRUN`` if still running ``budget_s`` from
    now. Armed again, the earlier of the two deadlines holds (a worker armed with its
    grace plus 10 s at the signal arms 10 s once its running attempts are done)."""
    at = time.monotonic() + max(0.0, budget_s - _MARGIN_S)
    with _lock:
        first = _DEADLINE.at is None
        if _DEADLINE.at is None or at < _DEADLINE.at:
            _DEADLINE.at = at
    if first:
        threading.Thread(target=_watch, args=(budget_s,), name="stop-deadline", daemon=True).start()


def _watch(budget_s: float) -> None:
    while (left := (_DEADLINE.at or 0.0) - time.monotonic()) > 0:
        time.sleep(min(left, 0.5))
    _overrun(budget_s)


def _overrun(budget_s: float) -> None:
    """``budget_s``: the first budget armed (at the signal), for the log."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    where = "".join(traceback.format_stack(frame, limit=8)) if frame is not None else "?"
    log.error(
        "not stopped by the stop deadline (%.0f s after the signal at most; a dependency "
        "frozen or cut off?): exiting now; the next owner redoes what was not handed "
        "over. The main thread was at:\n%s",
        budget_s,
        where,
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_STOP_OVERRUN)
