"""What a long-lived process gives back to the system when it frees a large block.

glibc's ``malloc`` serves a block over its mmap threshold (128 KiB at start) with its own
mapping, returned to the system on ``free``; but the first such block freed *raises* the
threshold to its size (up to 32 MiB), so every later block of that size comes from the
heap, whose freed space is kept. A record of 600 KB read by the admission (a batch of 500
of them) left the process 256 MiB larger for good; the same pattern in a bare
Python process: +144 MiB after four batches of 250, +0.6 with the threshold held.

``return_large_allocations`` holds the threshold where it starts (setting it turns the
dynamic raise off): each large block is mapped and unmapped on its own, a few µs each,
which no role allocates often (records, fetch buffers and tables of that size are rare
beside the small objects pymalloc serves). Not glibc (musl, macOS): nothing to do."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("cronstream.memory")

M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
MMAP_THRESHOLD = 128 * 1024  # glibc's starting value


def return_large_allocations() -> bool:
    """Hold glibc's mmap threshold at 128 KiB; whether it was (False: not glibc)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:  # not glibc
        return False
    if not mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        log.warning("mallopt(M_MMAP_THRESHOLD) refused: freed large blocks stay in the heap")
        return False
    return True
