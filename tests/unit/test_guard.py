"""The API's and dashboard's front door (``cronstream.api.guard``): allowed Host names,
security headers on every answer, request bodies over the limit refused before they are
read whole. Driven as ASGI directly: the guard around a tiny application that reads the
whole body, as FastAPI does before it checks a token."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field

import pytest

from cronstream.api.guard import CSP, MAX_BODY, AllowedHosts, Guard, Message, Receive, Scope, Send
from cronstream.api.guard import host_name as parse_host


@dataclass
class Exchange:
    """One request through the guard: what the client sent and what came back."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks_read: int = 0  # of the request body, by the server side
    app_saw: list[str] = field(default_factory=list)  # what the application received


async def _echo(scope: Scope, receive: Receive, send: Send, saw: list[str]) -> None:
    """Reads the whole body, then answers its length (a disconnect: raises, as Starlette
    raises ClientDisconnect)."""
    size = 0
    while True:
        message = await receive()
        saw.append(message["type"])
        if message["type"] == "http.disconnect":
            raise ConnectionError("client went away")
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def exchange(
    host: str | None = "127.0.0.1:8780",
    chunks: tuple[bytes, ...] = (b"",),
    length: str | None = None,
    hosts: AllowedHosts | None = None,
    limit: int = MAX_BODY,
    scheme: str = "http",
) -> Exchange:
    got = Exchange()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await _echo(scope, receive, send, got.app_saw)

    guard = Guard(app, hosts or AllowedHosts.of("127.0.0.1"), max_body=limit)
    headers = [(b"host", host.encode())] if host is not None else []
    if length is not None:
        headers.append((b"content-length", length.encode()))
    scope: Scope = {
        "type": "http",
        "method": "PUT",
        "path": "/v1/jobs/x",
        "headers": headers,
        "scheme": scheme,
    }

    async def receive() -> Message:
        got.chunks_read += 1
        if got.chunks_read > len(chunks):
            return {"type": "http.disconnect"}
        i = got.chunks_read - 1
        return {"type": "http.request", "body": chunks[i], "more_body": i < len(chunks) - 1}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            assert got.status == 0, "a second response"
            got.status = message["status"]
            got.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            got.body += message.get("body", b"")

    asyncio.run(guard(scope, receive, send))
    return got


@pytest.mark.parametrize(
    ("header", "host"),
    [
        ("127.0.0.1:8780", "127.0.0.1"),
        ("LocalHost", "localhost"),
        ("localhost.:80", "localhost"),
        ("[::1]:8780", "::1"),
        ("[::1]", "::1"),
        ("example.com", "example.com"),
        ("[::1]x", None),
        ("a b", None),
        ("", None),
        ("[]:80", None),
    ],
)
def test_host_header_is_read_without_its_port(header: str, host: str | None) -> None:
    assert parse_host(header) == host


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("127.0.0.1:8780", True),
        ("localhost:8780", True),
        ("[::1]:8780", True),
        ("dash.internal", True),  # the bound --host
        ("ops.example.com", True),
        ("example.com", True),  # .example.com: domain and subdomains
        ("cron.corp", True),  # --allowed-host cron.corp
        ("10.1.2.3:8780", True),
        ("[fd00::5]", True),  # an address is no rebinding
        ("evil.example", False),
        ("127.0.0.1.nip.io", False),
        ("badexample.com", False),
        ("localhost.evil.example", False),
        (None, False),
        ("", False),
    ],
)
def test_only_allowed_host_names_pass(header: str | None, allowed: bool) -> None:
    hosts = AllowedHosts.of("dash.internal", ["cron.corp,.example.com"])
    assert hosts.allows(header) is allowed


def test_a_wrong_host_is_refused_with_400_before_the_application_runs() -> None:
    got = exchange(host="evil.example:8780")
    assert got.status == 400
    assert b"Host" in got.body
    assert got.app_saw == []
    assert got.chunks_read == 0
    assert exchange(host=None).status == 400  # no Host at all


def test_star_allows_any_host_and_a_bad_name_is_refused() -> None:
    assert AllowedHosts.of("127.0.0.1", ["*"]).allows("anything.example")
    with pytest.raises(ValueError, match="no host name"):
        AllowedHosts.of("127.0.0.1", ["not a host"])


@pytest.mark.parametrize("host", ["127.0.0.1", "evil.example"])
def test_every_answer_carries_the_security_headers(host: str) -> None:
    got = exchange(host=host)
    assert got.status == (200 if host == "127.0.0.1" else 400)
    assert got.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP
    assert "frame-ancestors 'none'" in CSP
    assert "'unsafe-inline'" not in CSP
    assert got.headers["x-frame-options"] == "DENY"
    assert got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("host", ["127.0.0.1", "evil.example"])
def test_answers_over_https_carry_strict_transport_security_and_over_http_none(
    host: str,
) -> None:
    assert exchange(host=host, scheme="https").headers["strict-transport-security"] == (
        "max-age=31536000"
    )
    assert "strict-transport-security" not in exchange(host=host, scheme="http").headers


def test_a_body_within_the_limit_reaches_the_application_whole() -> None:
    got = exchange(chunks=(b"x" * 600, b"y" * 424), length="1024", limit=1024)
    assert (got.status, got.body) == (200, b"1024")


def test_a_content_length_over_the_limit_is_refused_before_any_byte_is_read() -> None:
    got = exchange(chunks=(b"x" * 100,), length=str(60 << 20))
    assert got.status == 413
    assert got.headers["connection"] == "close"  # the rest is not read on
    assert got.chunks_read == 0
    assert got.app_saw == []
    assert exchange(length="12abc").status == 400


def test_a_chunked_body_is_cut_off_as_it_passes_the_limit() -> None:
    """60 chunks of 64 KiB with no Content-Length, 1 MiB limit: the 413 goes out after the
    17th chunk; the application reads a disconnect, its own answer is dropped, and the
    rest of the body is never read."""
    chunk = b"z" * 65536
    got = exchange(chunks=(chunk,) * 60)
    assert got.status == 413
    assert json.loads(got.body) == {"error": "request body over 1048576 bytes"}
    assert got.chunks_read == 17
    assert got.app_saw == ["http.request"] * 16 + ["http.disconnect"]


def test_our_own_bug_still_raises() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    scope: Scope = {"type": "http", "headers": [(b"host", b"localhost")]}
    with pytest.raises(RuntimeError, match="a bug"):
        asyncio.run(Guard(broken, AllowedHosts.of("127.0.0.1"))(scope, receive, send))
