"""The chaos suite's HTTP target: idempotent by run id, and a witness of every call.

``python -m tests.chaos.target LOG PORTFILE ADDRESS`` serves HTTP/1.1 (keep-alive) on a
free port of ADDRESS (the loopback, or the hosts' bridge address when a worker runs on a
host of its own), written to PORTFILE. Each request's ``Idempotency-Key`` (the run id) is
applied once: the first request with a key is an *effect*, a later one is answered 200
the same but not applied again (*deduplicated*). Every request is one line of LOG:
``<received ms> <effect|dedup> <attempt> <run id>``. It is a separate asyncio process
so that it costs the measured pipeline little (a few tens of microseconds a call) and
does not share the suite's interpreter.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


class Target:
    def __init__(self, log: Path) -> None:
        self.out = log.open("a", buffering=1 << 20)
        self.seen: set[str] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                key, attempt, length = "", "1", 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    lowered = name.strip().lower()
                    if lowered == b"idempotency-key":
                        key = value.strip().decode("utf-8", "replace")
                    elif lowered == b"x-cronstream-attempt":
                        attempt = value.strip().decode()
                    elif lowered == b"content-length":
                        length = int(value)
                if length:
                    await reader.readexactly(length)
                kind = "dedup" if key in self.seen else "effect"
                self.seen.add(key)
                self.out.write(f"{int(time.time() * 1000)} {kind} {attempt} {key}\n")
                writer.write(RESPONSE)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()


async def main(log: Path, portfile: Path, address: str) -> None:
    target = Target(log)
    server = await asyncio.start_server(target.serve, address, 0)
    port = server.sockets[0].getsockname()[1]
    portfile.write_text(str(port))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    flusher = asyncio.create_task(_flush_every(target, 0.5))
    await stop.wait()
    flusher.cancel()
    server.close()
    target.out.close()


async def _flush_every(target: Target, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        target.out.flush()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
