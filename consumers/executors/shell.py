"""`shell` targets: off unless enabled; only commands an allowlist pattern matches.

The command is split like a shell would (``shlex``) but never run through a shell. The
whole argv must match one of the worker's patterns (``--shell-allow``): a pattern is
split the same way, and each of its words matches one argument (``fnmatch``, so ``*``
matches any one argument); a last word ``**`` matches any number of further arguments.
``sleep *`` allows ``sleep 60`` but not ``sleep 60 70``; ``sh`` alone never allows
``sh -c anything``. Bounds:

- Options are spelled out by the pattern: an argument that starts with ``-`` matches
  only a pattern word that starts with ``-`` (``-n``, ``--count=*``, or ``-*`` for any
  option), never ``*`` nor ``**``. ``date *`` does not allow ``date --file=SECRET``.
- A word with a ``/`` (not an option) is a path pattern: it matches the argument's real
  path (``os.path.realpath``: symlinks followed, relative to the worker's directory),
  one directory level per ``/`` (``*`` never crosses one), and the pattern's own leading
  directories are resolved the same way. ``/opt/jobs/*.sh`` allows a script in
  ``/opt/jobs`` but not a symlink there that leads elsewhere.
- An argument with a ``..`` path segment (``../x``, ``a/../b``, ``--f=../x``) is
  refused, whatever the patterns.

The command runs under ``reaper.py`` in a session of its own, with a scrubbed
environment: ``PATH``, ``HOME``, ``LANG``, ``LC_ALL``, ``TZ``, ``TMPDIR`` when the worker
has them, the variables named by ``--shell-env``, and the run's own (``r.SHELL_RUN_ENV``:
its run id, the idempotency key, its job id and its attempt). Its payload is on
stdin. When the command exits, or at a timeout or a cancel, every process it started
(also one that called ``setsid``) gets SIGTERM, then SIGKILL after a grace period.
Exit status 0 is success. Of its output (stdout and stderr together, in the order the
command wrote them) the last ``--output-limit`` bytes are kept (at least ``OUTPUT_CAP``,
for the error text's tail); the rest is read and dropped. What is kept is the attempt's
output (docs/run-output.md), a failed, timed-out or cancelled attempt's too.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterable
from fnmatch import fnmatchcase
from pathlib import Path

from cronstream.consumers.core.output import Dropped
from cronstream.consumers.errors import Cancelled, ExecutionFailed, TargetInvalid, TimedOut
from cronstream.consumers.executors.base import Output, RunContext, told
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.runtime.options import roles as r
from cronstream.schemas.events import Target
from cronstream.schemas.targets.shell import DOTDOT, argv_matches, option_glob, shell_words

KILL_GRACE_S = 2.0
OUTPUT_CAP = 64 * 1024
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
REAPER = str(Path(__file__).with_name("reaper.py"))
NOT_STARTED = 127  # reaper.py's status when the command could not be started


GLOB = re.compile(r"[*?[]")


class ShellPolicy:
    """Which argv a worker may run (patterns), and which of its variables pass."""

    def __init__(self, allow: Iterable[str], *, env: Iterable[str] = ()) -> None:
        self.patterns: list[tuple[str, tuple[str, ...]]] = []
        for entry in allow:
            words = shell_words(entry, "shell allowlist pattern")
            self.patterns.append((entry, tuple(_anchor(w) if _is_path(w) else w for w in words)))
        self.env = tuple(env)

    @property
    def enabled(self) -> bool:
        return bool(self.patterns)

    def allows(self, argv: list[str]) -> bool:
        return any(argv_matches(words, argv, _word_matches) for _, words in self.patterns)

    def describe(self) -> str:
        return ", ".join(repr(entry) for entry, _ in self.patterns) or "none"

    def environment(self, context: RunContext) -> dict[str, str]:
        env = {k: os.environ[k] for k in (*PASSED_ENV, *self.env) if k in os.environ}
        run_id, job_id, attempt = r.SHELL_RUN_ENV
        env.update({run_id: context.run_id, job_id: context.job_id, attempt: str(context.attempt)})
        return env


def _is_path(word: str) -> bool:
    return "/" in word and not word.startswith("-")


def _anchor(word: str) -> str:
    """A path pattern with its leading directories that hold no wildcard resolved to
    their real path, as the arguments it is compared with are."""
    parts = word.split("/")
    fixed = next((i for i, part in enumerate(parts) if GLOB.search(part)), len(parts))
    if fixed == len(parts):
        return os.path.realpath(word)
    head = "/".join(parts[:fixed]) or ("/" if word.startswith("/") else ".")
    return os.path.realpath(head).rstrip("/") + "/" + "/".join(parts[fixed:])


def _word_matches(word: str, arg: str) -> bool:
    """``schemas.policy.option_glob``, a path word compared with the argument's real path
    one directory per '/'."""
    if _is_path(word) and not arg.startswith("-"):
        real = os.path.realpath(arg).split("/")
        pattern = word.split("/")
        return len(real) == len(pattern) and all(map(fnmatchcase, real, pattern))
    return option_glob(word, arg)


def executor(setup: ExecutorSetup) -> ShellExecutor:
    """The worker's shell executor (declared by ``schemas.targets.shell``): off unless
    the worker has ``--shell-allow`` patterns."""
    config = setup.config
    return ShellExecutor(
        ShellPolicy(config.shell_allow, env=config.shell_env), keep=config.output_limit
    )


class ShellExecutor:
    kind = "shell"

    def __init__(self, policy: ShellPolicy, *, keep: int = OUTPUT_CAP) -> None:
        """``keep``: bytes of a command's output kept (its last; at least OUTPUT_CAP)."""
        self.policy = policy
        self.keep = max(OUTPUT_CAP, keep)

    def _hint(self, argv: list[str]) -> str:
        if any(arg.startswith("-") for arg in argv[1:]):
            return (
                "; an option matches only a pattern word that spells one out "
                "('-n', '--count=*'), never '*' or '**'"
            )
        if argv and self.policy.allows(argv[:1]):
            return (
                f"; a pattern matches the whole command: '{argv[0]} **' would allow any arguments"
            )
        return ""

    def execute(self, target: Target, context: RunContext) -> Output | None:
        if not self.policy.enabled:
            disabled = TargetInvalid("shell targets are disabled on this worker (--shell-allow)")
            raise told(context, disabled, "shell targets are disabled on this worker")
        try:
            argv = shlex.split(target.command or "")
        except ValueError as exc:
            raise TargetInvalid(f"cannot parse command {target.command!r}: {exc}") from exc
        dotdot = next((arg for arg in argv if DOTDOT.search(arg)), None)
        if dotdot is not None:
            raise TargetInvalid(f"command argument {dotdot!r} has a '..' path segment: refused")
        if not argv or not self.policy.allows(argv):
            refused = TargetInvalid(
                f"command {shlex.join(argv)!r} matches no shell allowlist pattern "
                f"({self.policy.describe()}){self._hint(argv)}"
            )
            brief = f"command {shlex.join(argv)!r} is not allowed on this worker"
            raise told(context, refused, brief)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", REAPER, str(KILL_GRACE_S), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.policy.environment(context),
            start_new_session=True,
        )
        try:
            output = _communicate(proc, (context.payload or "").encode(), context, self.keep)
        finally:
            if proc.poll() is None:
                _stop(proc)
            for pipe in (proc.stdin, proc.stdout):
                if pipe is not None:
                    pipe.close()
        data = output.data
        assert isinstance(data, bytes)
        tail = data[-2000:].decode("utf-8", "replace").strip()[-500:]
        if proc.returncode == NOT_STARTED and tail.startswith("cronstream: cannot start"):
            raise TargetInvalid(tail)
        if proc.returncode != 0:
            raise ExecutionFailed(f"exit status {proc.returncode}: {tail}", output=output)
        return output if data else None


def _communicate(
    proc: subprocess.Popen[bytes], payload: bytes, context: RunContext, keep: int
) -> Output:
    """Write the payload, read the output (keeping the last ``keep`` bytes) until the
    process ends; stop it on a cancel or at the deadline (the exception carries the
    output read so far)."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    kept = bytearray()
    dropped: Dropped | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if payload:
            os.set_blocking(proc.stdin.fileno(), False)
            selector.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while selector.get_map():
            for key, _ in selector.select(timeout=0.1):
                if key.fileobj is proc.stdin:
                    payload = _write_some(proc, selector, payload)
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    selector.unregister(proc.stdout)
                    continue
                kept += chunk
                if len(kept) > keep:
                    del kept[: len(kept) - keep]
                    dropped = "start"
            if context.cancelled.is_set():
                _stop(proc)
                raise Cancelled(
                    "cancelled while running; its processes were terminated",
                    output=Output(bytes(kept), dropped),
                )
            if context.remaining() <= 0:
                _stop(proc)
                raise TimedOut(
                    "timed out; its processes were terminated", output=Output(bytes(kept), dropped)
                )
    proc.wait()
    return Output(bytes(kept), dropped)


def _write_some(
    proc: subprocess.Popen[bytes], selector: selectors.BaseSelector, payload: bytes
) -> bytes:
    assert proc.stdin is not None
    try:
        written = os.write(proc.stdin.fileno(), payload[:65536])
    except BrokenPipeError:  # the command does not read its stdin
        written = len(payload)
    payload = payload[written:]
    if not payload:
        selector.unregister(proc.stdin)
        proc.stdin.close()
    return payload


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the reaper, which ends everything the command started; if the reaper
    itself does not end, SIGKILL its process group."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(KILL_GRACE_S + 3.0)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
