"""The http executor's connections (``consumers.executors.http_wire``): attempts on the
event loop keep a connection each and reuse it; one the server closed while idle is not
used again; a kept connection is not a way around the tenants' grants."""

from __future__ import annotations

import asyncio
import socketserver
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from queue import SimpleQueue
from typing import Any

import pytest

from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.base import Output
from cronstream.consumers.executors.http import HttpExecutor
from cronstream.consumers.executors.http_wire import (
    Connection,
    Pool,
    Response,
    Unanswered,
    WireError,
)
from cronstream.schemas.events import Target
from cronstream.schemas.policy import TenantPolicy
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
    alive and taken again by the next thirty (no DNS, no connect: what an outside review
    measured each http run paying)."""
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


def test_a_refused_reuse_leaves_the_connection_to_those_allowed(keepalive: str) -> None:
    """Found by review: a kept connection taken for a tenant the grants refuse was neither
    given back nor closed (one more open connection per refusal)."""
    http = HttpExecutor(allow=["127.0.0.0/8"])
    try:
        get = Target(type="http", method="GET", url=keepalive)
        assert http.execute(get, context(tenant="default")) == Output(b"ok")  # an operator's
        for _ in range(3):
            with pytest.raises(TargetInvalid, match="has no grant for it"):
                http.execute(get, context(tenant="beta"))
        assert http.execute(get, context(tenant="default")) == Output(b"ok")
        assert KeepAlive.opened == 1
        assert http.pool.idle() == 1
    finally:
        http.close()


class _ClosesSecondRequests(socketserver.BaseRequestHandler):
    """Answers a connection's first request, then closes it when the next one comes
    without answering (a server closing it as idle just as the request is sent)."""

    opened = 0

    def handle(self) -> None:
        type(self).opened += 1
        conn = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        conn.recv(4096)  # the second request: closed unanswered
        conn.close()


def test_a_kept_connection_closed_unanswered_is_tried_once_anew() -> None:
    _ClosesSecondRequests.opened = 0
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ClosesSecondRequests)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    http = HttpExecutor(allow=["127.0.0.0/8"])
    try:
        get = Target(type="http", method="GET", url=f"http://127.0.0.1:{server.server_address[1]}/")
        assert http.execute(get, context()) == Output(b"ok")
        assert http.execute(get, context()) == Output(b"ok")  # the kept one closed: anew
        assert _ClosesSecondRequests.opened == 2
    finally:
        http.close()
        server.shutdown()
        server.server_close()


class _Transport:
    def __init__(self) -> None:
        self.aborted = False
        self.sent = b""

    def write(self, data: bytes) -> None:
        self.sent += data

    def abort(self) -> None:
        self.aborted = True


def _answer(*chunks: bytes, then: str = "") -> tuple[Connection, Any]:
    """A connection fed ``chunks`` as the answer to one request, then (``then``) lost or
    cancelled; (the connection, what ``send`` returned or raised)."""

    async def exchange() -> tuple[Connection, Any]:
        pool = Pool(ssl.create_default_context(), 10)
        conn = Connection(pool, ("http", "h", 80), "127.0.0.1")
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        sending = asyncio.ensure_future(
            conn.send(b"GET / HTTP/1.1\r\n\r\n", cap=1024, head_only=False)
        )
        await asyncio.sleep(0)
        if then == "cancelled":
            sending.cancel()
        for chunk in chunks:
            conn.data_received(chunk)
        if then == "lost":
            conn.connection_lost(None)
        try:
            return conn, await sending
        except BaseException as exc:
            return conn, exc

    return asyncio.run(exchange())


def test_a_body_without_a_length_ends_with_the_connection_even_without_close_notify() -> None:
    """Found by review: uvloop's TLS reports a close without close_notify as a lost
    connection, not an end of file: the body read until then is the answer."""
    _, answer = _answer(b"HTTP/1.1 200 OK\r\n\r\nhel", b"lo", then="lost")
    assert isinstance(answer, Response)
    assert (answer.status, bytes(answer.body)) == (200, b"hello")
    _, answer = _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhello", then="lost")
    assert isinstance(answer, WireError)  # a length said and not reached: not an answer
    _, answer = _answer(then="lost")
    assert isinstance(answer, Unanswered)


def test_an_answer_that_comes_as_the_deadline_cancels_closes_the_connection() -> None:
    """Found by review: the deadline's cancel and the response in the same turn of the
    loop left the connection open, out of the pool, with no one waiting."""
    conn, answer = _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", then="cancelled")
    assert isinstance(answer, asyncio.CancelledError)
    assert conn.closed
    assert conn.pool.idle() == 0


def test_an_upgrade_answer_is_a_failure_not_an_escaping_error() -> None:
    conn, answer = _answer(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n"
    )
    assert isinstance(answer, WireError)
    assert conn.closed
