"""`cronstream api` under 200 concurrent requests: jobs put (through the real
admission) and history queries, latency p50/p99. One admission and one API process."""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from cronstream.infra.tenants import add_tenant, remove_tenant
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import token_path
from tests.bench.common import namespace, pct, row
from tests.integration.helpers import CronstreamProcess, free_port, wait_http_up

SPEC = {"every": "1h", "target": "http", "url": "https://example.com/hook"}


class _Connection:
    """One keep-alive HTTP/1.1 connection on asyncio streams. The load generator shares
    the box's 2 cores with the API: httpx's AsyncClient spent 11 ms of CPU per request
    with 200 connections in its pool (2 ms with 20), so it measured itself; this costs
    a fraction of a millisecond."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\nHost: {host}:{port}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"{method} {path} HTTP/1.1\r\n{self.auth}Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        status = int(status_line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _load(url: str, token: str, concurrency: int, total: int, kind: str) -> list[float]:
    latencies: list[float] = []
    address = urlsplit(url)
    body = json.dumps(SPEC).encode()

    async def one(worker: int) -> None:
        connection = _Connection(address.hostname or "", address.port or 80, token)
        try:
            for i in range(worker, total, concurrency):
                started = time.perf_counter()
                if kind == "put":
                    status, text = await connection.request("PUT", f"/v1/jobs/j{i}", body)
                else:
                    status, text = await connection.request(
                        "GET", f"/v1/jobs/j{i % 100}/history?since=1h"
                    )
                if status != 200:
                    raise RuntimeError(f"{kind} j{i}: {status} {text[:300]!r}")
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            connection.close()

    await asyncio.gather(*(one(w) for w in range(concurrency)))
    return latencies


def one_round(
    base: Settings, concurrency: int, total: int
) -> dict[str, tuple[float, float, float]]:
    """Per kind of request: latency p50, p99 (ms) and requests per second."""
    with namespace(base) as settings:
        tenant = f"bench{uuid.uuid4().hex[:6]}"
        add_tenant(settings, tenant)
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        port = free_port()
        procs = [
            CronstreamProcess(
                settings, logdir, "admission", "--max-jobs", str(total * 2), command="admission"
            ),
            CronstreamProcess(settings, logdir, "api", "--port", str(port), command="api"),
        ]
        url = f"http://127.0.0.1:{port}"
        try:
            procs[0].wait_live(1, timeout=120, text="jobs topic read")
            wait_http_up(url)
            token = token_path(settings, tenant).read_text().strip()
            out = {}
            for kind in ("put", "history"):
                started = time.monotonic()
                latencies = asyncio.run(_load(url, token, concurrency, total, kind))
                rate = total / (time.monotonic() - started)
                out[kind] = (pct(latencies, 0.5), pct(latencies, 0.99), rate)
            return out
        finally:
            for proc in procs:
                proc.stop()
            remove_tenant(settings, tenant)


def bench_api(base: Settings, runs: int, total: int, concurrency: int = 200) -> None:
    rounds = [one_round(base, concurrency, total) for _ in range(runs)]
    for kind, what in (
        ("put", "jobs put (through the admission)"),
        ("history", "job history query"),
    ):
        p50 = [round(r[kind][0]) for r in rounds]
        p99 = [round(r[kind][1]) for r in rounds]
        rates = [round(r[kind][2]) for r in rounds]
        row(
            f"api {what} p50 / p99 @{concurrency} concurrent (ms)",
            f"{statistics.median(p50):.0f} / {statistics.median(p99):.0f}",
            "-",
            f"{total} requests per run; p50 {p50}, p99 {p99}; requests/s {rates}",
        )
