"""py-spy on a process of a benchmark: its samples for a window, and the functions with
the most own time in them (``hops``: the worker and the scheduler on no-op runs;
``target_rows``: the worker on http and kafka runs)."""

from __future__ import annotations

import collections
import shutil
import subprocess
import sys
from pathlib import Path

SAMPLES_PER_S = 200
# Installed with the dev dependencies, next to the interpreter (a venv's bin), or on PATH.
PY_SPY = str(Path(sys.executable).with_name("py-spy"))


def can_spy() -> bool:
    return shutil.which(PY_SPY) is not None


def spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` without stopping it, collapsed stacks into ``out``."""
    command = [
        shutil.which(PY_SPY) or PY_SPY,
        "record",
        "--nonblocking",
        "-r",
        str(SAMPLES_PER_S),
        "-d",
        str(int(seconds)),
        "-f",
        "raw",
        "-o",
        str(out),
        "-p",
        str(pid),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top_functions(path: Path, count: int) -> list[tuple[float, str]]:
    """The ``count`` functions with the most samples at the top of the stack (own time),
    as a share of every sample, from py-spy's collapsed stacks (one ``a;b;c N`` a line;
    a function's lines summed)."""
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack or not samples.isdigit():
            continue
        top = stack.rsplit(";", 1)[-1]
        name = top.split(" (", 1)[0]
        where = top.split(" (", 1)[1].split(":", 1)[0] if " (" in top else ""
        own[f"{name} ({where})"] += int(samples)
        total += int(samples)
    return [(100 * n / max(1, total), name) for name, n in own.most_common(count)]
