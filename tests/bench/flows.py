"""Flow benchmarks: a worker, the flows coordinator (faust-streaming) and, for
the last row, a scheduler firing 5,000 no-op jobs per second, in a fresh namespace.

- **Node to node**: a 10-node chain triggered one run at a time; for each edge, the
  downstream node's start (its outcome's ``started_at``) minus its upstream's success
  (read back from history and ``flows.events``): the
  coordinator's hop (outcome event in, row acknowledged, run request out) plus the
  worker's pick-up.
- **1,000 nodes**: wide (one root, 998 nodes after it, one node after all of them) and
  deep (a chain of 1,000): from the trigger to the coordinator's end record.
- **Beside the scheduler**: 5,000 no-op jobs every second (spread by jitter, the
  default lookahead of 1 s) and 0, 5, 10 or 20 chains of 10 nodes every second, each
  demand once per round: flow runs ended per second over a 20 s window, the jobs' fire
  skew (emission minus due time, 0 when emitted ahead: the scheduler's metric), their
  due-to-start lateness, and the CPU of each process (the box's 2 cores are shared).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from cronstream.infra.services import all_services
from cronstream.producers.client import JobClient
from cronstream.producers.flows import flow_from_spec, flow_schedule
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.bench.common import cpu_s, namespace, pct, put_noop_jobs, read_runs, row, started_ms
from tests.integration.helpers import CronstreamProcess, read_topic

NOOP = {"target": "python", "callable": "tests.bench.targets:noop"}


def chain(flow_id: str, n: int, **schedule: str) -> dict[str, object]:
    nodes = [{"name": f"n{i}", **NOOP, **({"after": [f"n{i - 1}"]} if i else {})} for i in range(n)]
    return {"id": flow_id, **schedule, "nodes": nodes}


def wide(flow_id: str, n: int) -> dict[str, object]:
    middle = [f"m{i}" for i in range(n - 2)]
    return {
        "id": flow_id,
        "nodes": [
            {"name": "root", **NOOP},
            *({"name": m, **NOOP, "after": ["root"]} for m in middle),
            {"name": "end", **NOOP, "after": middle},
        ],
    }


def put_flows(settings: Settings, *specs: dict[str, object]) -> None:
    with JobClient(settings) as client:
        for spec in specs:
            limit = settings.max_payload_bytes
            client.put_flow(
                flow_from_spec(spec, max_payload_bytes=limit),
                flow_schedule(spec, max_payload_bytes=limit),
            )


class FlowStack:
    """A worker and a flows coordinator (and, when asked, a scheduler)."""

    def __init__(self, settings: Settings, *, scheduler: bool = False) -> None:
        self.logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        options = ("--concurrency", "64", "--python-allow", "tests.bench")
        self.procs = [
            CronstreamProcess(settings, self.logdir, "w", *options, command="worker"),
            CronstreamProcess(
                settings, self.logdir, "c", "--log-level", "INFO", command="flows-coordinator"
            ),
        ]
        if scheduler:
            self.procs.append(CronstreamProcess(settings, self.logdir, "s"))

    def wait_live(self) -> None:
        self.procs[0].wait_live(1, timeout=120, text="assigned")
        self.procs[1].wait_live(1, timeout=120, text="Ready")
        if len(self.procs) > 2:
            self.procs[2].wait_live(12, timeout=240)

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def _outcomes(settings: Settings) -> list[tuple[str, str, int]]:
    """(run id, status, record timestamp ms) of every history record."""
    return [
        (r.headers.get("run_id", ""), r.headers.get("status", ""), r.timestamp_ms)
        for r in read_topic(settings, Topics(settings).history)
    ]


def _wait_ended(settings: Settings, flow_runs: set[str], timeout: float) -> dict[str, int]:
    """The coordinator's end record time of each of ``flow_runs`` (a flow run's own run
    id is recorded by its start, STARTED then SUCCEEDED, and then by its end)."""
    deadline = time.monotonic() + timeout
    while True:
        seen: dict[str, list[int]] = {}
        for run_id, status, ts in _outcomes(settings):
            if run_id in flow_runs and status in ("SUCCEEDED", "FAILED"):
                seen.setdefault(run_id, []).append(ts)
        ended = {run_id: max(ts) for run_id, ts in seen.items() if len(ts) >= 2}
        if len(ended) == len(flow_runs):
            return ended
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(flow_runs) - len(ended)} flow runs never ended")
        time.sleep(1)


def hops(settings: Settings, runs: int, nodes: int = 10) -> list[tuple[int, int]]:
    """Per edge of ``runs`` runs of a chain: (upstream's success published -> downstream
    run request published, -> downstream started), ms. The upstream's success is its
    OUTCOME event on ``flows.events``: the worker publishes it with the attempt's other
    records, and the SUCCEEDED history record itself only at its next flush (it waits
    for the event to be acknowledged), so that record comes later than the next start."""
    put_flows(settings, chain("hop", nodes))
    stack = FlowStack(settings)
    try:
        stack.wait_live()
        flow_runs = []
        with JobClient(settings) as client:
            for k in range(runs):
                flow_runs.append(client.trigger("hop", idempotency_key=f"k{k}").run_id)
                _wait_ended(settings, {flow_runs[-1]}, 120)
    finally:
        stack.stop()
    topics = Topics(settings)
    done = {
        r.headers.get("run_id"): r.timestamp_ms
        for r in read_topic(settings, topics.flow_events)
        if r.headers.get("kind") == "OUTCOME"
    }
    asked = {
        r.headers.get("run_id"): r.timestamp_ms
        for r in read_topic(settings, topics.runs(Priority.NORMAL))
    }
    started = started_ms(settings)
    out = []
    for run in flow_runs:
        for i in range(nodes - 1):
            up, down = f"{run}/n{i}", f"{run}/n{i + 1}"
            out.append((asked[down] - done[up], started[down] - done[up]))
    return out


def big(settings: Settings, shape: str, n: int = 1000) -> float:
    """Seconds from the trigger of one ``n``-node flow to its end record."""
    put_flows(settings, wide("big", n) if shape == "wide" else chain("big", n))
    stack = FlowStack(settings)
    try:
        stack.wait_live()
        with JobClient(settings) as client:
            t0 = time.time()
            run_id = client.trigger("big", idempotency_key="k").run_id
        end = _wait_ended(settings, {run_id}, 900)[run_id]
    finally:
        stack.stop()
    return end / 1000 - t0


class Beside(NamedTuple):
    """One run of ``beside_scheduler``: flow runs ended per second; for each job run (ms)
    its emission minus its due time and its start minus its due time; CPU
    seconds per second of each process (worker, coordinator, scheduler, broker)."""

    flow_runs: float
    emits: list[int]
    starts: list[int]
    cpu: dict[str, float]


def beside_scheduler(settings: Settings, flows: int) -> Beside:
    """5,000 no-op jobs every second and ``flows`` 10-node chains every second, one
    scheduler (the default lookahead), one worker, one coordinator; measured over 20 s
    after a 10 s warm-up."""
    put_noop_jobs(settings, 5000, "j")
    put_flows(settings, *(chain(f"f{k}", 10, every="1s") for k in range(flows)))
    stack = FlowStack(settings, scheduler=True)
    broker = next(s for s in all_services(settings) if s.name == "kafka").pid() or 0
    pids = dict(
        zip(("worker", "coordinator", "scheduler"), (p.proc.pid for p in stack.procs), strict=True),
        broker=broker,
    )
    try:
        stack.wait_live()
        time.sleep(10)
        t0, used = int(time.time() * 1000), {role: cpu_s(pid) for role, pid in pids.items()}
        time.sleep(20)
        t1 = int(time.time() * 1000)
        used = {role: (cpu_s(pid) - used[role]) / ((t1 - t0) / 1000) for role, pid in pids.items()}
    finally:
        stack.stop()
    history = read_topic(settings, Topics(settings).history)
    ended = sum(
        1
        for r in history
        if r.headers.get("run_id", "").endswith("/n9")
        and r.headers.get("status") == "SUCCEEDED"
        and t0 <= r.timestamp_ms < t1
    )
    jobs = [run for run in read_runs(settings, history) if run.job_id.startswith("j-")]
    starts = [
        run.started_ms - run.due_ms
        for run in jobs
        if run.started_ms is not None and t0 <= run.due_ms < t1
    ]
    emits = [run.emitted_ms - run.due_ms for run in jobs if t0 <= run.slot_ms < t1]
    return Beside(ended / ((t1 - t0) / 1000), emits, starts, used)


def _beside_rows(base: Settings, rounds: int, demands: Sequence[int]) -> None:
    """Each flow demand (flows a second, 0 = none) once per round, the order reversed
    every other round; one row per demand."""
    got: dict[int, list[Beside]] = {d: [] for d in demands}
    for k in range(rounds):
        for flows in demands if k % 2 == 0 else demands[::-1]:
            with namespace(base) as settings:
                got[flows].append(beside_scheduler(settings, flows))
    for flows, runs in got.items():
        emits = [max(v, 0) for b in runs for v in b.emits]  # the scheduler's metric
        starts = [v for b in runs for v in b.starts]
        cpu = {role: statistics.median(b.cpu[role] for b in runs) for role in runs[0].cpu}
        rates = [round(b.flow_runs, 1) for b in runs]
        row(
            f"beside 5,000 fires/s, {flows} 10-node flows/s: flow runs/s | jobs' fire skew p99 "
            "| due -> STARTED p50 / p99 (ms)",
            f"{statistics.median(rates)} | {pct(emits, 0.99):.0f} | "
            f"{pct(starts, 0.5):.0f} / {pct(starts, 0.99):.0f}",
            "fire skew as with 0",
            f"flow runs/s {rates}; emission - due max {max(max(b.emits) for b in runs)} ms; "
            f"due -> STARTED p99 per run {[round(pct(b.starts, 0.99)) for b in runs]}; CPU s/s "
            + " ".join(f"{role} {v:.2f}" for role, v in cpu.items()),
        )


def bench_flows(base: Settings, runs: int, quick: bool = False) -> None:
    edges: list[tuple[int, int]] = []
    for _ in range(runs):
        with namespace(base) as settings:
            edges += hops(settings, 10 if quick else 30)
    lat, emit = [e[1] for e in edges], [e[0] for e in edges]
    row(
        "flow node succeeded -> next node STARTED p50 (ms)",
        f"{pct(lat, 0.5):.0f}",
        "-",
        f"{len(lat)} hops of a 10-node chain, {runs} run(s); of which the coordinator "
        f"(outcome event -> run request) p50 {pct(emit, 0.5):.0f}",
    )
    row(
        "flow node succeeded -> next node STARTED p99 (ms)",
        f"{pct(lat, 0.99):.0f}",
        "<= 200",
        f"max {max(lat)}; coordinator p99 {pct(emit, 0.99):.0f}",
    )
    for shape in ("wide", "deep"):
        took = []
        for _ in range(1 if quick else runs):
            with namespace(base) as settings:
                took.append(big(settings, shape, 200 if quick else 1000))
        size = 200 if quick else 1000
        row(
            f"{size}-node flow, {shape}: trigger to end (s)",
            f"{statistics.median(took):.1f}",
            "-",
            f"runs {[round(t, 1) for t in took]}",
        )
    _beside_rows(base, 1 if quick else runs, (0, 5, 10, 20))
