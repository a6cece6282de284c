"""The stop deadline (``runtime.stop.arm``): a process asked to stop is gone
within its budget whatever it waits for, with ``EXIT_STOP_OVERRUN`` and a log line
naming where its main thread was stuck; armed again, the earlier deadline holds."""

from __future__ import annotations

import subprocess
import sys
import time

from cronstream.runtime.stop import EXIT_STOP_OVERRUN


def _run(code: str) -> tuple[int, float, str]:
    began = time.monotonic()
    argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, time.monotonic() - began, done.stderr


STUCK = """
import logging, time
logging.basicConfig(level=logging.INFO)
from cronstream.runtime import stop
{arming}
def frozen_broker_call():
    time.sleep(30)
frozen_broker_call()
"""


def test_a_process_stuck_after_its_stop_exits_at_its_deadline() -> None:
    code, took, err = _run(STUCK.format(arming="stop.arm(2.0)"))
    assert code == EXIT_STOP_OVERRUN, err
    assert 1.0 < took < 10, took
    assert "not stopped by the stop deadline" in err
    assert "frozen_broker_call" in err  # where it was stuck


def test_the_earlier_deadline_holds() -> None:
    code, took, err = _run(STUCK.format(arming="stop.arm(40.0); stop.arm(2.0); stop.arm(30.0)"))
    assert code == EXIT_STOP_OVERRUN, err
    assert took < 10, took
