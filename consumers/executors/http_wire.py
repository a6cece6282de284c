"""HTTP/1.1 on the executors' event loop: requests on kept-alive connections.

Only what the http executor needs (``consumers.executors.http``): one request at a time
per connection, the request written whole (Content-Length, never chunked), the response
parsed by httptools (llhttp: Content-Length, chunked, read-until-close), at most
``cap`` bytes of its body kept, and the connection kept alive for the next request to
the same (scheme, host, port) when both ends allow it. The address is the one the
executor checked before connecting: the pool never resolves a name.

A connection is given back to the pool only once its response is read whole; one given
up on (the deadline, a body over the cap, a HEAD, an error) is closed. An idle connection
the server closed is dropped when it closes (``connection_lost``), and every idle one
after ``KEEPALIVE_S``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import httptools

from cronstream.schemas.limits import FRAMING_HEADERS

# An idle connection is closed after this long: under the 5 s idle timeout of common
# servers (uvicorn, Node, Apache), so a kept connection is rarely one they close as it
# is used.
KEEPALIVE_S = 4.0
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(r"[\r\n\x00]")
Key = tuple[str, str, int]  # (scheme, host, port)


class WireError(Exception):
    """The connection failed or closed before the response ended, or the response
    was not HTTP/1.x."""


class Unanswered(WireError):
    """The connection closed before any byte of the response came: on a kept-alive
    connection, the server closed it as idle just as the request went (sent again once
    on a new connection: ``consumers.executors.http``)."""


@dataclass(slots=True)
class Response:
    status: int = 0
    location: str | None = None
    body: bytearray = field(default_factory=bytearray)
    dropped: bool = False  # there was more body than the cap


def request_head(
    method: str, target: str, host: str, headers: dict[str, str], length: int
) -> bytes:
    """The request line and headers; raises ValueError on a header that would split
    the request (a name that is not a token, a value with CR, LF or NUL) or that says
    how the message is framed or routed (``FRAMING_HEADERS``: the worker's to write)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name) or _BAD_VALUE.search(value):
            raise ValueError(f"header {name!r} is not a valid HTTP header")
        if name.lower() in FRAMING_HEADERS:
            raise ValueError(f"header {name!r} is the worker's to set, not a job's")
        lines.append(f"{name}: {value}")
    if length or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        lines.append(f"Content-Length: {length}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("utf-8")


class Connection(asyncio.Protocol):
    def __init__(self, pool: Pool, key: Key, address: str) -> None:
        self.pool, self.key = pool, key
        self.ip = ipaddress.ip_address(address)  # checked again before each reuse
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Response] | None = None
        self._response = Response()
        self._parser: Any = None
        self._cap = 0
        self._head_only = False
        self._keep = False
        self._framed = False  # the response said its length (or chunked)
        self._answered = False  # a byte of the response came

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._parser is None:  # nothing asked: not HTTP
            self.close()
            return
        self._answered = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(WireError(f"not an HTTP/1.x response (or an upgrade): {exc!r}"))

    def eof_received(self) -> bool | None:
        self._closed_by_server("the server closed the connection before the response ended")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        # uvloop's TLS ends a connection closed without close_notify here, not in
        # eof_received: a body without a length ends that way too
        self._closed_by_server(f"connection lost: {exc!r}" if exc else "connection closed")

    def _closed_by_server(self, why: str) -> None:
        if self._waiter is None:
            self.close()
        elif self._response.status >= 200 and not self._framed:
            self._keep = False  # a body without a length ends when the connection does
            self._done()
        elif not self._answered:
            self._fail(Unanswered(why))
        else:
            self._fail(WireError(why))

    # -- httptools callbacks -----------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"location":
            self._response.location = value.decode("latin-1")
        elif name in (b"content-length", b"transfer-encoding"):
            self._framed = True  # its end is told, not the connection's close

    def on_headers_complete(self) -> None:
        if self._waiter is None:
            return
        self._response.status = self._parser.get_status_code()
        if self._head_only and self._response.status >= 200:
            self._keep = False  # llhttp cannot tell a HEAD's answer has no body: closed
            self._done()

    def on_body(self, body: bytes) -> None:
        if self._waiter is None:
            return
        kept = self._response.body
        room = self._cap - len(kept)
        if len(body) > room:
            kept += body[:room]
            self._response.dropped = True
            self._keep = False  # the rest is not read: the connection cannot be reused
            self._done()
        else:
            kept += body

    def on_message_complete(self) -> None:
        if self._waiter is None:
            return
        if 100 <= self._response.status < 200:  # an interim answer: the real one follows
            self._response, self._framed = Response(), False
            return
        self._keep = self._keep and self._parser.should_keep_alive()
        self._done()

    # -- requests ----------------------------------------------------------------------
    async def send(self, data: bytes, *, cap: int, head_only: bool) -> Response:
        """Write the request, return its response (at most ``cap`` bytes of body)."""
        transport = self.transport
        if transport is None or self.closed:
            raise WireError("connection closed")
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._response, self._cap, self._head_only = Response(), cap, head_only
        self._keep, self._framed, self._answered = True, False, False
        self._parser = httptools.HttpResponseParser(self)
        transport.write(data)
        try:
            return await waiter
        except BaseException:
            # Still ours: the deadline cancelled the wait, and what the server sends next
            # is not for anyone. (Once answered, the connection may already serve the
            # next request: nothing here may touch it.)
            if self._waiter is waiter:
                self._waiter = None
                self.close()
            raise

    def _done(self) -> None:
        waiter, self._waiter = self._waiter, None
        self._parser = None
        if waiter is None:
            return
        if waiter.done():  # the deadline cancelled it in this same turn of the loop
            self.close()
            return
        waiter.set_result(self._response)
        if self._keep and not self.closed:
            self.pool.give_back(self)
        else:
            self.close()

    def _fail(self, error: WireError) -> None:
        waiter, self._waiter = self._waiter, None
        self._parser = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.abort()


class Pool:
    """Idle connections by (scheme, host, port), each taken by one request at a time;
    each knows the address it was opened to (checked by the caller before connecting,
    and again by the caller before each reuse). ``limit``: idle connections kept at
    most (beyond it, one that becomes idle is closed)."""

    def __init__(self, ssl_context: ssl.SSLContext, limit: int) -> None:
        self.ssl_context = ssl_context
        self.limit = limit
        self._idle: dict[Key, list[Connection]] = {}
        self._count = 0
        self._sweeping = False

    def take(self, key: Key) -> Connection | None:
        """An idle connection to ``key`` still open, or None."""
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            self._count -= 1
            if not idle:
                del self._idle[key]
            if not conn.closed and now - conn.idle_since < KEEPALIVE_S:
                return conn
            conn.close()
        return None

    async def connect(self, key: Key, address: str, *, server_name: str) -> Connection:
        """A new connection for ``key`` to ``address`` (checked by the caller), TLS with
        ``server_name`` for https."""
        tls = key[0] == "https"
        _, conn = await asyncio.get_running_loop().create_connection(
            lambda: Connection(self, key, address),
            address,
            key[2],
            ssl=self.ssl_context if tls else None,
            server_hostname=server_name if tls else None,
        )
        return conn

    def give_back(self, conn: Connection) -> None:
        if self._count >= self.limit:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)
        self._count += 1
        if not self._sweeping:
            self._sweeping = True
            asyncio.get_running_loop().call_later(KEEPALIVE_S, self._sweep)

    def forget(self, conn: Connection) -> None:
        """``conn`` closed: out of the idle lists, if it was there."""
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
            self._count -= 1
            if not idle:
                del self._idle[conn.key]

    def _sweep(self) -> None:
        """Close the connections idle for KEEPALIVE_S; again later while any is idle."""
        self._sweeping = False
        now = time.monotonic()
        for conns in list(self._idle.values()):
            for conn in [c for c in conns if now - c.idle_since >= KEEPALIVE_S]:
                conn.close()
        if self._count and not self._sweeping:
            self._sweeping = True
            asyncio.get_running_loop().call_later(KEEPALIVE_S, self._sweep)

    def idle(self) -> int:
        return self._count

    def close(self) -> None:
        for conns in list(self._idle.values()):
            for conn in list(conns):
                conn.close()
