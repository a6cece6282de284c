"""Run the CLI and kcat the way a user would, inside a test's namespace."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import httpx
from confluent_kafka import TopicPartition

from cronstream.infra.security import write_private
from cronstream.runtime.kafka.clients import kafka_consumer
from cronstream.runtime.kafka.offsets import group_lag, watermarks
from cronstream.runtime.kafka.security import client_properties
from cronstream.runtime.settings import Settings
from cronstream.schemas.tenancy import AnyEvent
from tests.conftest import cli_env

E = TypeVar("E", bound=AnyEvent)
T = TypeVar("T")


def cronstream(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cronstream.cli", *args],
        env={**cli_env(settings), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_http_up(
    url: str,
    timeout: float = 120,
    log: Callable[[], str] = str,
    *,
    path: str = "/healthz",
    alive: Callable[[], bool] = lambda: True,
    every: float = 0.5,
) -> None:
    """Return once ``url`` + ``path`` answers 200; AssertionError (with ``log()``, e.g.
    the server's log) after ``timeout``, or at once when ``alive()`` says it died."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert alive(), f"{url} died: {log()}"
        assert time.monotonic() < deadline, f"{url}{path} never answered 200: {log()}"
        time.sleep(every)


def eventually(
    read: Callable[[], T], check: Callable[[T], bool], what: str, timeout: float = 120
) -> T:
    """What ``read()`` answers once ``check`` accepts it; AssertionError naming ``what``
    and the last answer after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if check(value):
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}; last: {value!r}"
        time.sleep(0.5)


def plaintext_listener(settings: Settings) -> Settings:
    """``settings`` as an anonymous client of the broker's plaintext listener (only
    ``bench-plain.`` topics are open to it)."""
    return replace(
        settings,
        kafka_security="plaintext",
        bootstrap_servers=f"127.0.0.1:{settings.kafka_plaintext_port}",
    )


def kcat(settings: Settings, topic: str, fmt: str) -> list[str]:
    """Every record of ``topic`` from the beginning, formatted by kcat (-Z: NULL shown)."""
    exe = shutil.which("kcat")
    assert exe, "kcat is not installed: 'make deps' installs it (Debian package kcat)"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kcat.properties"
        write_private(config, client_properties(settings).encode())
        out = subprocess.run(
            [
                exe,
                "-F",
                str(config),
                "-C",
                "-t",
                topic,
                "-o",
                "beginning",
                "-e",
                "-q",
                "-Z",
                "-f",
                fmt,
            ],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=True,
        )
    return [line for line in out.stdout.split("\n") if line]


def record_count(settings: Settings, topic: str) -> int:
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        total = 0
        for p in meta.partitions:
            low, high = watermarks(consumer, TopicPartition(topic, p))
            total += high - low
        return total
    finally:
        consumer.close()


def group_caught_up(settings: Settings, group: str, topic: str) -> bool:
    """``group`` has committed every record of ``topic`` written so far."""
    consumer = kafka_consumer(settings, **{"group.id": group})
    try:
        ends = [
            TopicPartition(topic, p, watermarks(consumer, TopicPartition(topic, p))[1])
            for p in range(settings.partitions)
        ]
        return group_lag(consumer, ends) == 0
    finally:
        consumer.close()


class Record(NamedTuple):
    headers: dict[str, str]
    value: bytes | None
    timestamp_ms: int
    key: bytes | None = None
    partition: int = 0


def decoded(settings: Settings, topic: str, event_type: type[E]) -> list[E]:
    """Every record of ``topic`` decoded as ``event_type`` (through the registry)."""
    from cronstream.runtime.registry import registry_client
    from cronstream.schemas.serde import Codec

    with registry_client(settings, writer=True) as registry:
        codec = Codec(registry)
        return [codec.decode(r.value, event_type) for r in read_topic(settings, topic)]


def read_topic(settings: Settings, topic: str) -> list[Record]:
    """Every record of ``topic`` (text headers, value, timestamp, key, partition),
    partition by partition.

    A consumer that stops fetching a partition (seen once: librdkafka returned nothing
    for minutes after the assignment moved on from the previous partition) is replaced;
    after three stalls the read fails instead of hanging."""
    from cronstream.schemas.events import text_headers

    out: list[Record] = []
    consumer = kafka_consumer(settings)
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        for p in sorted(meta.partitions):
            low, high = watermarks(consumer, TopicPartition(topic, p))
            seen, stalls, progress_at = low, 0, time.monotonic()
            if high > low:
                consumer.assign([TopicPartition(topic, p, low)])
            while seen < high:
                for msg in consumer.consume(num_messages=10_000, timeout=1):
                    if msg.error():
                        continue
                    out.append(
                        Record(
                            text_headers(msg.headers()),
                            msg.value(),
                            msg.timestamp()[1],
                            msg.key(),
                            p,
                        )
                    )
                    seen, progress_at = (msg.offset() or 0) + 1, time.monotonic()
                if seen < high and time.monotonic() - progress_at > 20:
                    stalls += 1
                    if stalls == 3:
                        raise TimeoutError(f"{topic}[{p}]: stuck at offset {seen} of {high}")
                    consumer.close()
                    consumer = kafka_consumer(settings)
                    consumer.assign([TopicPartition(topic, p, seen)])
                    progress_at = time.monotonic()
        return out
    finally:
        consumer.close()


class CronstreamProcess:
    """A long-running `cronstream <command>` subprocess in a test's namespace, logging
    to a file (a scheduler or a worker)."""

    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        name: str,
        *args: str,
        command: str = "scheduler",
        env: dict[str, str] | None = None,
        code: Path | None = None,
    ) -> None:
        """``code``: a checkout of another version to run (the benchmarks' baseline),
        else this one."""
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("w")
        extra = ["--session-timeout", "6s"] if command == "scheduler" else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cronstream.cli", command, "--name", name, *extra, *args],
            env={**cli_env(settings), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=code,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_live(self, partitions: int = 1, timeout: float = 60, text: str = " live: ") -> None:
        """Until the log shows ``text`` ``partitions`` times (a worker: "assigned")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log().count(text) >= partitions:
                return
            assert self.proc.poll() is None, f"{self.name} died:\n{self.log()[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"{self.name} never went live:\n{self.log()[-3000:]}")

    def cleanup(self) -> None:
        """Test teardown: kill whatever still runs and close the log."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            if not terminate(self.proc, 60):
                raise AssertionError(f"{self.name} ignored SIGTERM:\n{self.log()[-3000:]}")
            code = self.proc.returncode
            assert code == 0, f"{self.name} exited {code}:\n{self.log()[-3000:]}"
        self._log.close()


class Target:
    """An HTTP server on 127.0.0.1 that records (time, path, Idempotency-Key); a path
    under /slow answers after ``slow_s`` seconds, /fail with a 500."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, str, str]] = []
        self.slow_s = 1.0
        lock = threading.Lock()
        calls = self.calls
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                with lock:
                    calls.append((time.time(), self.path, self.headers["Idempotency-Key"]))
                if self.path.startswith("/slow"):
                    time.sleep(owner.slow_s)
                status = 500 if self.path.startswith("/fail") else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keys(self, path: str) -> Counter[str]:
        return Counter(key for _, p, key in self.calls if p.startswith(path))


class Outage:
    """A TCP forwarder to ``host:port`` that can go down and come back on the same port:
    a service outage as one process sees it (connections refused, open ones cut),
    while the rest of the test session keeps the real service."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server: socket.socket | None = None
        self.port = 0
        self.up()

    def up(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with suppress(OSError):  # wakes the accept() blocked on it
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # closed: down()
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


OWNED = re.compile(r"\b(assigned|revoked|partitions lost:) (.*)$", re.MULTILINE)


def owned(proc: CronstreamProcess) -> set[tuple[str, int]]:
    """The partitions a group member owns now, as its log tells (assigned minus revoked)."""
    have: set[tuple[str, int]] = set()
    for verb, names in OWNED.findall(proc.log()):
        parts = {(t, int(p)) for t, p in (n.rsplit("/", 1) for n in names.split(", "))}
        have = have | parts if verb == "assigned" else have - parts
    return have


def wait_shares(members: list[CronstreamProcess], topic: str, each: int, timeout: float) -> float:
    """Seconds until every member owns ``each`` partitions of ``topic``."""
    began = time.monotonic()
    while True:
        shares = [len({tp for tp in owned(m) if tp[0] == topic}) for m in members]
        if shares == [each] * len(members):
            return time.monotonic() - began
        if time.monotonic() - began > timeout:
            raise AssertionError(f"{topic} shares never became {each} each: {shares}")
        time.sleep(0.2)


@contextmanager
def history_keyspace(settings: Settings, prefix: str = "cstest") -> Iterator[Settings]:
    """``settings`` with a fresh, migrated Cassandra keyspace (dropped afterwards)."""
    import uuid

    from cronstream.infra.bootstrap import ensure_keyspace
    from cronstream.infra.cassandra_access import admin_session

    scoped = settings.with_namespace(
        topic_prefix=settings.topic_prefix, keyspace=f"{prefix}_{uuid.uuid4().hex[:10]}"
    )
    ensure_keyspace(scoped)  # migrated, cronstream's user granted (as the super user)
    cluster, session = admin_session(scoped)
    try:
        yield scoped
        session.execute(f"DROP KEYSPACE IF EXISTS {scoped.keyspace}", timeout=120)
    finally:
        cluster.shutdown()


def terminate(proc: subprocess.Popen[Any], timeout: float) -> bool:
    """SIGTERM to ``proc`` and up to ``timeout`` s for it to end; killed (and reaped)
    when it did not. Whether it ended of itself (at once when it had already)."""
    if proc.poll() is not None:
        return True
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False
    return True


def kill_children() -> None:
    """SIGKILL every process whose parent is this one (``make bench`` and ``make chaos``
    interrupted: what they started must not go on firing into their topics)."""
    me = str(os.getpid())
    for status in Path("/proc").glob("[0-9]*/status"):
        with suppress(OSError, ValueError):
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            if fields.get("PPid", "").strip() == me:
                os.kill(int(status.parent.name), signal.SIGKILL)


def ui_process(
    settings: Settings,
    procs: list[CronstreamProcess],
    tmp_path: Path,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> str:
    """A `cronstream ui` process of ``settings`` on a free port, up: its URL."""
    port = free_port()
    ui = CronstreamProcess(settings, tmp_path, "ui", "--port", str(port), command="ui", env=env)
    procs.append(ui)
    url = f"http://127.0.0.1:{port}"
    wait_http_up(url, timeout, ui.log, path="/readyz", alive=lambda: ui.proc.poll() is None)
    return url


def put_ui_job(url: str, token: str, hook: str = "https://example.com/report") -> None:
    """A tenant's job ``report`` (to ``hook``) put through the dashboard's API with
    ``token``."""
    spec = {"cron": "0 3 * * *", "target": "http", "url": hook}
    headers = {"Authorization": f"Bearer {token}"}
    put = httpx.put(f"{url}/v1/jobs/report", json=spec, timeout=60, headers=headers)
    assert put.status_code == 200, put.text


@contextmanager
def signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    """A browser-like client with a dashboard session (the cookie the sign-in set)."""
    with httpx.Client(base_url=url, timeout=60) as client:
        reply = client.post("/ui/login", data={"token": token})
        assert (reply.status_code, reply.headers["location"]) == (303, "/ui?done=signed+in")
        assert token not in reply.headers["set-cookie"]
        yield client
