"""The ``http`` target type: a call of ``url`` with ``method``, ``headers`` and the
payload as body (the executor: ``consumers.executors.http``).

Its tenants' rule: a tenant may call public addresses, that is a URL whose host is a DNS
name or an IP literal that is a public unicast address (a name is judged again by the
worker against the address it actually connects to: ``connect_allowed``). An operator's
grant ``http=HOST[:PORT]`` lets it call a host that is not public: an IP address, a
network in CIDR form or a DNS name, on that port only when a port is given
(``127.0.0.1:8787``, ``10.0.0.0/8``, ``[fd00::/8]:443``, ``billing.internal:8443``).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlparse, urlsplit

from cronstream.schemas.events import Target
from cronstream.schemas.redact import redact_url
from cronstream.schemas.targets import TargetType

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Names that never resolve to a public address (besides single labels like "localhost")
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")
# NAT64 (RFC 6052 well-known prefix): the last 32 bits are the IPv4 address reached.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def problems(target: Target) -> list[str]:
    if not target.url:
        return ["target http needs a url"]
    try:  # urlparse refuses some hosts ('http://[zz]/'), .port a bad port
        parsed = urlparse(target.url)
        _ = parsed.port
    except ValueError as exc:
        return [f"url {redact_url(target.url)[:200]!r} is not a usable URL: {exc}"]
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return [f"url {redact_url(target.url)!r} is not an http(s) URL"]
    if "@" in parsed.netloc:
        return [
            "url holds credentials (user:password@), which would travel in every "
            "run request and are never sent: use a header such as "
            "'Authorization: secret:NAME' resolved by the workers"
        ]
    if target.method not in METHODS:
        return [f"http method {target.method!r} is not GET, POST, PUT, PATCH or DELETE"]
    return []


@dataclass(frozen=True, slots=True)
class HttpGrant:
    """A host that is not public which a tenant's http targets may call."""

    network: IPNetwork | None  # an address or network; None: ``name`` is a DNS name
    name: str | None
    port: int | None  # None: any port

    def covers(self, host: str, ip: IPAddress | None, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.network is not None:
            return ip is not None and ip.version == self.network.version and ip in self.network
        return host.lower().rstrip(".") == self.name


def http_grant(value: str) -> HttpGrant:
    host, port = value, None
    if value.startswith("["):  # [v6 or v6 network]:port
        inner, _, after = value[1:].partition("]")
        host = inner
        if after:
            port = _port(value, after.removeprefix(":"))
    elif value.count(":") == 1:  # v4, v4 network or a name, with a port
        host, _, given = value.partition(":")
        port = _port(value, given)
    try:
        return HttpGrant(ipaddress.ip_network(host, strict=False), None, port)
    except ValueError:
        pass
    name = host.lower().rstrip(".")
    if not name or not all(part and part.replace("-", "").isalnum() for part in name.split(".")):
        raise ValueError(
            f"http grant {value!r}: {host!r} is neither an address, a network nor a host name"
        )
    return HttpGrant(None, name, port)


def _port(value: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"http grant {value!r}: port {text!r} is not 1-65535")
    return int(text)


def why_not(
    _tenant: str, _job_id: str, target: Target, grants: tuple[HttpGrant, ...]
) -> str | None:
    url = target.url or ""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return f"url {url[:200]!r} is not a usable http(s) URL"
    port = port or (443 if parts.scheme == "https" else 80)
    ip = host_address(host)
    if ip is not None:
        if connect_allowed(grants, host, ip, port):
            return None
        return f"{ip} port {port} is not a public address"
    name = host.lower().rstrip(".")
    if name.endswith(LOCAL_SUFFIXES) or "." not in name:
        if any(g.covers(name, None, port) for g in grants):
            return None
        return f"host {name[:100]!r} port {port} is not a public host name"
    return None


def connect_allowed(grants: tuple[HttpGrant, ...], host: str, ip: IPAddress, port: int) -> bool:
    """Whether a tenant with ``grants`` may connect to ``ip`` (resolved from the URL's
    ``host``) on ``port``: a public address, or one a grant covers."""
    return public(ip) or any(g.covers(host, ip, port) for g in grants)


def public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address, judged by the IPv4 address it reaches
    when it is a translation of one."""
    reached = embedded_ipv4(ip) or ip
    return reached.is_global and not reached.is_multicast


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through a translation (IPv4-mapped, NAT64,
    6to4, Teredo's client), or None."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    teredo = ip.teredo
    return ip.ipv4_mapped or ip.sixtofour or (teredo[1] if teredo else None)


def host_address(host: str) -> IPAddress | None:
    """The address a URL's host names literally, or None for a DNS name. Also the forms
    the C resolver reads as IPv4 (``127.1``, ``0x7f.0.0.1``, ``2130706433``): a worker
    would connect to them as addresses, so they are judged as addresses."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except (OSError, ValueError):
        return None


TARGET = TargetType(
    name="http",
    problems=problems,
    policy=why_not,
    grant=http_grant,
    executor="cronstream.consumers.executors.http:executor",
)
