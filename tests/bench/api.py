"""`cronstream api` under 200 concurrent requests (issue 16): jobs put (through the real
admission) and history queries, latency p50/p99. One admission and one API process."""

from __future__ import annotations

import asyncio
import socket
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from infra.tenants import add_tenant, remove_tenant
from runtime.settings import Settings
from runtime.tokens import token_path
from tests.bench.common import namespace, pct, row
from tests.integration.helpers import CronstreamProcess

SPEC = {"every": "1h", "target": "http", "url": "https://example.com/hook"}


async def _load(url: str, token: str, concurrency: int, total: int, kind: str) -> list[float]:
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=120) as client:  # fmt: skip

        async def one(worker: int) -> None:
            for i in range(worker, total, concurrency):
                started = time.perf_counter()
                if kind == "put":
                    response = await client.put(f"/v1/jobs/j{i}", json=SPEC)
                else:
                    response = await client.get(f"/v1/jobs/j{i % 100}/history",
                                                params={"since": "1h"})  # fmt: skip
                if response.status_code != 200:
                    raise RuntimeError(f"{kind} j{i}: {response.status_code} {response.text}")
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(one(w) for w in range(concurrency)))
    return latencies


def _wait_up(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} never came up")


def one_round(base: Settings, concurrency: int, total: int) -> dict[str, tuple[float, float]]:
    with namespace(base) as settings:
        tenant = f"bench{uuid.uuid4().hex[:6]}"
        add_tenant(settings, tenant)
        logdir = Path(tempfile.mkdtemp(prefix="csbench-"))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        procs = [
            CronstreamProcess(settings, logdir, "admission", "--max-jobs", str(total * 2),
                              command="admission"),
            CronstreamProcess(settings, logdir, "api", "--port", str(port), command="api"),
        ]  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            procs[0].wait_live(1, timeout=120, text="jobs topic read")
            _wait_up(url)
            token = token_path(settings, tenant).read_text().strip()
            out = {}
            for kind in ("put", "history"):
                latencies = asyncio.run(_load(url, token, concurrency, total, kind))
                out[kind] = (pct(latencies, 0.5), pct(latencies, 0.99))
            return out
        finally:
            for proc in procs:
                proc.stop()
            remove_tenant(settings, tenant)


def bench_api(base: Settings, runs: int, total: int, concurrency: int = 200) -> None:
    rounds = [one_round(base, concurrency, total) for _ in range(runs)]
    for kind, what in (("put", "jobs put (through the admission)"),
                       ("history", "job history query")):  # fmt: skip
        p50 = [round(r[kind][0]) for r in rounds]
        p99 = [round(r[kind][1]) for r in rounds]
        row(f"api {what} p50 / p99 @{concurrency} concurrent (ms)",
            f"{statistics.median(p50):.0f} / {statistics.median(p99):.0f}", "-",
            f"{total} requests per run; p50 {p50}, p99 {p99}")  # fmt: skip
