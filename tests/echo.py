"""An HTTP target that refuses every call (401) and echoes the Authorization header it got
in its answer: what a worker must keep out of history, dead letters and its log."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def echo_target(answer: Callable[[str], str]) -> Iterator[tuple[str, list[str]]]:
    """A server on a free port of 127.0.0.1 answering each POST 401 with
    ``answer(authorization)``; its URL (path /hook) and the Authorization headers it
    got, in order. Stopped after."""
    got: list[str] = []

    class Echo(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            auth = self.headers.get("Authorization", "")
            got.append(auth)
            body = answer(auth).encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()
