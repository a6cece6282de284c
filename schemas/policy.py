"""What a tenant's jobs may call: the target policy (issue 31).

The admission applies it to every tenant's definition (a refusal names the rule), and
the worker applies it again to every tenant's run (a definition written some other way,
or a grant withdrawn since, fails the run as an invalid target). Operators' own jobs
(tenant ``default``) are not subject to it: the workers' own flags bound them.

By default a tenant may use

- ``http``/``https`` to public addresses: a URL whose host is a DNS name, or an IP
  literal that is a public unicast address. A name is checked again by the worker
  against the address it actually connects to (``http_allowed``);
- ``kafka`` to its own topics, named ``<tenant>.<anything>``.

Everything else needs an operator's grant for that tenant, one ``KIND=VALUE`` each:

- ``http=HOST[:PORT]``: a host (an IP address, a network in CIDR form, or a DNS name)
  that is not public, on that port only when a port is given (``127.0.0.1:8787``,
  ``10.0.0.0/8``, ``[fd00::/8]:443``, ``billing.internal:8443``);
- ``kafka=PATTERN``: topics matching the glob (``shared.events``, ``reports.*``);
- ``python=ENTRY``: ``module:function``, or a module prefix (``examples.jobs``);
- ``shell=PATTERN``: an argv pattern, in the workers' allowlist language
  (``argv_matches``): ``/opt/jobs/report.sh *``;
- ``flow=PATTERN``: ``flow`` targets of jobs whose own id matches the glob.

Grants are written ``TENANT:KIND=VALUE`` (``cronstream admission --grant``,
``cronstream worker --grant``) or one a line in the policy file (``load_grants``): both
processes must be given the same ones. Python and shell grants never widen the worker's
own ``--python-allow`` / ``--shell-allow``: a run needs both.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from schemas.events import Target

DOTDOT = re.compile(r"(?:^|[/=])\.\.(?:/|\Z)")  # a '..' path segment, also after --opt=
OPERATORS = "default"  # the tenant of operators' own jobs: not bounded by grants
KINDS = ("http", "kafka", "python", "shell", "flow")
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# Names that never resolve to a public address (besides single labels like "localhost")
LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")


class GrantError(ValueError):
    """A grant that cannot be read."""


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


@dataclass(frozen=True, slots=True)
class Grants:
    """One tenant's grants, by kind."""

    http: tuple[HttpGrant, ...] = ()
    kafka: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    shell: tuple[tuple[str, ...], ...] = ()  # argv patterns, split into words
    flow: tuple[str, ...] = ()
    text: tuple[str, ...] = field(default=(), compare=False)  # as written, for messages


def parse_grant(text: str) -> tuple[str, str, str]:
    """``TENANT:KIND=VALUE`` -> (tenant, kind, value); GrantError when malformed."""
    tenant, sep, rest = text.strip().partition(":")
    kind, eq, value = rest.partition("=")
    kind, value = kind.strip(), value.strip()
    if not sep or not eq or not tenant or not value:
        raise GrantError(f"grant {text!r} is not TENANT:KIND=VALUE (e.g. demo:http=127.0.0.1:8787)")
    if kind not in KINDS:
        raise GrantError(f"grant {text!r}: kind {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "http":
        _http_grant(value)  # refused now, not at the first run
    elif kind == "shell":
        _shell_words(value)
    return tenant, kind, value


def _http_grant(value: str) -> HttpGrant:
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
        raise GrantError(
            f"http grant {value!r}: {host!r} is neither an address, a network nor a host name"
        )
    return HttpGrant(None, name, port)


def _port(value: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise GrantError(f"http grant {value!r}: port {text!r} is not 1-65535")
    return int(text)


def _shell_words(pattern: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(pattern))
    except ValueError as exc:
        raise GrantError(f"shell grant {pattern!r}: {exc}") from None
    if not words or "**" in words[:-1]:
        raise GrantError(f"shell grant {pattern!r}: empty, or '**' not last")
    return words


def argv_matches(
    words: tuple[str, ...], argv: list[str], word_matches: Callable[[str, str], bool] | None = None
) -> bool:
    """Whether ``argv`` matches the pattern ``words``: each word matches one argument
    (``word_matches``, by default ``option_glob``), a last word ``**`` any number of
    further arguments that are not options; no argument may hold a ``..`` path segment.
    The workers' shell allowlist uses it with a matcher of real paths."""
    if any(DOTDOT.search(arg) for arg in argv):
        return False
    if words[-1] == "**":
        words = words[:-1]
        if len(argv) < len(words) or any(arg.startswith("-") for arg in argv[len(words) :]):
            return False
        argv = argv[: len(words)]
    return len(words) == len(argv) and all(map(word_matches or option_glob, words, argv))


def option_glob(word: str, arg: str) -> bool:
    """A glob that never lets ``*`` or ``?`` stand for an option: an argument starting
    with ``-`` matches only a word that spells one out."""
    if arg.startswith("-") and not word.startswith("-"):
        return False
    return fnmatchcase(arg, word)


class TenantPolicy:
    """Every tenant's grants; ``problems`` and ``http_allowed`` apply them."""

    def __init__(self, grants: Iterable[str] = ()) -> None:
        found: dict[str, dict[str, list[str]]] = {}
        for text in grants:
            tenant, kind, value = parse_grant(text)
            found.setdefault(tenant, {k: [] for k in KINDS})[kind].append(value)
        self.grants: Mapping[str, Grants] = {
            tenant: Grants(
                http=tuple(_http_grant(v) for v in kinds["http"]),
                kafka=tuple(kinds["kafka"]),
                python=tuple(kinds["python"]),
                shell=tuple(_shell_words(v) for v in kinds["shell"]),
                flow=tuple(kinds["flow"]),
                text=tuple(f"{k}={v}" for k in KINDS for v in kinds[k]),
            )
            for tenant, kinds in found.items()
        }

    def of(self, tenant: str) -> Grants:
        return self.grants.get(tenant, Grants())

    def problems(self, tenant: str, job_id: str, target: Target) -> list[str]:
        """Why ``tenant`` may not use ``target`` for its job ``job_id`` (its stored id),
        empty when it may. Operators' jobs: always empty."""
        if tenant == OPERATORS:
            return []
        grants = self.of(tenant)
        why = _why_not(tenant, job_id, target, grants)
        if why is None:
            return []
        granted = ", ".join(grants.text) or "none"
        return [f"target policy: {why} (grants of tenant {tenant!r}: {granted}; an operator "
                "grants more with --grant TENANT:KIND=VALUE)"]  # fmt: skip

    def http_allowed(self, tenant: str, host: str, ip: IPAddress, port: int) -> bool:
        """Whether ``tenant``'s http target may connect to ``ip`` (resolved from the URL's
        ``host``) on ``port``: a public address, or one a grant covers."""
        return _public(ip) or any(g.covers(host, ip, port) for g in self.of(tenant).http)


def _public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address, judged by the IPv4 address it reaches
    when it is a translation of one."""
    reached = embedded_ipv4(ip) or ip
    return reached.is_global and not reached.is_multicast


# NAT64 (RFC 6052 well-known prefix): the last 32 bits are the IPv4 address reached.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


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


def _why_not(tenant: str, job_id: str, target: Target, grants: Grants) -> str | None:
    check = _CHECKS.get(target.type)
    if check is None:
        return f"target type {target.type[:40]!r} is not granted to the tenant"
    return check(tenant, job_id, target, grants)


def _kafka_why_not(tenant: str, _job_id: str, target: Target, grants: Grants) -> str | None:
    topic = target.topic or ""
    if topic.startswith(f"{tenant}.") or any(fnmatchcase(topic, p) for p in grants.kafka):
        return None
    return f"kafka topic {topic[:200]!r} is not one of the tenant's own ({tenant}.*)"


def _python_why_not(_tenant: str, _job_id: str, target: Target, grants: Grants) -> str | None:
    name = target.callable or ""
    module = name.partition(":")[0]
    if any(g in (name, module) or module.startswith(g + ".") for g in grants.python):
        return None
    return f"python callable {name[:200]!r} is not granted to the tenant"


def _shell_why_not(_tenant: str, _job_id: str, target: Target, grants: Grants) -> str | None:
    try:
        argv = shlex.split(target.command or "")
    except ValueError:
        argv = []
    if argv and any(argv_matches(words, argv) for words in grants.shell):
        return None
    return f"shell command {(target.command or '')[:200]!r} is not granted to the tenant"


def _flow_why_not(_tenant: str, job_id: str, _target: Target, grants: Grants) -> str | None:
    own = job_id.partition("/")[2] or job_id
    if any(fnmatchcase(own, p) for p in grants.flow):
        return None
    return "flow targets are not granted to the tenant"


def _http_why_not(_tenant: str, _job_id: str, target: Target, grants: Grants) -> str | None:
    url = target.url or ""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return f"url {url[:200]!r} is not a usable http(s) URL"
    port = port or (443 if parts.scheme == "https" else 80)
    ip = host_address(host)
    if ip is not None:
        if _public(ip) or any(g.covers(host, ip, port) for g in grants.http):
            return None
        return f"{ip} port {port} is not a public address"
    name = host.lower().rstrip(".")
    if name.endswith(LOCAL_SUFFIXES) or "." not in name:
        if any(g.covers(name, None, port) for g in grants.http):
            return None
        return f"host {name[:100]!r} port {port} is not a public host name"
    return None


_CHECKS: dict[str, Callable[[str, str, Target, Grants], str | None]] = {
    "http": _http_why_not, "kafka": _kafka_why_not, "python": _python_why_not,
    "shell": _shell_why_not, "flow": _flow_why_not,
}  # fmt: skip
