"""``python -m tests.chaos.shifted_clock SECONDS ROLE [ARGS...]``: ``cronstream ROLE`` with
its wall clock (``time.time``, what a scheduler fires by) ``SECONDS`` ahead (negative:
behind), its monotonic clock (its timeouts) untouched. The clock row of the cluster
suite (``tests.chaos.cluster.clock_ahead``).

Not libfaketime: preloaded into Python 3.11 it broke the process's waits (with the
monotonic clock left alone ``time.sleep`` fails with EINVAL; faked, ``Event.wait``
never returns), so a scheduler under it never joined its group.
"""

from __future__ import annotations

import runpy
import sys
import time


def main() -> None:
    shift = float(sys.argv[1])
    real, real_ns = time.time, time.time_ns
    time.time = lambda: real() + shift
    time.time_ns = lambda: real_ns() + int(shift * 1e9)
    sys.argv = ["cronstream", *sys.argv[2:]]
    runpy.run_module("cronstream.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
