"""A catch-up after an outage against the tenant's fire rate, in the pure scheduling core
with a virtual clock: 100 jobs of one tenant every second, misfire ``all`` (1,000
catch-up runs, a 3-hour window), recovered from a checkpoint 2 hours old at a tenant
rate of 10/s. Counted: the runs emitted at the recovery's instant, in its first second,
and those deferred at the end of that second.

The measurement runs in a child ``python -c`` whose working directory is ``code_root``,
so the same text measures any checkout (main at c4846ca beside this branch): it uses
only what both have (``PartitionScheduler``, ``TenantRates``, ``JobSchedule``).

    python -m tests.bench.catchup [CODE_ROOT]    # one JSON object (default: .)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tests.bench.common import run_in


def _measure() -> dict[str, Any]:
    """Runs in the checkout measured (imports from its working directory)."""
    from cronstream.streams.core.misfire import Fire
    from cronstream.streams.core.partition import PartitionScheduler
    from cronstream.streams.core.rates import TenantRates
    from cronstream.streams.core.schedule import JobSchedule, Misfire

    second, hour, jobs, rate = 1000, 3_600_000, 100, 10.0
    start = 1_800_000_000_000 - 1_800_000_000_000 % hour
    now = start + 2 * hour
    core = PartitionScheduler(0, fired_through=start, rates=TenantRates(rate))
    at_once = 0
    for i in range(jobs):
        job = JobSchedule(
            f"acme/j{i}", every_ms=second, tenant="acme", misfire=Misfire("ALL", 1000, 3 * hour)
        )
        actions = core.recover(job, now=now, known=True, arrived_ms=start)
        at_once += sum(1 for a in actions if type(a) is Fire)
    at_once += sum(1 for a in core.due(now) if type(a) is Fire)
    first_second = at_once
    for tick in range(now + 10, now + second, 10):  # the processor's 10 ms ticks
        first_second += sum(1 for a in core.due(tick) if type(a) is Fire and a.slot_ms <= now)
    return {
        "jobs": jobs,
        "rate_per_s": rate,
        "outage_s": 2 * hour // second,
        "emitted_at_once": at_once,
        "emitted_first_second": first_second,
        "deferred": sum(core.deferred.values()),
    }


def catchup_first_second(code_root: str | Path) -> dict[str, Any]:
    """``_measure`` run against the checkout at ``code_root`` (its result as a dict)."""
    result: dict[str, Any] = run_in(code_root, _measure, timeout=600)
    return result


if __name__ == "__main__":
    print(json.dumps(catchup_first_second(sys.argv[1] if len(sys.argv) > 1 else ".")))
