"""Large freed blocks go back to the system (``runtime.memory``): a process that read
batches of 600 KB records (the admission) does not keep them as heap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cronstream.runtime.memory import return_large_allocations

# A batch of 250 records of 600 KB alive at once, four times, with small objects kept
# between them (as a decision's answers are), then the RSS growth in MiB.
BATCHES = """
import gc, os, sys
sys.path.insert(0, {root!r})
if {held}:
    from cronstream.runtime.memory import return_large_allocations
    assert return_large_allocations()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
kept, base = [], rss()
for b in range(4):
    batch = [bytes([b]) * 600_000 for _ in range(250)]
    kept.extend(("answer" * 8, i, b) for i in range(len(batch)))
    del batch
gc.collect()
print(round(rss() - base, 1))
"""


def _growth(held: bool) -> float:
    root = str(Path(__file__).resolve().parents[2])
    code = BATCHES.format(root=root, held=held)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return float(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_batches_of_large_records_leave_nothing_behind() -> None:
    assert return_large_allocations()  # glibc here: the call is taken
    held = _growth(held=True)
    assert held < 16, f"{held} MiB kept after the batches were freed"
    # without it (glibc's dynamic threshold) the same batches stay: the test's premise
    assert _growth(held=False) > 64
