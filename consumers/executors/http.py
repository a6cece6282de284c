"""`http` targets: a webhook call with the run id as its ``Idempotency-Key``.

Safety: the target host is resolved first and every address it resolves to must be a
public unicast address. Loopback, private (RFC 1918, ULA), link-local, multicast,
reserved and unspecified addresses are refused unless a network containing them is in
the worker's allowlist (``--http-allow 127.0.0.0/8``). The request then goes to the very
address that was checked (the Host header and TLS SNI keep the name), so a DNS answer
that changes between check and connect cannot redirect it. Redirects are followed by
hand, at most five, each one checked the same way; a redirect to another origin
(scheme, host, port) drops every header that may carry a credential (the names
``schemas.redact.sensitive`` masks: Authorization, Cookie, X-Api-Key, Private-Token...,
and any header whose value came from a secret), and one that would re-send the payload
there is refused (a permanent failure). An IPv6 address that
carries an IPv4 one (IPv4-mapped, NAT64 64:ff9b::/96, 6to4, Teredo) is judged by the
IPv4 address it reaches.

Time and size: one deadline bounds the whole call, redirects included. Every connect,
TLS handshake, write and read is given only the time left (``DeadlineBackend``), so a
server that answers one byte at a time cannot hold a run past its timeout. Of a
response body at most ``BODY_CAP`` bytes are read (the error text keeps the start);
the connection is then closed. The body read is the attempt's output
(docs/run-output.md), a failed attempt's too (an error page).

Outcome: 2xx is success; 408, 425, 429 and 5xx, and network errors, are retriable
failures; any other status is a permanent failure (retrying a 404 cannot help).
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpcore
import httpx

from consumers.errors import ExecutionFailed, PermanentFailure, TargetInvalid, TimedOut
from consumers.executors.base import Output, RunContext
from consumers.executors.secrets import Secrets
from consumers.executors.setup import ExecutorSetup
from schemas.events import Target
from schemas.policy import TenantPolicy
from schemas.redact import secret_name, sensitive
from schemas.targets.http import connect_allowed, embedded_ipv4
from schemas.tenancy import OPERATORS

MAX_REDIRECTS = 5
RETRIABLE_STATUS = frozenset({408, 425, 429})
BODY_CAP = 64 * 1024  # bytes of a response body read at most
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class _Deadline(threading.local):
    at: float | None = None  # time.monotonic() by which this thread's call must end

    def left(self, timeout: float | None) -> float | None:
        """``timeout`` cut down to the time left; raises when none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the run's deadline passed")
        return left if timeout is None else min(timeout, left)


DEADLINE = _Deadline()


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation gets at most the calling thread's time left."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, DEADLINE.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, DEADLINE.left(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:  # fmt: skip
        tls = self._stream.start_tls(ssl_context, server_hostname, DEADLINE.left(timeout))
        return DeadlineStream(tls)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.SyncBackend):
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = super().connect_tcp(
            host, port, DEADLINE.left(timeout), local_address, socket_options
        )
        return DeadlineStream(stream)


MIN_CONNECTIONS = 100  # httpx's default pool size; more when the worker runs more threads


class _Transport(httpx.HTTPTransport):
    """httpx's transport on a connection pool whose connections keep to the deadline.

    The pool never closes an idle connection to make room or to trim its keep-alive set:
    every connection may be kept alive and there is one for each run thread. httpcore
    1.0.9 assigns an idle connection to a waiting request under its lock, but the
    connection stays IDLE until that thread sends; meanwhile another thread's pass may
    close it as surplus keep-alive (counted against all connections, not the idle ones,
    so with 20 kept alive that happened whenever more than 20 were open) or to make
    room (encode/httpcore#1110, #1000). A request already started on it then failed with
    ``ReadError('[Errno 9] Bad file descriptor')``: 2-3 in 50,000 runs of the chaos
    suite, calls the target had applied reported as failed (``make chaos``). The
    keep-alive expiry (5 s idle) can still close one that way, after a pause that left
    every connection idle: seen once in 56,888 runs since."""

    def __init__(self, connections: int) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=connections,
            max_keepalive_connections=connections,
            keepalive_expiry=5.0,
            network_backend=DeadlineBackend(),
        )


def executor(setup: ExecutorSetup) -> HttpExecutor:
    """The worker's http executor (declared by ``schemas.targets.http``)."""
    config = setup.config
    return HttpExecutor(allow=config.http_allow, secrets=Secrets(config.secrets_dir),
                        policy=setup.policy, threads=config.concurrency)  # fmt: skip


class HttpExecutor:
    kind = "http"

    def __init__(
        self, *, allow: Iterable[str] = (), secrets: Secrets | None = None,
        policy: Callable[[], TenantPolicy] = TenantPolicy, threads: int = 0,
    ) -> None:  # fmt: skip
        """``allow``: networks (CIDR) operators' jobs may call although not public;
        ``secrets``: where ``secret:NAME`` header values are resolved; ``policy``: the
        tenants' grants now (a tenant's job may call a private address only by its own
        grant, never by ``allow``); ``threads``: the run threads that may call at once
        (the pool keeps a connection for each, at least ``MIN_CONNECTIONS``)."""
        self.secrets = secrets or Secrets()
        self.policy = policy
        self.allow: tuple[Network, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allow
        )
        transport = _Transport(max(MIN_CONNECTIONS, threads))
        self._client = httpx.Client(follow_redirects=False, trust_env=False, transport=transport)

    def close(self) -> None:
        self._client.close()

    def check_address(
        self, address: str, *, host: str = "", port: int = 0, tenant: str = OPERATORS
    ) -> None:
        """Raise TargetInvalid unless ``address`` (resolved from ``host``) may be called
        on ``port`` by a job of ``tenant``."""
        ip = ipaddress.ip_address(address)
        if tenant != OPERATORS:
            reached = embedded_ipv4(ip) or ip  # the address it reaches is what counts
            if not connect_allowed(self.policy().of(tenant).granted("http"), host, reached, port):
                why = f"not a public address, and tenant {tenant!r} has no grant for it"
                raise TargetInvalid(f"refusing to call {reached} port {port}: {why}")
            return
        if any(ip in network for network in self.allow):
            return
        embedded = embedded_ipv4(ip)
        if embedded is not None and embedded != ip:
            self.check_address(str(embedded))  # the address it reaches is what counts
            return
        if not ip.is_global or ip.is_multicast:
            raise TargetInvalid(
                f"refusing to call {ip}: not a public address (allow its network with --http-allow)"
            )

    def resolve(self, url: str, tenant: str = OPERATORS) -> tuple[str, str, int]:
        """(scheme, checked IP, port) for ``url`` called by a job of ``tenant``; raises
        TargetInvalid when not allowed."""
        try:  # a bad port or host (also from a redirect's Location) is the target's fault
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("not an http(s) URL")
            infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            raise ExecutionFailed(f"cannot resolve {parts.hostname!r}: {exc}") from exc
        except ValueError as exc:  # UnicodeError too: an IDNA label over 63 characters
            raise TargetInvalid(f"{url!r} is not a usable http(s) URL: {exc}") from exc
        addresses = sorted({str(info[4][0]) for info in infos})
        for address in addresses:
            self.check_address(address, host=parts.hostname, port=port, tenant=tenant)
        return parts.scheme, addresses[0], port

    def execute(self, target: Target, context: RunContext) -> Output | None:
        DEADLINE.at = context.deadline
        try:
            return self._call(target, context)
        finally:
            DEADLINE.at = None

    def _call(self, target: Target, context: RunContext) -> Output | None:
        url = target.url or ""
        if "@" in urlsplit(url).netloc:
            raise TargetInvalid(
                "credentials in the URL are not sent (they would travel in every run "
                "request): use a header such as Authorization: secret:NAME"
            )
        method = target.method or "POST"
        body = (context.payload or "").encode() if method not in ("GET", "DELETE") else None
        # Dropped when a redirect leaves the origin (scheme, host, port) the job named.
        credentials = {k for k, v in target.headers.items() if sensitive(k) or secret_name(v)}
        headers = {
            **self.secrets.headers(target.headers, context),
            "Idempotency-Key": context.run_id,
            "X-Cronstream-Run-Id": context.run_id,
            "X-Cronstream-Job-Id": context.job_id,
            "X-Cronstream-Attempt": str(context.attempt),
        }
        if body and "content-type" not in {k.lower() for k in headers}:
            headers["Content-Type"] = _content_type(context.payload or "")
        for _ in range(MAX_REDIRECTS + 1):
            response, start = self._send(method, url, headers, body, context)
            if response.status_code in (301, 302, 303, 307, 308) and "location" in response.headers:
                target_url = urljoin(url, response.headers["location"])
                if response.status_code == 303:
                    method, body = "GET", None
                if _origin(target_url) != _origin(url):
                    # Credentials and the payload are for the origin the job named.
                    headers = {k: v for k, v in headers.items() if k not in credentials}
                    if body:
                        self.resolve(target_url, context.tenant)  # a refusal says so first
                        raise PermanentFailure(
                            f"{url} redirects to another origin ({_origin(target_url)}): "
                            "the payload is not sent there"
                        )
                url = target_url
                continue
            return _judge(response.status_code, start, url)
        raise PermanentFailure(f"more than {MAX_REDIRECTS} redirects from {target.url}")

    def _send(
        self,
        method: str,
        url: str,
        headers: dict[str, str],
        body: bytes | None,
        context: RunContext,
    ) -> tuple[httpx.Response, Output]:
        """The response and at most BODY_CAP bytes of its body (the connection closed)."""
        scheme, address, port = self.resolve(url, context.tenant)
        parts = urlsplit(url)
        host = f"[{address}]" if ":" in address else address
        pinned = urlunsplit((scheme, f"{host}:{port}", parts.path or "/", parts.query, ""))
        remaining = context.remaining()
        if remaining <= 0:
            raise TimedOut("timed out before the request was sent")
        request = self._client.build_request(
            method, pinned, content=body,
            headers={**headers, "Host": parts.netloc.rpartition("@")[2]},
            timeout=remaining, extensions={"sni_hostname": parts.hostname or ""},
        )  # fmt: skip
        try:
            response = self._client.send(request, stream=True)
            try:
                return response, _read_capped(response)
            finally:
                response.close()
        except httpx.TimeoutException as exc:
            raise TimedOut(f"{method} {url} timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise ExecutionFailed(f"{method} {url} failed: {exc!r}") from exc


def _read_capped(response: httpx.Response) -> Output:
    """The start of the body, at most BODY_CAP bytes (decoded); the rest is not read
    (``dropped``: there was more)."""
    kept = bytearray()
    for chunk in response.iter_bytes():
        kept += chunk
        if len(kept) > BODY_CAP:
            del kept[BODY_CAP:]
            return Output(bytes(kept), dropped="end")
    return Output(bytes(kept))


def _judge(status: int, body: Output, url: str) -> Output | None:
    """The attempt's output (its body; None when empty) for a 2xx; raises otherwise."""
    if 200 <= status < 300:
        return body if body.data else None
    text = body.data[:300]
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    output = body if body.data else None
    if status >= 500 or status in RETRIABLE_STATUS:
        raise ExecutionFailed(f"HTTP {status} from {url}: {text}", output=output)
    raise PermanentFailure(f"HTTP {status} from {url}: {text}", output=output)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def _content_type(payload: str) -> str:
    try:
        json.loads(payload)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"
