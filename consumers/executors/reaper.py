"""The parent of every shell run: runs one command and leaves no process of it behind.

``python -I -S reaper.py GRACE_S ARGV...`` (the shell executor starts it in a session
of its own). It marks itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every
process the command starts stays its descendant even after ``setsid`` or a double fork,
then spawns the command with the reaper's stdin, stdout and stderr. When the command
exits, or when the reaper gets SIGTERM (the run timed out or was cancelled), every
remaining descendant gets SIGTERM, and SIGKILL ``GRACE_S`` seconds later; the reaper
exits only when it has no child left, with the command's status (``128 + signal`` when
a signal ended it; 127 when it could not be started).

Standard library only, and no imports beyond the few it needs: it is started for every
shell run, before the command.
"""

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
NOT_STARTED = 127


class Stop(Exception):
    """SIGTERM arrived: stop the command and everything it started."""


def _on_term(signum: int, frame: object) -> None:
    raise Stop


def descendants(root: int) -> list[int]:
    """Every live process whose chain of parents leads to ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # it ended meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def reap() -> bool:
    """Collect ended children without waiting; False when no child is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def end_all(grace_s: float) -> None:
    """SIGTERM every descendant, SIGKILL what is left after ``grace_s``, until none."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    me = os.getpid()
    for pid in descendants(me):
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while reap() and time.monotonic() < deadline and descendants(me):
        time.sleep(0.02)
    while reap():
        for pid in descendants(me):
            _signal(pid, signal.SIGKILL)
        time.sleep(0.01)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def main(argv: list[str]) -> int:
    grace_s, command = float(argv[0]), argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write(f"cronstream: cannot become a subreaper: errno {ctypes.get_errno()}\n")
        return NOT_STARTED
    signal.signal(signal.SIGTERM, _on_term)
    code = 128 + signal.SIGTERM
    try:
        try:  # Python ignores SIGPIPE; the command gets the default back
            child = os.posix_spawnp(
                command[0], command, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
            )
        except OSError as exc:
            sys.stderr.write(f"cronstream: cannot start {command[0]!r}: {exc.strerror}\n")
            return NOT_STARTED
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                exited = os.waitstatus_to_exitcode(status)
                code = exited if exited >= 0 else 128 - exited
                break
    except Stop:
        pass
    end_all(grace_s)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
