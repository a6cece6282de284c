"""A destination that takes no calls stalls only the runs that go to it: one
worker, an http server that accepts every call and never answers, and a healthy one;
the healthy server's runs keep starting at once while the silent one's hold their
destination's slots (``--destination-slots``, half of ``--concurrency``) and end by
their own timeout. (The same rule for a kafka partition without a leader is the cluster
chaos row ``destination-leaderless``: one node has no partition without a leader.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cronstream.runtime.settings import Settings
from cronstream.schemas.events import RunStatus
from tests.integration.helpers import CronstreamProcess, Target
from tests.integration.test_worker import put, settled, trigger, wait_for, worker

pytestmark = pytest.mark.integration
TIMEOUT_S = 8


def test_a_destination_that_never_answers_holds_only_its_own_slots(
    ns: Settings, tmp_path: Path, target: Target, procs: list[CronstreamProcess]
) -> None:
    silent = Target()
    silent.slow_s = 120  # accepts the call, answers long after any run's timeout
    put(ns, id="silent", target="http", url=f"{silent.url}/slow", timeout=f"{TIMEOUT_S}s")
    put(ns, id="ok", target="http", url=f"{target.url}/ok")
    worker(ns, tmp_path, procs, "w", "--concurrency", "8")
    stalled = trigger(ns, "silent", [f"s{i}" for i in range(40)])
    time.sleep(1.5)  # the silent server holds the attempts it took
    began = time.time()
    healthy = trigger(ns, "ok", [f"k{i}" for i in range(40)])
    seen = wait_for(ns, settled(healthy), timeout=60)
    done = [o for o in seen if o.run_id in set(healthy) and o.status is RunStatus.SUCCEEDED]
    assert done, "no healthy run ended"
    last = max(o.finished_at.timestamp() for o in done if o.finished_at is not None)
    print(
        f"40 healthy runs ended {last - began:.2f} s after their trigger; the silent "
        f"server took {len(silent.keys('/slow'))} calls"
    )
    # Before the fix the 8 slots were all the silent runs' until their timeout (8 s).
    assert last - began < TIMEOUT_S / 2, f"healthy runs waited {last - began:.1f} s"
    assert len(set(target.keys("/ok"))) == 40
    # The silent destination's runs end by their own timeout, the waiting ones too.
    seen = wait_for(ns, settled(stalled, status="TIMED_OUT"), timeout=3 * TIMEOUT_S + 30)
    ends = [o for o in seen if o.run_id in set(stalled) and o.status is RunStatus.TIMED_OUT]
    waited = [o for o in ends if o.started_at is None]
    assert waited, "no silent run waited for a slot (the bulkhead did not hold them)"
    assert all(
        "timed out waiting for a slot of http://127.0.0.1:" in (o.error or "") for o in waited
    )
    assert len(silent.keys("/slow")) <= 4 * 2  # its 4 slots, and those freed at timeouts
