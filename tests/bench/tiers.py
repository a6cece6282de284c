"""Two tiers at scale: ``jobs`` daily cron jobs (one a second of the day per 86,400) and
100 every-second probes on one scheduler process with ``--state-dir``. The first start
builds the stores from the jobs topic; then the process is killed with -9 and a fresh
one started on the same stores, ``restarts`` times: its RSS, the time from its start to
the first on-time probe fire (within 50 ms of its slot), and whether any slot due from
the kill on was missed. Every process runs as the same static group member
(``--instance-id``): the fresh one takes the partitions at once, without waiting for the
killed one's session to time out.

Then a host is lost: a second scheduler on its own state directory warms
standby stores of every partition (``streams.scheduler.standby``) and joins (taking its share from
them); the first is killed with -9 and its state directory deleted; the second takes the
rest over from its standby stores once the first's session (SESSION_MS) times out: the
time from the kill to its first on-time probe fire, its RSS, and the slots missed."""

from __future__ import annotations

import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cronstream.runtime.settings import Settings
from tests.bench.common import (
    PROBES,
    job,
    namespace,
    on_time_probes,
    put_probed,
    row,
    rss_mib,
    run_records,
    scheduler_process,
    scheduler_up,
    wait_all_live,
)


def daily(i: int) -> str:
    second = i % 86_400
    return f"{second % 60} {second // 60 % 60} {second // 3600} * * *"


def _start(
    settings: Settings, state: Path, log: Path, name: str, instance: str = "tiers-bench"
) -> subprocess.Popen[bytes]:
    """A scheduler on the stores under ``state``, the static group member ``instance``."""
    return scheduler_process(
        settings,
        log,
        name,
        "--state-dir",
        str(state),
        "--instance-id",
        instance,
        "--session-timeout-ms",
        str(SESSION_MS),
    )


def bench_tiers(
    base: Settings, restarts: int, jobs: int
) -> None:  # long: one bench: restarts, then a host lost
    with namespace(base) as settings:
        put_probed(settings, jobs, lambda i: job(f"d-{i}", cron=daily(i)))
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
            up = scheduler_up(settings, proc, log, killed, timeout=600, settle_s=20)
            live.append(up.live_s)
            rss.append(up.rss_mib)
            first.append(up.first_fire_s)
            windows.append((killed, time.time() - 2))
            print(
                f"  restart {k}: live {live[-1]:.1f}s, first on-time fire {first[-1]:.1f}s, "
                f"RSS {rss[-1]:.0f} MiB",
                flush=True,
            )
        store_mib = sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) / 2**20
        host = _host_lost(settings, proc, state, logdir)
        missed = _missed(settings, jobs, windows)
        host_missed = _missed(settings, jobs, [host["window"]])
    row(
        f"{jobs:,} schedules, --state-dir: RSS after a kill -9 takeover (MiB)",
        f"{statistics.median(rss):.0f}",
        "<= 1,024",
        f"runs {[round(r) for r in rss]}; building the stores: {built:.0f} s, "
        f"RSS {build_rss:.0f} MiB; stores {store_mib:,.0f} MiB on disk",
    )
    row(
        f"{jobs:,} schedules: kill -9 -> first on-time fire of a fresh process (s)",
        f"{statistics.median(first):.1f}",
        "<= 10",
        f"runs {[round(f, 1) for f in first]}; all 12 partitions live "
        f"{[round(x, 1) for x in live]} s",
    )
    row(
        f"{jobs:,} schedules: slots due from the kill on with no run request",
        str(missed),
        "0",
        f"{restarts} kill -9 takeovers",
    )
    row(
        f"{jobs:,} schedules, host lost: kill -9 + state deleted -> every probe on time (s)",
        f"{host['first']:.1f}",
        "<= 10",
        f"taken over by a scheduler with standby stores (warmed in {host['warm']:.0f} s, "
        f"session timeout {SESSION_MS // 1000} s): the 6 partitions it took over live "
        f"{host['live']:.1f} s after the kill; RSS {host['rss']:.0f} MiB; "
        f"{host_missed} slots missed",
    )


SESSION_MS = 6000


def _host_lost(
    settings: Settings, proc: subprocess.Popen[bytes], state: Path, logdir: Path
) -> dict[str, Any]:
    """A second scheduler on its own disk warms standby stores and joins; the first is
    killed with -9 and its state directory deleted (its host is gone): the time from the
    kill to the second's first on-time probe fire, and to all its partitions live."""
    log = logdir / "standby.log"
    standby = _start(settings, logdir / "standby", log, "standby", instance="tiers-standby")
    started = time.time()
    while "standby stores warm" not in log.read_text():
        if standby.poll() is not None or time.time() - started > 3600:
            raise RuntimeError(log.read_text()[-3000:])
        time.sleep(0.5)
    warm = time.time() - started
    while log.read_text().count(" live: ") < 6:  # its share, from its standby stores
        if standby.poll() is not None or time.time() - started > 3600:
            raise RuntimeError(log.read_text()[-3000:])
        time.sleep(0.2)
    time.sleep(20)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    shutil.rmtree(state)
    killed = time.time()
    wait_all_live(standby, log, 600)  # 12 " live: ": its 6, then the 6 taken over
    live = time.time() - killed
    time.sleep(20)
    rss = rss_mib(standby.pid)
    # Each probe's first on-time fire after the kill; the last of them: every partition
    # (the standby's own and the ones it took over) fires on time again.
    firsts = on_time_probes(settings, killed)
    standby.send_signal(signal.SIGTERM)
    standby.wait(timeout=120)
    first = max(firsts.values()) / 1000 - killed if len(firsts) == PROBES else float("inf")
    print(
        f"  host lost: standby warm in {warm:.0f}s, all live {live:.1f}s after the kill, "
        f"every probe on time {first:.1f}s after it, RSS {rss:.0f} MiB",
        flush=True,
    )
    return {
        "warm": warm,
        "live": live,
        "first": first,
        "rss": rss,
        "window": (killed, time.time() - 25),
    }


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
