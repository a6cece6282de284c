"""The http executor's connections (``consumers.executors.http_wire``): attempts on the
event loop keep a connection each and reuse it; one the server closed while idle is not
used again; a kept connection is not a way around the tenants' grants."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from queue import SimpleQueue
from typing import Any

import pytest

from consumers.errors import TargetInvalid
from consumers.executors.base import Output
from consumers.executors.http import HttpExecutor
from schemas.events import Target
from schemas.policy import TenantPolicy
from tests.unit.test_executors import context


class KeepAlive(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # connections kept open between requests
    timeout = 10.0  # an idle connection is closed by the server after this long
    opened = 0  # connections accepted

    def setup(self) -> None:
        type(self).opened += 1
        super().setup()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_POST = do_GET

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def keepalive() -> Iterator[str]:
    KeepAlive.opened = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def test_calls_at_once_each_keep_a_connection_the_next_calls_reuse(keepalive: str) -> None:
    """Thirty attempts started at once on the event loop open thirty connections, kept
    alive and taken again by the next thirty (no DNS, no connect: issue 47's cost)."""
    http = HttpExecutor(allow=["127.0.0.0/8"], connections=30)
    done: SimpleQueue[tuple[Any, Any, BaseException | None]] = SimpleQueue()
    try:
        for round_ in range(2):
            for i in range(30):
                http.start(i, Target(type="http", method="GET", url=keepalive), context(), done)
            results = [done.get(timeout=10) for _ in range(30)]
            assert sorted(token for token, _, _ in results) == list(range(30))
            assert {(out, err) for _, out, err in results} == {(Output(b"ok"), None)}
            assert KeepAlive.opened == 30, round_
            assert http.pool.idle() == 30
    finally:
        http.close()


def test_a_connection_the_server_closed_while_idle_is_not_used_again(
    keepalive: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server closes an idle connection after a second: the next call opens a new
    one instead of failing on the closed one."""
    monkeypatch.setattr(KeepAlive, "timeout", 1.0)
    http = HttpExecutor(allow=["127.0.0.0/8"])
    try:
        get = Target(type="http", method="GET", url=keepalive)
        assert http.execute(get, context()) == Output(b"ok")
        assert http.execute(get, context()) == Output(b"ok")
        assert KeepAlive.opened == 1  # kept alive
        time.sleep(1.5)
        assert http.execute(get, context()) == Output(b"ok")
        assert KeepAlive.opened == 2
    finally:
        http.close()


def test_a_kept_connection_is_checked_against_the_grants_of_now(keepalive: str) -> None:
    """A connection kept alive from a tenant's granted call is not a way around the
    grants: its address is checked again for each call (a grant withdrawn, or another
    tenant)."""
    port = int(keepalive.rstrip("/").rpartition(":")[2])
    grants = [TenantPolicy([f"acme:http=127.0.0.1:{port}"])]
    http = HttpExecutor(policy=lambda: grants[0])
    try:
        get = Target(type="http", method="GET", url=keepalive)
        assert http.execute(get, context(tenant="acme")) == Output(b"ok")
        with pytest.raises(TargetInvalid, match="has no grant for it"):
            http.execute(get, context(tenant="beta"))
        grants[0] = TenantPolicy([])
        with pytest.raises(TargetInvalid, match="has no grant for it"):
            http.execute(get, context(tenant="acme"))
        assert KeepAlive.opened == 1
    finally:
        http.close()
