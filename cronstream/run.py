"""`make run`: the whole local pipeline in the foreground.

The stack is already up and bootstrapped (the Makefile's `up` target ran first). This
applies ``examples/jobs.yaml``, serves the example HTTP target those jobs call, starts
one scheduler, one worker, one history sink, one admission (tenants' commands; the
Makefile onboards the tenant ``demo`` first), the HTTP API, the flows coordinator
(``examples/flows.yaml`` applied too), the archiver, the dependency processor and the
trigger processor (event triggers), and prints their logs combined (each line prefixed
with its process) under a live status line: fires/s, runs/s, failures, and the workers'
and sink's lag. Logs are also appended to ``.stack/logs/<name>.log``. Ctrl-C stops every
process (each finishes its own clean handover); `make down` stops the services.

Environment: ``r.RUN_EXAMPLES`` 0 skips applying the examples; ``r.EXAMPLE_TARGET_PORT``
moves the example target (default 8787); docs/configuration.md.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from cronstream.monitoring import (
    metrics_ports,
    publish_targets,
    serve_alert_receiver,
    serve_posts,
    withdraw_targets,
)
from cronstream.runtime.health import cassandra_health, kafka_health, registry_health
from cronstream.runtime.kafka.clients import OFFSET_END, TopicPartition, kafka_consumer
from cronstream.runtime.kafka.offsets import group_lag
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import REPO_ROOT, Settings
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority, text_headers

FAILURES = frozenset({"FAILED", "TIMED_OUT", "DEAD_LETTERED"})
STARTED = (
    "scheduler, worker, sink, archiver, admission, api, the flows coordinator, the\n"
    "dependency processor and the trigger processor started.\n"
    "Dashboard: http://127.0.0.1:8780/ui (sign in with a token from .stack/data/security/\n"
    "  credentials/: api-token-admin.secret sees everything). In another terminal try:\n"
    "  .venv/bin/cronstream jobs list\n"
    "  .venv/bin/cronstream history hello-python --since 5m\n"
    "  .venv/bin/cronstream history --status failed,dead_lettered --since 1h --all-tenants\n"
    "  .venv/bin/cronstream runs trigger hello-webhook --idempotency-key first\n"
    "  .venv/bin/cronstream flows trigger example-etl --idempotency-key first\n"
    "  .venv/bin/cronstream tenant --tenant demo put examples/tenant-jobs.yaml\n"
    '  curl -H "Authorization: Bearer $(cat .stack/data/security/credentials/'
    'api-token-demo.secret)" http://127.0.0.1:8780/v1/jobs\n'
    "Monitoring: Prometheus https://127.0.0.1:9190 (alerts: /alerts), Alertmanager\n"
    "  https://127.0.0.1:9193, as user operator with the password in credentials/\n"
    "  prometheus-operator.secret / alertmanager-operator.secret (CA: .stack/data/\n"
    "  security/tls/ca.pem); each process answers /metrics, /healthz, /readyz\n"
    "Warehouse: Kafka Connect http://127.0.0.1:8083/connectors (operator, credentials/\n"
    "  connect-operator.secret) writes history into PostgreSQL 127.0.0.1:5442,\n"
    "  database warehouse, table cronstream_history\n"
    "Ctrl-C stops every process; `make down` stops the services."
)
STATUS_EVERY_S = 2.0


class Console:
    """Log lines scroll above one status line (redrawn in place on a terminal; printed
    as an ordinary line every 10 s otherwise)."""

    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self.tty = out.isatty()
        self.lock = threading.Lock()
        self.status = ""
        self._last_plain = 0.0

    def line(self, text: str) -> None:
        with self.lock:
            if self.tty:
                self.out.write(f"\r\033[K{text}\n{self.status}")
            else:
                self.out.write(text + "\n")
            self.out.flush()

    def set_status(self, text: str) -> None:
        with self.lock:
            self.status = text
            if self.tty:
                self.out.write(f"\r\033[K\033[1m{text}\033[0m")
            elif time.monotonic() - self._last_plain >= 10:
                self._last_plain = time.monotonic()
                self.out.write(f"[status] {text}\n")
            self.out.flush()


def serve_example_target(console: Console, port: int) -> ThreadingHTTPServer:
    """The HTTP endpoint the example http jobs call: logs each call and answers 200."""

    def handle(path: str, headers: Any, _body: bytes) -> None:
        key = headers.get("Idempotency-Key", "-")
        console.line(f"{'target':<9}| POST {path} Idempotency-Key={key}")

    return serve_posts(port, handle)


def apply_examples(settings: Settings, console: Console) -> None:
    from cronstream.producers.client import JobClient
    from cronstream.producers.flows import load_flows_file
    from cronstream.producers.spec import load_jobs_file
    from cronstream.runtime.kafka.publisher import Publisher

    path = REPO_ROOT / "examples" / "jobs.yaml"
    jobs = load_jobs_file(path, max_payload_bytes=settings.max_payload_bytes)
    flows_path = REPO_ROOT / "examples" / "flows.yaml"
    flows = load_flows_file(flows_path, max_payload_bytes=settings.max_payload_bytes)
    with JobClient(settings, publisher=Publisher(settings, answering=True, log_level=3)) as client:
        client.put_many(jobs)
        for flow, schedule in flows:
            client.put_flow(flow, schedule)
    console.line(
        f"applied {len(jobs)} example jobs from {path.relative_to(REPO_ROOT)}: "
        + ", ".join(j.job_id for j in jobs)
    )
    console.line(
        f"applied {len(flows)} example flows from "
        f"{flows_path.relative_to(REPO_ROOT)}: " + ", ".join(f.flow_id for f, _ in flows)
    )


def start(name: str, args: list[str], logs: Path, console: Console) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "cronstream.cli", *args, "--name", f"make-run-{name}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )

    def pump() -> None:
        assert proc.stdout is not None
        with (logs / f"{name}.log").open("a") as log:
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                console.line(f"{name:<9}| {raw.rstrip()}")
        console.line(f"{name:<9}| exited with {proc.wait()}")

    threading.Thread(target=pump, daemon=True).start()
    return proc


class Pulse:
    """Counts for the status line: run requests fired (end offsets of the execution
    topics), outcomes by status (read from history's end), and the lag of the workers'
    and the sink's groups (end offsets minus committed offsets)."""

    def __init__(self, settings: Settings) -> None:
        self.topics = Topics(settings)
        self.runs = [self.topics.runs(p) for p in Priority]
        self.reader = kafka_consumer(settings)
        meta = self.reader.list_topics(timeout=10).topics
        self.partitions = {t: sorted(meta[t].partitions) for t in [*self.runs, self.topics.history]}
        self.reader.assign(
            [
                TopicPartition(self.topics.history, p, OFFSET_END)
                for p in self.partitions[self.topics.history]
            ]
        )
        prefix = settings.topic_prefix
        self.groups = {
            name: kafka_consumer(settings, **{"group.id": group})
            for name, group in (("workers", f"{prefix}.workers"), ("sink", f"{prefix}.sink"))
        }
        self.statuses: Counter[str] = Counter()
        self.last_fired: int | None = None
        self.last_done = 0
        self.last_at = time.monotonic()

    def _ends(self, topics: list[str]) -> list[TopicPartition]:
        out = []
        for topic in topics:
            for p in self.partitions[topic]:
                _, high = self.reader.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
                out.append(TopicPartition(topic, p, high))
        return out

    def read(self) -> None:
        for msg in self.reader.consume(num_messages=10_000, timeout=0.2):
            if msg.error() is None:
                status = text_headers(msg.headers()).get("status")
                if status:
                    self.statuses[status] += 1

    def line(self) -> str:
        now = time.monotonic()
        elapsed, self.last_at = max(now - self.last_at, 1e-3), now
        run_ends = self._ends(self.runs)
        fired = sum(tp.offset for tp in run_ends)
        done = self.statuses["SUCCEEDED"]
        fires = 0.0 if self.last_fired is None else (fired - self.last_fired) / elapsed
        rate = (done - self.last_done) / elapsed
        self.last_fired, self.last_done = fired, done
        failures = sum(self.statuses[s] for s in FAILURES)
        lag_w = group_lag(self.groups["workers"], run_ends)
        lag_s = group_lag(self.groups["sink"], self._ends([self.topics.history]))
        return (
            f"fires/s {fires:7.1f} | runs/s {rate:7.1f} | succeeded {done} | "
            f"failures {failures} | lag: workers {lag_w}, sink {lag_s}"
        )

    def close(self) -> None:
        self.reader.close()
        for group in self.groups.values():
            group.close()


def start_roles(
    settings: Settings, console: Console, target_port: int
) -> dict[str, subprocess.Popen[str]]:
    """Every role's process, each scraped on its metrics port (the targets file says
    where, for the stack's Prometheus). The tenant ``demo`` is granted exactly the
    example target (host and port) for its http jobs; the admission and the worker are
    given the same grant (``schemas.policy``)."""
    logs = settings.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    ports = metrics_ports()
    publish_targets(settings, ports)

    def scraped(role: str, *args: str) -> list[str]:
        """The command of ``role`` (``schemas.catalog.ROLES``: the `cronstream` command is
        the role's name), ``args``, its metrics port."""
        return [role, *args, "--metrics-port", str(ports[role])]

    # two tiers: every job in a store on disk, in memory only what is due soon
    state = ("--state-dir", str(settings.home / "data" / "scheduler"))
    grant = ("--grant", f"demo:http=127.0.0.1:{target_port}")

    return {
        "scheduler": start("scheduler", scraped("scheduler", *state), logs, console),
        "worker": start(
            "worker", scraped("worker", "--http-allow", "127.0.0.1/32", *grant), logs, console
        ),
        "sink": start("sink", scraped("sink"), logs, console),
        "admission": start("admission", scraped("admission", *grant), logs, console),
        # the dashboard at /ui, the HTTP API beside it (one process: `cronstream ui`)
        "api": start("api", ["ui"], logs, console),
        "flows-coordinator": start(
            "flows-coordinator", scraped("flows-coordinator"), logs, console
        ),
        "archiver": start("archiver", scraped("archiver"), logs, console),
        # jobs with after: run once the jobs they name succeeded for a date
        "dependencies": start("dependencies", scraped("dependencies"), logs, console),
        # jobs run on the records of a topic (docs/event-triggers.md)
        "triggers": start("triggers", scraped("triggers"), logs, console),
    }


def main() -> int:
    settings = Settings.from_env()
    console = Console(sys.stdout)
    console.line("cronstream local pipeline")
    for name, health, where in (
        ("kafka", kafka_health(settings), settings.bootstrap_servers),
        ("schema registry", registry_health(settings.registry_url), settings.registry_url),
        (
            "cassandra",
            cassandra_health(settings),
            f"{settings.cassandra_hosts[0]}:{settings.cassandra_port}",
        ),
    ):
        console.line(f"  {'ok  ' if health.ok else 'DOWN'} {name:<16} {where:<42} {health.detail}")
    port: int = r.EXAMPLE_TARGET_PORT.get()
    target = serve_example_target(console, port)
    if r.RUN_EXAMPLES.get():
        apply_examples(settings, console)
    alerts = serve_alert_receiver(
        lambda text: console.line(f"{'alert':<9}| {text}"),
        r.ALERT_RECEIVER_PORT.get(),
    )
    children = start_roles(settings, console, port)
    console.line(STARTED)
    # Ctrl-C reaches the whole foreground process group: the children stop themselves;
    # this process notes it, stops waiting, and makes sure they are gone.
    stopping: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: stopping.append(signum))
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    pulse = Pulse(settings)
    next_status = time.monotonic()
    try:
        while not stopping and all(proc.poll() is None for proc in children.values()):
            pulse.read()
            if time.monotonic() >= next_status:
                next_status += STATUS_EVERY_S
                console.set_status(pulse.line())
        if stopping:
            console.line("stopping (each process commits and leaves its group)...")
            return 0
        console.line("a process exited; stopping the others (see its lines above)")
        return 1
    finally:
        _stop(children.values())
        pulse.close()
        target.shutdown()
        alerts.shutdown()
        withdraw_targets(settings)  # stopped processes must not page (CronstreamProcessDown)
        console.line("stopped")


def _stop(children: Any) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 45
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


if __name__ == "__main__":
    sys.exit(main())
