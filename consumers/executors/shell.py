"""`shell` targets: off unless enabled, allowlisted executables only.

The command is split like a shell would (``shlex``) but never run through a shell. Its
first word must be in the allowlist. It runs in its own process group with the payload
on stdin and ``CRONSTREAM_RUN_ID`` (the idempotency key), ``CRONSTREAM_JOB_ID``,
``CRONSTREAM_ATTEMPT`` in its environment. A timeout or a cancel terminates the whole
group (SIGTERM, then SIGKILL after a grace period). Exit status 0 is success.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterable

from consumers.executors.base import Cancelled, ExecutionFailed, RunContext, TargetInvalid, TimedOut
from schemas.events import Target

KILL_GRACE_S = 2.0


class ShellExecutor:
    kind = "shell"

    def __init__(self, *, enabled: bool, allowlist: Iterable[str]) -> None:
        self.enabled = enabled
        self.allowlist = frozenset(allowlist)

    def execute(self, target: Target, context: RunContext) -> str:
        if not self.enabled:
            raise TargetInvalid("shell targets are disabled on this worker (--shell-allow)")
        try:
            argv = shlex.split(target.command or "")
        except ValueError as exc:
            raise TargetInvalid(f"cannot parse command {target.command!r}: {exc}") from exc
        if not argv or argv[0] not in self.allowlist:
            raise TargetInvalid(
                f"command {argv[0] if argv else ''!r} is not in the shell allowlist "
                f"({', '.join(sorted(self.allowlist)) or 'empty'})"
            )
        env = {
            **os.environ,
            "CRONSTREAM_RUN_ID": context.run_id,
            "CRONSTREAM_JOB_ID": context.job_id,
            "CRONSTREAM_ATTEMPT": str(context.attempt),
        }
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=env, start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise TargetInvalid(f"cannot start {argv[0]!r}: {exc}") from exc
        try:
            output, _ = self._communicate(proc, context)
        finally:
            if proc.poll() is None:
                _kill_group(proc)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        tail = output.decode("utf-8", "replace").strip()[-500:]
        if proc.returncode != 0:
            raise ExecutionFailed(f"exit status {proc.returncode}: {tail}")
        return f"exit 0: {tail[-200:]}"

    def _communicate(
        self, proc: subprocess.Popen[bytes], context: RunContext
    ) -> tuple[bytes, None]:
        payload = (context.payload or "").encode()
        first = True
        while True:
            try:
                out, _ = proc.communicate(payload if first else None, timeout=0.1)
                return out, None
            except subprocess.TimeoutExpired:
                first = False
            if context.cancelled.is_set():
                _kill_group(proc)
                raise Cancelled("cancelled while running; process group terminated")
            if context.remaining() <= 0:
                _kill_group(proc)
                raise TimedOut("timed out; process group terminated")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if proc.poll() is not None:
            break
    proc.wait()
