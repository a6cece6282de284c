"""`make chaos`: faults injected into the real pipeline under load, on a stack of its
own, printed as a table (``docs/chaos.md`` explains every column and figure).

    python -m tests.chaos [--cluster] [--only NAME ...] [--jobs N] [--every-ms MS] [--triggers N]
                          [--keep-stack]

``--cluster``: the node-loss scenarios (``tests.chaos.cluster``) on a 3-node stack of
its own (``stack.cluster_environment``: ports +10000, ``.stack/cluster``).

The chaos stack (``tests.chaos.stack``) is started first and stopped at the end (unless
``--keep-stack``). SIGTERM or Ctrl-C kills every process the suite started (the
scheduler, worker, sink and target processes; then the chaos stack's services).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
import traceback
from contextlib import suppress
from pathlib import Path

from cronstream.runtime.settings import Settings
from tests.chaos import stack
from tests.chaos.cluster import CLUSTER_SCENARIOS
from tests.chaos.load import Pipeline, say
from tests.chaos.measure import Result, Window, measure
from tests.chaos.scenarios import SCENARIOS, Scenario
from tests.integration.helpers import kill_children

WARMUP_S = 10
BEFORE_S = 10
AFTER_MIN_S = 20
AFTER_MAX_S = 150


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--cluster", action="store_true", help="3 nodes: node-loss scenarios")
    every = [s.name for s in (*SCENARIOS, *CLUSTER_SCENARIOS)]
    parser.add_argument("--only", nargs="*", default=None, choices=every)
    parser.add_argument("--jobs", type=int, default=2000, help="http jobs firing")
    parser.add_argument("--every-ms", type=int, default=10000, help="each job's interval")
    parser.add_argument("--triggers", type=int, default=10, help="manual runs a second")
    parser.add_argument("--keep-stack", action="store_true", help="leave the chaos stack up")
    args = parser.parse_args()
    settings = stack.enter_chaos_environment(cluster=args.cluster)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    results: list[Result] = []
    try:
        stack.up(settings)
        for scenario in CLUSTER_SCENARIOS if args.cluster else SCENARIOS:
            if args.only is None or scenario.name in args.only:
                print(f"[chaos] {scenario.name}: {scenario.title}", flush=True)
                results.append(run(scenario, settings, args))
                print_table(results[-1:], args)
    finally:
        kill_children()
        if not args.keep_stack:
            stack.down(settings)
    print_table(results, args)
    return 0


def run(
    scenario: Scenario, settings: Settings, args: argparse.Namespace
) -> Result:  # long: one scenario: load, fault, heal, then its checks
    logdir = Path(tempfile.mkdtemp(prefix=f"cschaos-{scenario.name}-"))
    say(f"logs in {logdir}")
    pipeline = Pipeline(
        settings, logdir, jobs=args.jobs, every_ms=args.every_ms, triggers=args.triggers
    )
    try:
        pipeline.start_target()
        if scenario.prepare is not None:
            scenario.prepare(pipeline, settings)
        pipeline.put_jobs(scenario.extra_jobs)
        pipeline.start_members()
        pipeline.wait_live()
        pipeline.start_threads()
        say("live; warming up")
        time.sleep(WARMUP_S)
        start_ms = int(time.time() * 1000)
        time.sleep(BEFORE_S)
        fault_start, fault_end = scenario.fault(pipeline, settings)
        _settle(pipeline, fault_end)
        end_ms = int(time.time() * 1000) - 3000
        time.sleep(5)
        say("stopping the schedulers, draining")
        pipeline.finish(end_ms)
        say("measuring")
        manual = [r for t, r in pipeline.triggered if start_ms / 1000 <= t <= end_ms / 1000]
        result = measure(
            scenario.name,
            pipeline.settings,
            jobs=pipeline.jobs,
            every_ms=args.every_ms,
            manual=manual,
            window=Window(start_ms, end_ms, fault_end),
            target_log=pipeline.target_log,
        )
        sink = _sink_recovery(pipeline, fault_end)
        if sink > result.recovery_s:
            result.notes.append(
                f"history caught up {sink:.0f} s after (runs {result.recovery_s:.0f} s)"
            )
            result.recovery_s = sink
        result.crashes = [c for m in pipeline.members.values() for c in m.crashes]
        if pipeline.trigger_failures:
            result.notes.append(
                f"{pipeline.trigger_failures} triggers not acknowledged (not expected)"
            )
        result.notes.append(
            f"fault began {fault_end - fault_start:.0f} s before recovery was timed"
        )
        result.notes.extend([*pipeline.notes, *(line() for line in pipeline.after)])
        result.notes.append(f"logs {logdir}")
        return result
    except Exception:
        traceback.print_exc()
        return Result(
            scenario.name,
            notes=[*pipeline.notes, f"FAILED to run: see the traceback above; logs {logdir}"],
        )
    finally:
        pipeline.kill_all()
        with suppress(Exception):
            pipeline.drop()
        if scenario.restore is not None:
            scenario.restore(settings)


def _rate(pipeline: Pipeline) -> float:
    """Runs a second the pipeline is asked for."""
    return len(pipeline.jobs) * 1000 / pipeline.every_ms + pipeline.triggers_per_s


def _settle(pipeline: Pipeline, since: float) -> None:
    """After the fault: until the workers and the sink keep up again (lag under two
    seconds of load for 5 samples in a row), at least AFTER_MIN_S, at most AFTER_MAX_S."""
    limit = 2 * _rate(pipeline)
    while time.time() - since < AFTER_MAX_S:
        time.sleep(1)
        pipeline.check_members()
        recent = [s for s in pipeline.lag.samples if s[0] > since][-5:]
        calm = len(recent) == 5 and all(w < limit and s < 2 * limit for _, w, s in recent)
        if calm and time.time() - since >= AFTER_MIN_S:
            return
    say(f"still behind {AFTER_MAX_S} s after the fault; measuring anyway")


def _sink_recovery(pipeline: Pipeline, since: float) -> float:
    """Seconds after ``since`` until the sink's lag last exceeded two seconds of load
    (each run writes two outcomes: STARTED and its end)."""
    behind = [t for t, _, s in pipeline.lag.samples if t >= since and s > 4 * _rate(pipeline)]
    return max(behind) - since if behind else 0.0


def print_table(results: list[Result], args: argparse.Namespace) -> None:
    head = (
        "scenario",
        "expected",
        "lost",
        "silently missed",
        "unflagged repeats",
        "flagged repeats",
        "repeat deliveries",
        "deduplicated",
        "stall s",
        "gap s",
        "recover s",
    )
    rows = [
        (
            r.name,
            f"{r.expected:,}",
            str(r.lost),
            str(r.silently_missed),
            str(r.unflagged_repeats),
            f"{r.flagged_repeats:,}",
            f"{r.repeat_deliveries:,}",
            f"{r.deduplicated:,}",
            f"{r.stall_s:.1f}",
            f"{r.gap_s:.1f}",
            f"{r.recovery_s:.1f}",
        )
        for r in results
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    print()
    for line in (head, *rows):
        print(
            "  ".join(
                c.rjust(w) if i else c.ljust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            )
        )
    print(
        f"\nload: {args.jobs:,} http jobs firing every {args.every_ms / 1000:g} s + "
        f"{args.triggers} manual runs a second; {os.cpu_count()} cores"
    )
    for r in results:
        print(f"  {r.name}: " + "; ".join(_details(r) + r.notes))


def _details(r: Result) -> list[str]:
    """What a row's figures leave out: its counts beside them, where its longest gap
    began, and examples of what went wrong."""
    extra = [
        f"flagged requests {r.flagged_requests:,}",
        f"MISSED/SKIPPED {r.misfires}",
        f"effects {r.effects:,}",
        f"worker DUPLICATE records {r.worker_duplicates:,}",
        f"dead letters {r.dead_letters:,}",
    ]
    if r.gap_from_ms:
        began = time.strftime("%H:%M:%S", time.localtime(r.gap_from_ms / 1000))
        extra.append(f"longest gap from {began}.{r.gap_from_ms % 1000:03d}")
    if r.stale:
        extra.append(f"run ids whose records arrived out of emission order {r.stale}")
    if r.early:
        extra.append(f"effects before their due time {r.early}: e.g. {r.examples['early'][:3]}")
    if r.failures:
        extra.append(f"failed attempts {dict(r.failures.most_common(3))}")
    if r.lost:
        extra.append(f"lost: {r.lost_no_effect} without effect, {r.lost_no_history} not in history")
    if r.retry_pending:
        extra.append(
            f"{r.retry_pending} runs had their effect and a failed attempt whose "
            "retry was pending when the drain stopped the schedulers (not lost)"
        )
    if r.crashes:
        extra.append(f"PROCESSES THAT DIED: {r.crashes}")
    for kind, examples in r.examples.items():
        extra.append(f"e.g. {kind}: {examples[:3]}")
    return extra


def _interrupted(signum: int, _frame: object) -> None:
    """SIGTERM or Ctrl-C: kill the processes this suite started, then unwind (the
    ``finally`` blocks drop the scenario's topics and stop the chaos stack)."""
    kill_children()
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    sys.exit(main())
