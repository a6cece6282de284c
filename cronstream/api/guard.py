"""The front door of `cronstream api` and `cronstream ui`: a pure ASGI wrapper around the
whole application (``serve`` installs it), so that it holds before any route, dependency
or body parser runs.

- **Host.** A request whose ``Host`` names no allowed host is answered 400. DNS
  rebinding is a page of ``evil.example`` whose name is re-pointed at 127.0.0.1 (or at a
  private address): the browser then lets that page read our answers, but it still sends
  ``Host: evil.example``. Allowed: 127.0.0.1, localhost, ::1, the bound ``--host`` and the
  operator's ``--allowed-host`` names (``.example.com``: that domain and its subdomains;
  ``*``: any). An IP literal is always allowed: a page can only have an address as its
  origin by being served from that address, which is no rebinding (and Kubernetes'
  probes and Prometheus' scrapes address a pod by its IP).
- **Headers.** Every response carries a Content-Security-Policy (our own scripts and
  styles only, no inline script, no framing, no plugins, forms to ourselves), the
  legacy ``X-Frame-Options: DENY``, ``nosniff`` and ``Referrer-Policy: no-referrer``;
  one that came over https (TLS here, or ``X-Forwarded-Proto: https`` from a proxy
  uvicorn trusts) ``Strict-Transport-Security`` too, so the browser never tries plain
  http for this host again (a downgrade on the way would give away the session cookie).
  Over plain http it would mean nothing (browsers ignore it there).
- **Body size.** A body over ``max_body`` (1 MiB) is refused with 413 before it is read
  whole: at once from its Content-Length, or, when chunked, as soon as the bytes read so
  far pass the limit (the application then reads a client disconnect and whatever it
  answers is dropped). Without this a 60 MiB PUT without a token cost +60 MB of memory
  before its 401: FastAPI reads a body before it checks the token.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 1 << 20  # bytes: the largest job spec is ~70 KiB (a 64 KiB payload)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
CSP = (
    "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
# A year (what the preload list asks); not includeSubDomains: other services of the
# operator's domain may still be plain http.
HSTS = (b"strict-transport-security", b"max-age=31536000")


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header (port, brackets and a final dot dropped, lower
    case), or None when it is no host."""
    text = header.strip().lower()
    if text.startswith("["):  # [v6]:port
        inside, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        return inside or None
    name, colon, port = text.rpartition(":")
    if colon and port.isdigit() and ":" not in name:
        text = name
    text = text.removesuffix(".")
    return text if text and " " not in text and "/" not in text else None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class AllowedHosts:
    """The host names a request may be addressed to (``allows``)."""

    names: frozenset[str]
    domains: tuple[str, ...] = ()  # ".example.com": the domain and every subdomain
    any_host: bool = False  # "*": no check

    @classmethod
    def of(cls, bound: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """The defaults (the loopback names and ``bound``, the ``--host``) and ``extra``
        (``--allowed-host``, the setting ``runtime.options.roles.ALLOWED_HOSTS``)."""
        given = [item.strip().lower() for text in extra for item in text.split(",")]
        names, domains = set(), []
        for item in (*LOCAL_HOSTS, bound, *(g for g in given if g not in ("", "*"))):
            host = host_name(item.removeprefix("."))
            if host is None:
                raise ValueError(f"allowed host {item!r} is no host name")
            if item.startswith("."):
                domains.append(f".{host}")
            else:
                names.add(host)
        return cls(frozenset(names), tuple(domains), any_host="*" in given)

    def describe(self) -> str:
        if self.any_host:
            return "any"
        return ", ".join([*sorted(self.names), *self.domains, "IP addresses"])

    def allows(self, header: str | None) -> bool:
        host = host_name(header) if header is not None else None
        if host is None:
            return False
        if self.any_host or host in self.names or _is_address(host):
            return True
        return any(host == d[1:] or host.endswith(d) for d in self.domains)


class Guard:
    """The ASGI application ``app`` behind the three checks above."""

    def __init__(self, app: App, hosts: AllowedHosts, *, max_body: int = MAX_BODY) -> None:
        self.app, self.hosts, self.max_body = app, hosts, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan (and websockets, which nothing serves)
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        send = _with_security_headers(send, tls=scope.get("scheme") == "https")
        if not self.hosts.allows(headers.get("host")):
            await _answer(send, 400, "this server is not known by that Host name")
            return
        length = headers.get("content-length")
        if length is not None and not length.strip().isdigit():
            await _answer(send, 400, "Content-Length is not a number")
            return
        if length is not None and int(length) > self.max_body:
            await _answer(send, 413, f"request body over {self.max_body} bytes")
            return
        body = _CountedBody(receive, send, self.max_body)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if not body.refused:  # our own bug: crash as before
                raise
            # what the application made of the disconnect it was handed: nothing


class _CountedBody:
    """The request's body as the application reads it, counted: past the limit, the 413
    goes out and the application reads a disconnect; its own answer is dropped."""

    def __init__(self, receive: Receive, send: Send, limit: int) -> None:
        self._receive, self._send, self.limit = receive, send, limit
        self.seen = 0
        self.started = False  # the application's response began
        self.refused = False  # the 413 went out (or the body was cut off)

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.limit:
                self.refused = True
                if not self.started:
                    await _answer(self._send, 413, f"request body over {self.limit} bytes")
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _with_security_headers(send: Send, *, tls: bool) -> Send:
    wanted = (*SECURITY_HEADERS, HSTS) if tls else SECURITY_HEADERS

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", ()))
            present = {bytes(name).lower() for name, _ in headers}
            headers += [(k, v) for k, v in wanted if k not in present]
            message["headers"] = headers
        await send(message)

    return sending


async def _answer(send: Send, status: int, reason: str) -> None:
    """A refusal as the API answers errors (``{"error": reason}``); the connection is
    closed after it (a refused body is not read on only to be thrown away)."""
    body = json.dumps({"error": reason}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
