"""Every role stops within 10 s of SIGTERM with its broker frozen. A frozen
broker (SIGSTOP: a long GC pause, a paused VM) answers nothing and closes nothing: a
client's flush, commit or group leave waits for its socket to time out, a minute later,
and a scheduler once ignored SIGTERM for over 90 s with its broker down. Each role is
started and joined, the shared Kafka is frozen, and every role gets SIGTERM at once.
Marked ``restarts_stack``: it freezes the shared broker, so it runs alone, after the
rest."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cronstream.runtime.lakehouse import local_environment
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import EXIT_STOP_OVERRUN, STOP_BUDGET_S
from tests.chaos import stack
from tests.integration.helpers import CronstreamProcess, free_port
from tests.integration.test_waiting_roles import ready, start, until

pytestmark = [pytest.mark.integration, pytest.mark.restarts_stack]
# Besides the budget: the signal's delivery and the interpreter's exit, on a loaded box.
SLACK_S = 1.5
ROLES: dict[str, tuple[str, ...]] = {
    "scheduler": ("scheduler",),
    "worker": ("worker",),
    "sink": ("sink",),
    "admission": ("admission",),
    "triggers": ("triggers",),
    "dependencies": ("dependencies",),
    "archiver": ("archiver", "--flush-interval", "1s"),
    "flows-coordinator": ("flows-coordinator", "--nice", "0"),
}


def _freeze(settings: Settings, sig: signal.Signals) -> None:
    pid = stack.service(settings, "kafka").pid()
    assert pid is not None, "the shared Kafka is not running"
    os.killpg(os.getpgid(pid), sig)


def test_every_role_stops_within_10_s_of_sigterm_with_its_broker_frozen(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    ports = {role: free_port() for role in [*ROLES, "api"]}
    roles = {role: (*args, "--metrics-port", str(ports[role])) for role, args in ROLES.items()}
    roles["api"] = ("api", "--port", str(ports["api"]))
    started = start(ns, tmp_path, procs, local_environment(tmp_path / "archive"), roles)
    live = list(started.values())
    until(lambda: all(ready(port) == 200 for port in ports.values()), "every role ready", live)
    for role in ("scheduler", "worker", "sink"):
        until(lambda role=role: "assigned" in started[role].log(), f"the {role} to join", live)
    _freeze(ns, signal.SIGSTOP)
    try:
        time.sleep(2)  # mid-loop, their requests unanswered
        began = time.monotonic()
        for proc in live:
            proc.proc.send_signal(signal.SIGTERM)
        took: dict[str, float] = {}
        while len(took) < len(started) and time.monotonic() - began < 3 * STOP_BUDGET_S:
            for name, proc in started.items():
                if name not in took and proc.proc.poll() is not None:
                    took[name] = time.monotonic() - began
            time.sleep(0.05)
    finally:
        _freeze(ns, signal.SIGCONT)
    codes = {name: proc.proc.poll() for name, proc in started.items()}
    report = ", ".join(f"{n} {took.get(n, float('inf')):.1f} s (exit {codes[n]})" for n in started)
    late = [n for n in started if took.get(n, float("inf")) > STOP_BUDGET_S + SLACK_S]
    assert not late, f"not stopped within {STOP_BUDGET_S:.0f} s: {report}\n" + "\n".join(
        f"--- {n}\n{started[n].log()[-2500:]}" for n in late
    )
    assert set(codes.values()) <= {0, EXIT_STOP_OVERRUN}, report
    print(f"stopped with Kafka frozen: {report}")
