"""The worker: executes run requests at least once, with one visible effect per run id.

- ``loop``: ``Worker``, the loop and partition ownership;
- ``intake``: run requests in, one backlog per priority, flow control;
- ``replay``: history read for dedup after an assignment; control read for cancels;
- ``attempts``: the run threads and the verdict on each attempt (the decisions
  themselves are pure: ``consumers.core.verdict``);
- ``outbox``: what a finished run leaves, then the commit (``Outbox.settle``);
- ``pending``: the record of one run between reading and settling.

Outcomes go to ``history``: STARTED, then SUCCEEDED, FAILED (with the next attempt's
time; the retry itself is a TimerRequest on ``timers``, held by the scheduler),
TIMED_OUT, CANCELED, DEAD_LETTERED (+ a DLQ record) or DUPLICATE.
"""

from cronstream.consumers.worker.config import WorkerConfig
from cronstream.consumers.worker.loop import Worker

__all__ = ["Worker", "WorkerConfig"]
