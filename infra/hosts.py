"""Hosts you can cut apart: the 3-node stack with ``o.NETNS`` set runs each broker
and each Cassandra node in a Linux network namespace of its own (``cs-kafka-2``), joined
to the machine by a veth pair whose machine end is on one bridge (``csbr0``, the machine
at ``10.89.0.1``; brokers at ``.11``-``.13``, Cassandra nodes at ``.21``-``.23``:
``runtime.settings.kafka_node_host``; a chaos scenario's cut-off role at ``.41``-``.49``;
the schema registry listens on the machine's address, which every host reaches). A
fault then acts on a host's link, as a real
network does, not only on its process:

- ``cut(host)``: its link down: nothing in or out (a partition of that host from every
  other host and every client); ``heal(host)`` brings it back;
- ``degrade(host, loss_pct, rate_kbit)``: a share of its packets lost each way
  (nftables) and its bandwidth held (a token bucket, ``tc tbf``), ``restore(host)``
  after;
- ``lossy(host, loss_pct)`` and ``hold(host, queue)``: the loss alone, and every packet
  leaving the host handed to a program in its namespace that releases it later (a
  netfilter queue, ``iptables -j NFQUEUE``): the kernel here has no ``netem``, so a
  fixed added delay is made in user space (``tests.chaos.link_delay``).

Only the project's own test hosts are made and addressed here: namespaces named
``cs-*`` and links named ``csv-*`` on the bridge ``csbr0``. It needs root (sessions and
CI run as root), iproute2 (``ip``, ``tc``), nftables (``nft``) and, for ``hold``,
iptables. ``make run`` keeps
its loopback shape.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from cronstream.infra.errors import StackError
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import (
    NETNS_SUBNET,
    cassandra_node_host,
    kafka_node_host,
    node_name,
)

BRIDGE = "csbr0"
GATEWAY = f"{NETNS_SUBNET}.1"  # the machine's own address on the bridge
PREFIX_LEN = 24
NODES = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class Host:
    """One test host: ``name`` (the service's), its address on the bridge."""

    name: str
    address: str

    @property
    def netns(self) -> str:
        return f"cs-{self.name}"

    @property
    def link(self) -> str:
        """The machine's end of its veth pair (at most 15 characters, as Linux wants)."""
        return f"csv-{self.name}"[:15]


def kafka_host(node: int) -> Host:
    return Host(node_name("kafka", node), kafka_node_host(node, netns=True))


def cassandra_host(node: int) -> Host:
    return Host(node_name("cassandra", node), cassandra_node_host(node, netns=True))


# tool -> its package
PACKAGES = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables", "iptables": "iptables"}


def _run(
    command: list[str], *, on: Host | None = None, script: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``command`` (its tool one of ``PACKAGES``) on the machine, or on host ``on``;
    StackError when it fails and ``check``."""
    tool = command[0]
    if shutil.which(tool) is None:
        raise StackError(f"'{tool}' is missing: apt-get install -y {PACKAGES[tool]}")
    words = [*prefix(on), *command] if on is not None else command
    done = subprocess.run(words, input=script, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        where = f" on {on.netns}" if on is not None else ""
        raise StackError(
            f"{' '.join(command)}{where} failed (exit {done.returncode}): "
            f"{done.stderr.strip()}. The hosts of {o.NETNS.env} need root."
        )
    return done


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", *args], check=check)


def _exists(kind: str, name: str) -> bool:
    if kind == "netns":
        return name in _ip("netns", "list").stdout.split()
    return _ip("link", "show", name, check=False).returncode == 0


def role_host(name: str, number: int) -> Host:
    """The host of a cronstream process that a fault cuts off (a chaos scenario's
    scheduler): ``number`` 1-9."""
    if not 1 <= number <= 9:
        raise ValueError(f"role host number {number}: use 1-9")
    return Host(name, f"{NETNS_SUBNET}.{40 + number}")


def ensure_bridge() -> None:
    """The bridge, with the machine's address on it (made when missing)."""
    if not _exists("link", BRIDGE):
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/{PREFIX_LEN}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


# ``ip netns exec NAME`` mounts /etc/netns/NAME/<file> over /etc/<file>: each host gets a
# hosts file naming every test host, and a resolver that answers nothing at once. The
# machine's name server is not reachable from a host, and a broker looks up the name of
# each client's address (TLS): with the machine's resolv.conf a client's TLS handshake
# took 10 s (two 5 s time-outs) and every client gave up.
ETC_NETNS = Path("/etc/netns")
RESOLV_CONF = (
    "# made by infra/hosts.py: no name server\nnameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
)


def _etc(host: Host) -> None:
    names = [Host("machine", GATEWAY), *map(kafka_host, NODES), *map(cassandra_host, NODES)]
    lines = ["127.0.0.1 localhost", *(f"{h.address} {h.netns}" for h in names)]
    etc = ETC_NETNS / host.netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "hosts").write_text("# made by infra/hosts.py\n" + "\n".join(lines) + "\n")
    (etc / "resolv.conf").write_text(RESOLV_CONF)


def ensure(host: Host) -> None:
    """The bridge, ``host``'s namespace and its link, up (made when missing), and its
    own /etc/hosts and resolv.conf."""
    ensure_bridge()
    _etc(host)
    if not _exists("netns", host.netns):
        _ip("netns", "add", host.netns)
    if not _exists("link", host.link):
        _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        _ip("link", "set", host.link, "master", BRIDGE)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", "eth0")
    _ip("-n", host.netns, "link", "set", "lo", "up")
    _ip("-n", host.netns, "link", "set", "eth0", "up")
    _ip("link", "set", host.link, "up")
    routes = _ip("-n", host.netns, "route", "show", "default").stdout
    if GATEWAY not in routes:
        _ip("-n", host.netns, "route", "add", "default", "via", GATEWAY)
    restore(host)  # a fault interrupted before it cleared: a node starts on a clear link


def prefix(host: Host) -> list[str]:
    """The words that run a command on ``host`` (``ip netns exec`` execs: the pid is the
    command's own)."""
    return ["ip", "netns", "exec", host.netns]


def cut(host: Host) -> None:
    """``host``'s link down: every connection to or from it stops answering."""
    _ip("link", "set", host.link, "down")


def heal(host: Host) -> None:
    _ip("link", "set", host.link, "up")


def degrade(host: Host, loss_pct: float, rate_kbit: int) -> None:
    """A bad link to and from ``host``: ``loss_pct`` of its packets lost each way (an
    nftables rule in its namespace) and its bandwidth held to ``rate_kbit`` each way (a
    token bucket on both ends: what queues behind it waits). This machine's kernel has no
    ``netem`` (CONFIG_NET_SCH_NETEM is not set): a fixed added delay is ``hold``'s."""
    lossy(host, loss_pct)
    bucket = ["tbf", "rate", f"{rate_kbit}kbit", "burst", "32kbit", "latency", "2s"]
    for device, on in _ends(host):
        _run(["tc", "qdisc", "replace", "dev", device, "root", *bucket], on=on)


def lossy(host: Host, loss_pct: float) -> None:
    """``loss_pct`` of the packets to and from ``host`` lost (an nftables rule in its
    namespace, each packet drawn at random)."""
    per_mille = round(loss_pct * 10)
    drawn = "" if per_mille >= 1000 else f"numgen random mod 1000 < {per_mille} "
    rules = [
        "add table inet cschaos",
        *(
            f"add chain inet cschaos {hook} {{ type filter hook {hook} priority 0; }}"
            for hook in ("input", "output")
        ),
        *(f"add rule inet cschaos {hook} {drawn}drop" for hook in ("input", "output")),
    ]
    _run(["nft", "-f", "-"], on=host, script="\n".join(rules))


def hold(host: Host, queue: int) -> None:
    """Every packet leaving ``host`` on its link handed to netfilter queue ``queue`` in
    its namespace, for the program bound to it there to release (``iptables -j NFQUEUE``:
    this kernel's nftables has no ``queue`` statement, its xtables target does). Bind the
    program first: with none bound the packets pass (``--queue-bypass``)."""
    rule = ["-o", "eth0", "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass"]
    _run(["iptables", "-A", "OUTPUT", *rule], on=host)


def restore(host: Host) -> None:
    """``host``'s link as it was: no loss rule, no queue, no token bucket."""
    _run(["nft", "delete", "table", "inet", "cschaos"], on=host, check=False)
    if shutil.which("iptables") is not None:
        _run(["iptables", "-F", "OUTPUT"], on=host, check=False)
    for device, on in _ends(host):
        _run(["tc", "qdisc", "del", "dev", device, "root"], on=on, check=False)


def _ends(host: Host) -> tuple[tuple[str, Host | None], ...]:
    """``host``'s link as (device, where it is) at each end: the machine's, the host's."""
    return ((host.link, None), ("eth0", host))


def remove(host: Host) -> None:
    """``host``'s namespace and link gone (its processes must be stopped first)."""
    if _exists("link", host.link):
        _ip("link", "del", host.link)
    if _exists("netns", host.netns):
        _ip("netns", "del", host.netns)
    shutil.rmtree(ETC_NETNS / host.netns, ignore_errors=True)
