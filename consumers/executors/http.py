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

Time and size: one deadline bounds the whole call, redirects included (the call is a
coroutine on the executors' event loop, ``consumers.executors.eventloop``, cancelled
when its time is up), so a server that answers one byte at a time cannot hold a run past
its timeout. Of a response body at most ``BODY_CAP`` bytes are read (the error text
keeps the start); the connection is then closed. The body read is the attempt's output
(docs/run-output.md), a failed attempt's too (an error page).

Cost: an attempt is a coroutine, not a run thread; a connection is kept alive per
(scheme, host, port) (``consumers.executors.http_wire``: HTTP/1.1 parsed by httptools),
so a run to a destination already reached costs no DNS lookup: the address the kept
connection was opened to is checked again against the tenant's grants now, a few
microseconds. A new connection resolves the name on the loop and checks every address
first, as above.

Outcome: 2xx is success; 408, 425, 429 and 5xx, and network errors, are retriable
failures; any other status is a permanent failure (retrying a 404 cannot help).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import ssl
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any, NamedTuple
from urllib.parse import SplitResult, quote, urljoin, urlsplit

from cronstream.consumers.errors import (
    Cancelled,
    ExecutionFailed,
    PermanentFailure,
    TargetInvalid,
    TimedOut,
)
from cronstream.consumers.executors.base import Finished, Output, RunContext
from cronstream.consumers.executors.eventloop import LoopThread
from cronstream.consumers.executors.http_wire import (
    Connection,
    Pool,
    Response,
    Unanswered,
    WireError,
    request_head,
)
from cronstream.consumers.executors.secrets import Secrets
from cronstream.consumers.executors.setup import ExecutorSetup
from cronstream.schemas.events import Target
from cronstream.schemas.policy import TenantPolicy
from cronstream.schemas.redact import secret_name, sensitive
from cronstream.schemas.targets.http import connect_allowed, embedded_ipv4
from cronstream.schemas.tenancy import OPERATORS

MAX_REDIRECTS = 5
RETRIABLE_STATUS = frozenset({408, 425, 429})
BODY_CAP = 64 * 1024  # bytes of a response body read at most
MIN_CONNECTIONS = 100  # idle connections kept alive at least; more for a wider worker
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
# What a URL's path and query may carry as they are; anything else is percent-encoded.
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = _PATH_SAFE + "?"


def executor(setup: ExecutorSetup) -> HttpExecutor:
    """The worker's http executor (declared by ``schemas.targets.http``)."""
    config = setup.config
    return HttpExecutor(
        allow=config.http_allow,
        secrets=Secrets(config.secrets_dir),
        policy=setup.policy,
        connections=config.concurrency,
    )


class HttpExecutor:
    kind = "http"

    def __init__(
        self,
        *,
        allow: Iterable[str] = (),
        secrets: Secrets | None = None,
        policy: Callable[[], TenantPolicy] = TenantPolicy,
        connections: int = 0,
    ) -> None:
        """``allow``: networks (CIDR) operators' jobs may call although not public;
        ``secrets``: where ``secret:NAME`` header values are resolved; ``policy``: the
        tenants' grants now (a tenant's job may call a private address only by its own
        grant, never by ``allow``); ``connections``: the calls that may be in flight at
        once (the pool keeps as many alive when idle, at least ``MIN_CONNECTIONS``)."""
        self.secrets = secrets or Secrets()
        self.policy = policy
        self.allow: tuple[Network, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allow
        )
        wide = max(MIN_CONNECTIONS, connections)
        self.pool = Pool(ssl.create_default_context(), wide)
        self.runner: LoopThread[Any] = LoopThread("http")
        # Name lookups block a thread each (a name server that does not answer holds its
        # thread for seconds): never the loop's, nor fewer than the calls at once.
        self._resolver = ThreadPoolExecutor(wide, thread_name_prefix="http-dns")

    def close(self) -> None:
        self.runner.call(self._close_pool(), timeout=5)
        self.runner.close()
        self._resolver.shutdown(wait=False, cancel_futures=True)

    async def _close_pool(self) -> None:
        self.pool.close()

    def check_address(
        self, address: str | IP, *, host: str = "", port: int = 0, tenant: str = OPERATORS
    ) -> None:
        """Raise TargetInvalid unless ``address`` (resolved from ``host``) may be called
        on ``port`` by a job of ``tenant``."""
        ip = address if isinstance(address, IP) else ipaddress.ip_address(address)
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

    async def _address(self, where: Destination, tenant: str) -> str:
        """The first address ``where``'s host resolves to, every one of them checked
        for ``tenant``; TargetInvalid when one is not allowed."""
        host, port = where.host, where.port
        try:  # on threads of the executor's own, as many as calls at once (libuv has 4)
            infos = await asyncio.get_running_loop().run_in_executor(
                self._resolver, partial(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
            )
        except socket.gaierror as exc:
            raise ExecutionFailed(f"cannot resolve {host!r}: {exc}") from exc
        addresses = sorted({str(info[4][0]) for info in infos})
        for address in addresses:
            self.check_address(address, host=host, port=port, tenant=tenant)
        return addresses[0]

    # -- running attempts ---------------------------------------------------------------
    def destination(self, target: Target, run_id: str) -> str | None:
        """The URL's origin (``consumers.executors.base.Destined``): a server that stops
        answering holds only its own runs' slots. None for a URL that is no usable one
        (the attempt says why)."""
        return _origin(target.url or "")

    def start(self, token: Any, target: Target, context: RunContext, done: Finished) -> bool:
        """Begin the attempt on the event loop; ``(token, output, error)`` goes on
        ``done`` when it ends (``consumers.executors.eventloop``)."""
        self.runner.submit(token, self._attempt(target, context), done)
        return True

    def execute(self, target: Target, context: RunContext) -> Output | None:
        """The attempt, waited for by the calling thread."""
        return self.runner.call(self._attempt(target, context))

    async def _attempt(self, target: Target, context: RunContext) -> Output | None:
        if context.cancelled.is_set():
            raise Cancelled("cancelled before it started")
        remaining = context.remaining()
        if remaining <= 0:
            raise TimedOut("timed out before it started")
        try:
            async with asyncio.timeout(remaining):
                return await self._call(target, context)
        except TimeoutError as exc:
            raise TimedOut(f"{target.url} timed out after {remaining:.1f} s") from exc

    async def _call(self, target: Target, context: RunContext) -> Output | None:
        url = target.url or ""
        if "@" in urlsplit(url).netloc:
            raise TargetInvalid(
                "credentials in the URL are not sent (they would travel in every run "
                "request): use a header such as Authorization: secret:NAME"
            )
        method = target.method or "POST"
        body = (context.payload or "").encode() if method not in ("GET", "DELETE") else b""
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
        where = _destination(url)
        for _ in range(MAX_REDIRECTS + 1):
            response = await self._send(method, where, headers, body, context)
            if response.status in (301, 302, 303, 307, 308) and response.location is not None:
                target_url = _redirected(url, response.location)
                following = _destination(target_url)
                if response.status == 303:
                    method, body = "GET", b""
                if following.origin != where.origin:
                    # Credentials and the payload are for the origin the job named.
                    headers = {k: v for k, v in headers.items() if k not in credentials}
                    if body:
                        await self._address(following, context.tenant)  # a refusal says so first
                        raise PermanentFailure(
                            f"{url} redirects to another origin ({following.origin}): "
                            "the payload is not sent there"
                        )
                url, where = target_url, following
                continue
            return _judge(response.status, _output(response), url)
        raise PermanentFailure(f"more than {MAX_REDIRECTS} redirects from {target.url}")

    async def _send(
        self,
        method: str,
        where: Destination,
        headers: dict[str, str],
        body: bytes,
        context: RunContext,
    ) -> Response:
        """The response, with at most BODY_CAP bytes of its body."""
        try:
            head = request_head(method, where.target, where.netloc, headers, len(body))
        except ValueError as exc:  # a header that would split the request
            raise TargetInvalid(str(exc)) from exc
        request, head_only = head + body, method == "HEAD"
        try:
            kept = self._kept(where, context.tenant)
            if kept is not None:
                try:
                    return await kept.send(request, cap=BODY_CAP, head_only=head_only)
                except Unanswered:
                    pass  # closed by the server as idle as the request went: once more, anew
            address = await self._address(where, context.tenant)
            conn = await self.pool.connect(where.origin, address, server_name=where.host)
            return await conn.send(request, cap=BODY_CAP, head_only=head_only)
        except (OSError, WireError) as exc:
            raise ExecutionFailed(f"{method} {where.url} failed: {exc!r}") from exc

    def _kept(self, where: Destination, tenant: str) -> Connection | None:
        """A kept-alive connection to ``where``'s origin, its address allowed to
        ``tenant`` now (refused: it goes back to the pool, and TargetInvalid)."""
        kept = self.pool.take(where.origin)
        if kept is not None:
            try:
                self.check_address(kept.ip, host=where.host, port=where.port, tenant=tenant)
            except TargetInvalid:
                self.pool.give_back(kept)
                raise
        return kept


class Destination(NamedTuple):
    """An http(s) URL taken apart once for a call (and once for each redirect)."""

    url: str
    scheme: str
    host: str  # lower case, as the pool and the grants compare it
    port: int
    netloc: str  # the Host header: as the URL wrote it, without credentials
    target: str  # the request target: path and query, percent-encoded

    @property
    def origin(self) -> tuple[str, str, int]:
        """(scheme, host, port): what a redirect may not leave with credentials, and
        what a kept connection serves (``http_wire.Key``)."""
        return self.scheme, self.host, self.port


@lru_cache(maxsize=4096)
def _origin(url: str) -> str | None:
    """``scheme://host:port`` of ``url`` (``Destination.origin``), or None when it is no
    usable http(s) URL."""
    try:
        scheme, host, port = _destination(url).origin
    except TargetInvalid:
        return None
    return f"{scheme}://{host}:{port}"


def _destination(url: str) -> Destination:
    """``url`` taken apart; TargetInvalid when it is not a usable http(s) URL."""
    try:  # a bad port or host (also from a redirect's Location) is the target's fault
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL")
        host = parts.hostname
        host.encode("idna")  # a label over 63 characters: UnicodeError (a ValueError)
        if any(c <= " " or c == "\x7f" for c in parts.netloc):
            raise ValueError("a control character or a space in its host")
    except ValueError as exc:
        raise TargetInvalid(f"{url!r} is not a usable http(s) URL: {exc}") from exc
    netloc = parts.netloc.rpartition("@")[2]
    return Destination(url, parts.scheme, host, port, netloc, _request_target(parts))


def _redirected(url: str, location: str) -> str:
    """Where a redirect's Location leads from ``url``; ExecutionFailed when it names no
    usable URL (the target's answer is wrong: another attempt may get a better one)."""
    target = urljoin(url, location)
    try:
        urlsplit(target).port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise ExecutionFailed(f"Invalid URL in location header: {exc}") from exc
    return target


def _request_target(parts: SplitResult) -> str:
    target = quote(parts.path or "/", safe=_PATH_SAFE)
    return f"{target}?{quote(parts.query, safe=_QUERY_SAFE)}" if parts.query else target


def _output(response: Response) -> Output:
    """The body read (``dropped``: there was more, not read)."""
    return Output(bytes(response.body), dropped="end" if response.dropped else None)


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


def _content_type(payload: str) -> str:
    try:
        json.loads(payload)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"
