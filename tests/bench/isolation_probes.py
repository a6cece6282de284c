"""Probes of ``tests.bench.isolation`` run against a checkout's code: this file's text is
given to ``python -c`` with the checkout as the working directory, so the modules it
imports are that checkout's. It uses only what both revisions measured have, and prints
one line of JSON.

    python -c "$(cat tests/bench/isolation_probes.py)" redact

(The catch-up probe is ``tests.bench.catchup``, which runs the same way.)
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def redact() -> dict[str, float]:
    """``redact_text`` of the 64 KiB adversarial text: ms, median of 5 calls."""
    from schemas.redact import redact_text

    text = "://" + "a." * 32768
    took = []
    for _ in range(5):
        started = time.perf_counter()
        redact_text(text)
        took.append((time.perf_counter() - started) * 1000)
    return {"ms": statistics.median(took)}


PROBES = {"redact": redact}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]]()))
