"""The machine's floor under a scheduler's fire skew: a bare asyncio loop that does
nothing but fire timers at a steady rate, and how late each one ran.

    python -m tests.bench.loop_lateness SECONDS [RATE]

prints one JSON list: each timer's lateness in ms (run time minus due time, monotonic
clock), ``RATE`` timers a second (1,000 by default) for ``SECONDS``. Started beside a
scheduler in the same window (``tests.bench.fire_path``), it says how late any
process's timers run on this machine at that moment: what no scheduling code can do
better than.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def lateness(seconds: float, rate: float) -> list[float]:
    """Each timer's lateness in ms, ``rate`` timers a second for ``seconds``."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    done = loop.create_future()
    start = loop.time() + 0.05
    count = int(seconds * rate)

    def fired(due: float) -> None:
        late.append((loop.time() - due) * 1000)
        if len(late) == count:
            done.set_result(None)

    for i in range(count):
        due = start + i / rate
        loop.call_at(due, fired, due)
    await done
    return late


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    seconds, rate = float(argv[0]), float(argv[1]) if len(argv) == 2 else 1000.0
    print(json.dumps([round(ms, 3) for ms in asyncio.run(lateness(seconds, rate))]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
