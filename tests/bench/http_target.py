"""The http target of the target rows, and the reference clients beside the worker.

- ``python -m tests.bench.http_target``: an HTTP/1.1 server in a process of its own
  (uvloop, a protocol parsing only what it needs), answering every request 200 with an
  empty body and keeping the connection alive: cheap enough that the worker, not the
  target, is what a row measures, and its CPU counted apart (``target``).
- ``reference_http(url, requests)``: the cheapest Python client for the same requests
  (aiohttp, one session, 64 in flight, the worker's headers and payload), in a child
  process: its CPU us per request.
- ``reference_kafka(producer, topic, records)``: a bare confluent-kafka producer writing
  the same records (key, payload, run-id header): its CPU us per record.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Producer

from cronstream.runtime.settings import REPO_ROOT

PAYLOAD = b'{"x": 1}'


class _Answer(asyncio.Protocol):
    """Reads request heads (and Content-Length bodies), answers 200 to each."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


def serve() -> None:
    """Listen on a free port of the loopback, say which on standard output, serve."""
    import uvloop

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Answer, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    uvloop.run(main())


@contextmanager
def http_target() -> Iterator[tuple[str, int]]:
    """(URL, pid) of the target server, started in a process of its own."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.http_target"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())  # once it listens
        yield f"http://127.0.0.1:{port}/hook", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


REFERENCE_HTTP = """
import asyncio, json, os, sys, time
import aiohttp
url, count = sys.argv[1], int(sys.argv[2])
def cpu():
    t = os.times()
    return t.user + t.system
async def main():
    async with aiohttp.ClientSession() as session:
        gate = asyncio.Semaphore(64)
        async def one(i):
            async with gate:
                headers = {"Idempotency-Key": f"job@{i}", "X-Cronstream-Run-Id": f"job@{i}",
                           "X-Cronstream-Job-Id": "job", "X-Cronstream-Attempt": "1",
                           "Content-Type": "application/json"}
                async with session.post(url, data=b'{"x": 1}', headers=headers) as answer:
                    await answer.read()
                    assert answer.status == 200
        await asyncio.gather(*(one(i) for i in range(500)))  # warm: connections open
        start = cpu()
        await asyncio.gather(*(one(i) for i in range(count)))
        print(json.dumps((cpu() - start) / count * 1e6))
asyncio.run(main())
"""


def reference_http(url: str, requests: int = 20_000) -> float:
    """aiohttp's CPU us per request for ``requests`` POSTs to ``url``, 64 in flight."""
    done = subprocess.run(
        [sys.executable, "-c", REFERENCE_HTTP, url, str(requests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(done.stdout))


def reference_kafka(producer: Producer, topic: str, records: int = 50_000) -> float:
    """A bare confluent-kafka producer's CPU us per record (the run id as key and
    header, the payload as value), every record acknowledged; this process's CPU, so
    call it with nothing else running in it."""
    t0 = os.times()
    for i in range(records):
        run_id = f"k-{i}@2026-11-29T00:00:00.000Z"
        while True:
            try:
                producer.produce(topic, PAYLOAD, run_id.encode(), headers=[("run_id", run_id)])
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(60)
    t1 = os.times()
    return (t1.user + t1.system - t0.user - t0.system) / records * 1e6


if __name__ == "__main__":
    serve()
