"""What a run costs by target type: the same pipeline (one scheduler, one
worker, 64 slots) with the targets users run, this code beside a baseline revision
(``BASELINE``, c4846ca: the revision an outside review measured) in each round.

- **python**: a no-op callable (``tests.bench.targets:noop``): what is left is the cost
  of scheduling, executing and recording a run.
- **http**: every run a POST to a local HTTP/1.1 server answering 200 at once, kept alive
  (``tests.bench.http_target``: a uvloop process of its own, its CPU counted as the
  target's). Beside it, the reference: aiohttp doing the same requests (headers, payload)
  against the same server just after the window, its CPU us per request.
- **kafka**: every run produces its payload to a topic of a tenant of its own (the
  realistic case: a tenant's job writes as the tenant, to its ``<tenant>.*`` topics);
  the reference: a bare confluent-kafka producer writing the same records as the tenant.
- **shell**: every run the command ``true`` (under the worker's reaper, a process of
  its own each run: its CPU, waited for by the worker, counted as the worker's).

Each kind at two demands. **Above capacity** (``FLOOD`` runs/s asked, more than one
worker on this machine carries): SUCCEEDED per second and CPU us per run of each
process (worker, scheduler, brokers, target): what a run costs per core. **At 2,000/s**
(http and kafka): due-to-start p50 / p99 of the runs started in the window (a run's
``started_at`` minus its slot plus its jitter: a worker that cannot keep up shows here)
and the CPU per run at that rate. Each measure a 15 s window after 10 s of warm-up.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from confluent_kafka.admin import NewTopic

from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.runtime.kafka.clients import kafka_admin, kafka_producer
from cronstream.runtime.settings import Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import JobDefinition, Target
from tests.bench.common import (
    NOOP_TARGET,
    checkout,
    cpu_s,
    every_second,
    header_due_ms,
    namespace,
    pct,
    put_jobs,
    row,
    started_ms,
)
from tests.bench.http_target import http_target, reference_http, reference_kafka
from tests.bench.profiles import can_spy, spy, top_functions
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

WARMUP_S, WINDOW_S = 10.0, 15.0
BASELINE = "c4846ca"


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        return None


@contextmanager
def http_server(handler: type[BaseHTTPRequestHandler] = _Ok) -> Iterator[str]:
    """A local HTTP/1.1 server (by default answering every POST with 200); yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    finally:
        server.shutdown()
        server.server_close()


Measured = tuple[float, list[int], dict[str, float]]  # runs/s, due-to-start ms, CPU us/run


def _measure(
    settings: Settings,
    demand: int,
    make: Callable[[int], JobDefinition],
    *worker_args: str,
    code: Path | None = None,
    target_pid: int | None = None,
    profile: Path | None = None,
    scheduler_args: tuple[str, ...] = (),
) -> Measured:
    """(SUCCEEDED per second, due-to-start ms of each run started in the window, CPU us
    per run of each process: scheduler, broker, worker and the target server's when
    ``target_pid``) with ``demand`` jobs a second made by ``make``; ``code``: a checkout
    of another revision to run; ``profile``: py-spy samples the worker into it."""
    put_jobs(settings, demand, make)
    target_cpu: list[float] = []
    pipeline = Pipeline(settings, 1, 64, *scheduler_args, worker_args=worker_args, code=code)

    def during() -> Callable[[], None]:
        if target_pid is not None:
            target_cpu.append(cpu_s(target_pid))
        sampler = spy(pipeline.workers[0].proc.pid, WINDOW_S, profile) if profile else None

        def end() -> None:
            if target_pid is not None:
                target_cpu.append(cpu_s(target_pid))
            if sampler is not None:
                sampler.wait(timeout=60)

        return end

    t0, t1, cpu = pipeline.measure(WARMUP_S, WINDOW_S, during=during)
    if len(target_cpu) == 2:
        cpu["target"] = target_cpu[1] - target_cpu[0]
    history = read_topic(settings, Topics(settings).history)
    started = started_ms(settings, history)
    done, late = 0, []
    for r in history:
        if r.headers.get("status") == "SUCCEEDED":
            done += t0 <= r.timestamp_ms < t1
            start = started.get(r.headers["run_id"], 0)
            if t0 <= start < t1:  # behind, the runs started late (not those due in it)
                late.append(start - header_due_ms(r.headers))
    per_run = {role: seconds / max(1, done) * 1e6 for role, seconds in cpu.items()}
    return done / ((t1 - t0) / 1000), late, per_run


def _http_round(
    base: Settings, demand: int, code: Path | None, profile: Path | None = None
) -> tuple[Measured, float | None]:
    """The http row of ``code`` (None: this checkout) and, against the same server just
    after, the reference client's CPU us per request."""
    with namespace(base) as settings, http_target() as (url, pid):
        measured = _measure(
            settings,
            demand,
            every_second("h", target=Target(type="http", url=url)),
            "--http-allow",
            "127.0.0.1/32",
            code=code,
            target_pid=pid,
            profile=profile,
        )
        return measured, reference_http(url)


def _kafka_round(
    base: Settings, demand: int, code: Path | None, profile: Path | None = None
) -> tuple[Measured, float | None]:
    """The kafka row of ``code``, then a bare producer writing the same records as the
    tenant: its CPU us per record."""
    with namespace(base) as settings, tenant_topic(settings) as (tenant, topic):
        make = every_second("k", target=Target(type="kafka", topic=topic), tenant=tenant)
        # the tenant's fire rate (1,000/s by default) above the demand: the worker measured
        rate = ("--tenant-fire-rate", f"{tenant}={4 * demand}")
        measured = _measure(settings, demand, make, code=code, profile=profile, scheduler_args=rate)
        producer = kafka_producer(settings.acting_as(f"tenant-{tenant}"))
        return measured, reference_kafka(producer, topic)


Round = Callable[[Settings, int, Path | None, Path | None], tuple[Measured, float | None]]


def _plain_round(
    target: Target, *worker_args: str
) -> Callable[[Settings, int, Path | None, Path | None], tuple[Measured, None]]:
    """A row of runs of ``target`` with no reference client (``worker_args``: what the
    worker needs to run it)."""

    def measure(
        base: Settings, demand: int, code: Path | None, profile: Path | None = None
    ) -> tuple[Measured, None]:
        with namespace(base) as settings:
            make = every_second(target.type[0], target=target)
            return _measure(settings, demand, make, *worker_args, code=code, profile=profile), None

    return measure


# Each kind's demand above what one worker carries here (a no-op run is ~4x cheaper).
FLOOD = {"python": 24_000, "http": 8_000, "kafka": 8_000, "shell": 8_000}
ROUNDS: dict[str, Round] = {
    "python": _plain_round(NOOP_TARGET),  # a no-op callable: nothing to compare with
    "http": _http_round,
    "kafka": _kafka_round,
    "shell": _plain_round(Target(type="shell", command="true"), "--shell-allow", "true"),
}
PACED = ("http", "kafka")  # measured at the paced demand too: do they keep up
LIMITS = {"http": "<= 150", "kafka": "<= 60"}


@dataclasses.dataclass
class _Results:
    """What the rounds measured: above capacity by kind and arm, at the paced demand by
    kind (this code), and the reference clients' CPU us a request by kind."""

    flooded: dict[str, dict[str, list[Measured]]] = dataclasses.field(
        default_factory=lambda: {kind: {} for kind in ROUNDS}
    )
    paced: dict[str, list[Measured]] = dataclasses.field(
        default_factory=lambda: {kind: [] for kind in PACED}
    )
    references: dict[str, list[float]] = dataclasses.field(
        default_factory=lambda: {kind: [] for kind in PACED}
    )

    def round(self, base: Settings, demand: int, arms: Sequence[tuple[str, Path | None]]) -> None:
        for kind, measure in ROUNDS.items():
            for arm, code in arms:
                measured, reference = measure(base, FLOOD[kind], code, None)
                self.flooded[kind].setdefault(arm, []).append(measured)
                self._reference(kind, reference)
            if kind in PACED:
                measured, reference = measure(base, demand, None, None)
                self.paced[kind].append(measured)
                self._reference(kind, reference)

    def _reference(self, kind: str, reference: float | None) -> None:
        if reference is not None:
            self.references[kind].append(reference)


def bench_target_rows(base: Settings, runs: int, demand: int) -> None:
    """Each kind above capacity (``FLOOD``), this code then BASELINE in each of ``runs``
    rounds; http and kafka at ``demand`` runs a second too (this code); the reference
    clients' cost after each http and kafka window."""
    results = _Results()
    with checkout(BASELINE) as baseline:
        arms = [("this", None)] + ([(BASELINE, baseline)] if baseline is not None else [])
        for _ in range(runs):
            results.round(base, demand, arms)
    profiles = _profiles(base)
    if baseline is None:
        row(f"baseline {BASELINE}", "-", "-", "not in this clone's history: not measured")
    for kind, arms_measured in results.flooded.items():
        _report(kind, arms_measured, results.references.get(kind, []))
        if kind in results.paced:
            _report_paced(kind, demand, results.paced[kind])
    for kind, top in profiles.items():
        print(f"\nworker on {kind} runs above capacity: own time by function (py-spy)")
        for share, name in top:
            print(f"  {share:5.1f} %  {name}")


def _profiles(base: Settings) -> dict[str, list[tuple[float, str]]]:
    """A round of this code per target above capacity, not counted (sampling takes CPU
    from the others), with py-spy on the worker: its 20 functions with the most own
    time."""
    if not can_spy():
        return {}
    where = Path(tempfile.mkdtemp(prefix="csbench-profile-"))
    tops = {}
    for kind in PACED:
        ROUNDS[kind](base, FLOOD[kind], None, where / f"{kind}-worker.txt")
        if (where / f"{kind}-worker.txt").exists():
            tops[kind] = top_functions(where / f"{kind}-worker.txt", 20)
    return tops


def _report(kind: str, arms: dict[str, list[Measured]], reference: list[float]) -> None:
    """The rows of ``kind`` above capacity: runs/s, the worker's CPU us a run and every
    process's by arm, the reference's."""

    def median_of(arm: str, role: str) -> float:
        return statistics.median(m[2].get(role, 0.0) for m in arms[arm])

    flood = FLOOD[kind]
    rates = {arm: [round(m[0]) for m in measured] for arm, measured in arms.items()}
    row(
        f"{kind} target: runs/s at {flood:,}/s asked (above capacity), 1 worker",
        f"{statistics.median(m[0] for m in arms['this']):,.0f}",
        "report" if kind != "python" else ">= 20,000",
        "; ".join(f"{arm} {values}" for arm, values in rates.items()),
    )
    roles = ("workers", "scheduler", "broker") + (("target",) if kind == "http" else ())
    per_role = "; ".join(
        f"{arm}: " + ", ".join(f"{role} {median_of(arm, role):.0f}" for role in roles)
        for arm in arms
    )
    worker = median_of("this", "workers")
    ref = f"; reference client {statistics.median(reference):.0f} us" if reference else ""
    row(
        f"{kind} target: worker CPU us per run, above capacity",
        f"{worker:.0f}",
        LIMITS.get(kind, "report"),
        f"CPU us/run by process, {per_role}{ref}",
    )
    if kind == "http":
        row(
            "http target: worker CPU per run / reference client CPU per request",
            f"{worker / statistics.median(reference):.2f}",
            "<= 2",
            f"reference: aiohttp, 64 in flight, rounds {[round(r) for r in reference]} us",
        )


def _report_paced(kind: str, demand: int, measured: list[Measured]) -> None:
    """The row of ``kind`` at ``demand``: does one worker keep up (due-to-start), and at
    what CPU a run."""
    p50s = [pct(late, 0.5) for _, late, _ in measured]
    p99s = [pct(late, 0.99) for _, late, _ in measured]
    worker = [round(m[2].get("workers", 0.0)) for m in measured]
    row(
        f"{kind} target: due-to-start p50 / p99 at {demand:,}/s asked (ms)",
        f"{statistics.median(p50s):.0f} / {statistics.median(p99s):.0f}",
        "p99 <= 50",
        f"runs/s {[round(m[0]) for m in measured]}; p99 of each round {p99s}; "
        f"worker CPU us a run at this rate {worker}",
    )


@contextmanager
def tenant_topic(
    settings: Settings, prefix: str = "bench", replication: int = 1
) -> Iterator[tuple[str, str]]:
    """A tenant of ``settings``' namespace and a topic of its own (3 partitions at
    ``replication``, 1 unless told), removed after."""
    tenant = f"{prefix}{uuid.uuid4().hex[:6]}"
    add_tenant(settings, tenant)
    topic = f"{tenant}.orders"
    admin = kafka_admin(settings, superuser=True)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=replication)]
    ).values():
        future.result(30)
    try:
        yield tenant, topic
    finally:
        for future in admin.delete_topics([topic], operation_timeout=60).values():
            future.result()
        remove_tenant(settings, tenant)
