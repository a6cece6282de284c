"""Beyond the no-op (issue 35): the same pipeline (one scheduler, one worker) with the
targets users run, at a demand the box carries.

- **http**: every run a POST to a local HTTP/1.1 server answering 200 at once (keep-alive:
  the worker's pooled client reuses its connections). The server is a thread of this
  process, its CPU counted as the target's.
- **kafka**: every run produces its payload to a topic of a tenant of its own (the
  realistic case: a tenant's job writes as the tenant, to its ``<tenant>.*`` topics).

Per target: SUCCEEDED per second over a 15 s window after 10 s of warm-up, due-to-start
p50 / p99 of the runs started in the window (a run's ``started_at`` minus its slot plus
its jitter: a worker that cannot keep up shows here), the worker's CPU per run.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from confluent_kafka.admin import NewTopic

from infra.tenants import add_tenant, remove_tenant
from runtime.kafka.clients import kafka_admin
from runtime.settings import Settings
from schemas.catalog import Topics
from schemas.events import JobDefinition, Target
from schemas.tenancy import qualify
from tests.bench.common import header_due_ms, job, namespace, pct, put_jobs, row, started_ms
from tests.bench.workers import Pipeline
from tests.integration.helpers import read_topic

WARMUP_S, WINDOW_S = 10.0, 15.0


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


def _measure(
    settings: Settings, demand: int, make: Callable[[int], JobDefinition], *worker_args: str
) -> tuple[float, list[int], float]:
    """(SUCCEEDED per second, due-to-start ms of each run started in the window, the
    worker's CPU us per run) with ``demand`` jobs a second made by ``make``."""
    put_jobs(settings, demand, make)
    t0, t1, cpu = Pipeline(settings, 1, 64, worker_args=worker_args).measure(WARMUP_S, WINDOW_S)
    used = cpu["workers"]
    history = read_topic(settings, Topics(settings).history)
    started = started_ms(settings, history)
    done, late = 0, []
    for r in history:
        if r.headers.get("status") == "SUCCEEDED":
            done += t0 <= r.timestamp_ms < t1
            start = started.get(r.headers["run_id"], 0)
            if t0 <= start < t1:  # behind, the runs started late (not those due in it)
                late.append(start - header_due_ms(r.headers))
    return done / ((t1 - t0) / 1000), late, used / max(1, done) * 1e6


def bench_target_rows(base: Settings, runs: int, demand: int) -> None:
    """The http and kafka rows, ``runs`` rounds each at ``demand`` runs a second."""
    results: dict[str, list[tuple[float, list[int], float]]] = {"http": [], "kafka": []}
    for _ in range(runs):
        with namespace(base) as settings, http_server() as url:
            hook = Target(type="http", url=url)

            def web(i: int, hook: Target = hook) -> JobDefinition:
                return job(f"h-{i}", every_ms=1000, jitter_ms=999, target=hook)

            results["http"].append(_measure(settings, demand, web, "--http-allow", "127.0.0.1/32"))
        with namespace(base) as settings, _tenant_topic(settings) as (tenant, topic):
            target = Target(type="kafka", topic=topic)

            def make(i: int, tenant: str = tenant, target: Target = target) -> JobDefinition:
                definition = job(
                    qualify(tenant, f"k-{i}"), every_ms=1000, jitter_ms=999, target=target
                )
                return dataclasses.replace(definition, tenant=tenant)

            results["kafka"].append(_measure(settings, demand, make))
    for kind, measured in results.items():
        rates = [r for r, _, _ in measured]
        p50s = [pct(late, 0.5) for _, late, _ in measured if late]
        p99s = [pct(late, 0.99) for _, late, _ in measured if late]
        cpu = statistics.median(c for _, _, c in measured)
        row(f"{kind} target: runs/s at {demand:,}/s demanded, 1 worker",
            f"{statistics.median(rates):,.0f}", f"{demand:,}",
            f"runs {[round(r) for r in rates]}; worker CPU us/run {cpu:.0f}")  # fmt: skip
        row(f"{kind} target: due-to-start p50 / p99 at {demand:,}/s (ms)",
            f"{statistics.median(p50s):.0f} / {statistics.median(p99s):.0f}", "p99 <= 100",
            f"p99 of each run {p99s}")  # fmt: skip


@contextmanager
def _tenant_topic(settings: Settings) -> Iterator[tuple[str, str]]:
    """A tenant of ``settings``' namespace and a topic of its own, removed after."""
    tenant = f"bench{uuid.uuid4().hex[:6]}"
    add_tenant(settings, tenant)
    topic = f"{tenant}.orders"
    admin = kafka_admin(settings, superuser=True)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1)]
    ).values():
        future.result(30)
    try:
        yield tenant, topic
    finally:
        for future in admin.delete_topics([topic], operation_timeout=60).values():
            future.result()
        remove_tenant(settings, tenant)
