"""Two tiers at scale: ``jobs`` daily cron jobs (one a second of the day per 86,400) and
100 every-second probes on one scheduler process with ``--state-dir``. The first start
builds the stores from the jobs topic; then the process is killed with -9 and a fresh
one started on the same stores, ``restarts`` times: its RSS, the time from its start to
the first on-time probe fire (within 50 ms of its slot), and whether any slot due from
the kill on was missed. Every process runs as the same static group member
(``--instance-id``): the fresh one takes the partitions at once, without waiting for the
killed one's session to time out (10 s)."""

from __future__ import annotations

import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from runtime.settings import Settings
from schemas.events import JobDefinition
from tests.bench.common import (
    job,
    namespace,
    put_jobs,
    row,
    rss_mib,
    run_records,
    scheduler_process,
    wait_all_live,
)

PROBES = 100


def daily(i: int) -> str:
    second = i % 86_400
    return f"{second % 60} {second // 60 % 60} {second // 3600} * * *"


def _start(settings: Settings, state: Path, log: Path, name: str) -> subprocess.Popen[bytes]:
    return scheduler_process(settings, log, name, "--state-dir", str(state),
                             "--instance-id", "tiers-bench")  # fmt: skip


def bench_tiers(base: Settings, restarts: int, jobs: int) -> None:
    with namespace(base) as settings:

        def make(i: int) -> JobDefinition:
            if i < PROBES:
                return job(f"probe-{i}", every_ms=1000)
            return job(f"d-{i}", cron=daily(i))

        wrote = put_jobs(settings, jobs + PROBES, make)
        print(f"  wrote {jobs + PROBES:,} definitions in {wrote:.1f}s", flush=True)
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        state = logdir / "state"
        proc = _start(settings, state, logdir / "build.log", "t0")
        built = wait_all_live(proc, logdir / "build.log", 3600)
        time.sleep(10)
        build_rss = rss_mib(proc.pid)
        print(f"  stores built in {built:.0f}s, RSS {build_rss:.0f} MiB", flush=True)
        rss, first, live, windows = [], [], [], []
        for k in range(1, restarts + 1):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed = time.time()
            log = logdir / f"r{k}.log"
            proc = _start(settings, state, log, f"t{k}")
            live.append(wait_all_live(proc, log, 600))
            time.sleep(20)
            rss.append(rss_mib(proc.pid))
            windows.append((killed, time.time() - 2))
            on_time = [ts for job_id, ts, slot in run_records(settings)
                       if job_id.startswith("probe-") and ts >= killed * 1000
                       and ts - slot <= 50]  # fmt: skip
            first.append(min(on_time) / 1000 - killed if on_time else float("inf"))
            print(f"  restart {k}: live {live[-1]:.1f}s, first on-time fire {first[-1]:.1f}s, "
                  f"RSS {rss[-1]:.0f} MiB", flush=True)  # fmt: skip
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        missed = _missed(settings, jobs, windows)
        store_mib = sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) / 2**20
    row(f"{jobs:,} schedules, --state-dir: RSS after a kill -9 takeover (MiB)",
        f"{statistics.median(rss):.0f}", "<= 1,024",
        f"runs {[round(r) for r in rss]}; building the stores: {built:.0f} s, "
        f"RSS {build_rss:.0f} MiB; stores {store_mib:,.0f} MiB on disk")  # fmt: skip
    row(f"{jobs:,} schedules: kill -9 -> first on-time fire of a fresh process (s)",
        f"{statistics.median(first):.1f}", "<= 10",
        f"runs {[round(f, 1) for f in first]}; all 12 partitions live "
        f"{[round(x, 1) for x in live]} s")  # fmt: skip
    row(f"{jobs:,} schedules: slots due from the kill on with no run request", str(missed),
        "0", f"{restarts} kill -9 takeovers")  # fmt: skip


def _missed(settings: Settings, jobs: int, windows: list[tuple[float, float]]) -> int:
    """Slots of the daily jobs and the probes due inside the takeover windows with no run
    request at all."""
    fired = {(job_id, slot) for job_id, _ts, slot in run_records(settings)}
    missed = 0
    for start, end in windows:
        for second in range(int(start) + 1, int(end)):
            missed += sum((f"probe-{p}", second * 1000) not in fired for p in range(PROBES))
            of_day = second % 86_400
            for i in range(max(PROBES, of_day), jobs + PROBES, 86_400):
                if i % 86_400 == of_day and (f"d-{i}", second * 1000) not in fired:
                    missed += 1
    return missed
