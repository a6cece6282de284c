"""The faults of the 3-node cluster (``python -m tests.chaos --cluster``, and
``tests/integration/test_cluster.py``): a broker, the active controller or a Cassandra
node killed (kill -9) and left down while the load runs, a rolling restart of the
three brokers; and on the hosts of ``infra.hosts`` (each node in a network namespace of
its own): a runs partition's leader, a scheduler or a Cassandra node cut off, a broker
frozen (SIGSTOP), a broker's link lossy and narrow, or slow (200 ms) and lossy. Each
scenario's ``restore`` starts what it left down, after the measurement, so the next
scenario finds the whole cluster."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from functools import partial

from cronstream.infra import hosts
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.settings import Settings, node_name
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.chaos import link_delay, stack
from tests.chaos.load import Pipeline, say
from tests.chaos.scenarios import Fault, Scenario

BROKERS = tuple(node_name("kafka", n) for n in (1, 2, 3))


def under_replicated(settings: Settings) -> int:
    """Partitions of the cluster whose in-sync replicas are fewer than their replicas
    (-1 while the metadata does not answer)."""
    try:
        md = kafka_admin(settings, superuser=True, log_level=0).list_topics(timeout=5)
    except Exception:
        return -1
    return sum(
        1
        for topic in md.topics.values()
        for part in topic.partitions.values()
        if len(part.isrs) < len(part.replicas) or part.leader < 0
    )


def active_controller(settings: Settings) -> str:
    """The broker whose controller leads the quorum: each node's ``quorum-state`` file
    names the leader it knows (the one most nodes name)."""
    votes: dict[int, int] = {}
    for name in BROKERS:
        state = (
            stack.service(settings, name).data / "logs" / "__cluster_metadata-0" / "quorum-state"
        )
        leader = json.loads(state.read_text()).get("leaderId", -1)
        votes[leader] = votes.get(leader, 0) + 1
    return node_name("kafka", max(votes, key=lambda k: votes[k]))


def lose(name: str | Callable[[Settings], str]) -> Fault:
    """kill -9 the node ``name`` (or the one a function picks) and leave it down."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        node = name if isinstance(name, str) else name(settings)
        t = time.time()
        say(f"kill -9 {node}; left down")
        stack.kill9(stack.service(settings, node))
        LEFT_DOWN.append(node)
        return t, t

    return fault


LEFT_DOWN: list[str] = []


def restore(settings: Settings) -> None:
    """Start the nodes a scenario left down; wait until no partition is
    under-replicated."""
    while LEFT_DOWN:
        node = LEFT_DOWN.pop()
        say(f"restarting {node} (left down by the scenario)")
        stack.start(stack.service(settings, node), timeout=300)
    wait_replicated(settings)


def wait_replicated(settings: Settings, timeout: float = 180) -> float:
    began = time.monotonic()
    while under_replicated(settings) != 0:
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"partitions still under-replicated after {timeout:.0f} s")
        time.sleep(1)
    return time.monotonic() - began


def rolling_restart(_p: Pipeline, settings: Settings) -> tuple[float, float]:
    """Each broker in turn: stopped (SIGTERM: a controlled shutdown moves its
    leadership first), started, and the next only once no partition is
    under-replicated (the upgrade path)."""
    t = time.time()
    for name in BROKERS:
        svc = stack.service(settings, name)
        say(f"rolling restart: stopping {name}")
        svc.stop()
        took = stack.start(svc, timeout=300)
        waited = wait_replicated(settings)
        say(f"{name} back in {took:.1f} s, in sync {waited:.1f} s later")
    return t, time.time()


def runs_leader(settings: Settings) -> str:
    """The broker leading partition 0 of the normal-priority runs topic."""
    topic = Topics(settings).runs(Priority.NORMAL)
    md = kafka_admin(settings, superuser=True, log_level=0).list_topics(topic, timeout=10)
    return node_name("kafka", md.topics[topic].partitions[0].leader)


def _host(settings: Settings, node: str) -> hosts.Host:
    host = stack.service(settings, node).net_host
    if host is None:
        raise RuntimeError(
            "a link fault needs the nodes on hosts of their own (CRONSTREAM_NETNS=1)"
        )
    return host


def _during(
    seconds: float, begin: Callable[[], None], end: Callable[[], None], said: tuple[str, str]
) -> tuple[float, float]:
    """A fault held for ``seconds``: ``begin``, the wait, ``end`` (whatever happens, a
    ``begin`` that failed halfway included: the next scenarios find the link clear);
    ``said`` when it begins and when it ends. Returns (its start, its end)."""
    t = time.time()
    say(said[0])
    try:
        begin()
        time.sleep(seconds)
    finally:
        end()
    say(said[1])
    return t, time.time()


def _cut(label: str, host: hosts.Host, seconds: float) -> tuple[float, float]:
    said = (f"{label} cut off (its link down) for {seconds:.0f} s", f"{label} healed")
    return _during(seconds, partial(hosts.cut, host), partial(hosts.heal, host), said)


def isolate(name: str | Callable[[Settings], str], seconds: float = 30.0) -> Fault:
    """``name``'s host (or the one a function picks) cut from every other host and
    every client (its link down) for ``seconds``, then healed."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        node = name if isinstance(name, str) else name(settings)
        return _cut(node, _host(settings, node), seconds)

    return fault


def freeze(name: str, seconds: float = 30.0) -> Fault:
    """``name``'s process frozen (SIGSTOP) for ``seconds``, as a long GC pause, then
    SIGCONT."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        pid = stack.service(settings, name).pid()
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        group = os.getpgid(pid)
        said = (f"{name} frozen (SIGSTOP) for {seconds:.0f} s", f"{name} thawed (SIGCONT)")
        stop, cont = (partial(os.killpg, group, sig) for sig in (signal.SIGSTOP, signal.SIGCONT))
        return _during(seconds, stop, cont, said)

    return fault


def bad_link(name: str, loss_pct: float, rate_kbit: int, seconds: float = 60.0) -> Fault:
    """``name``'s host on a bad link for ``seconds``: ``loss_pct`` of its packets lost each
    way and its bandwidth held to ``rate_kbit`` (``hosts.degrade``; this kernel has no
    netem, so no fixed added delay)."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        host = _host(settings, name)
        said = (
            f"{name}: {loss_pct:g} % of packets lost each way, {rate_kbit} kbit/s, {seconds:.0f} s",
            f"{name}: link clear",
        )
        bad = partial(hosts.degrade, host, loss_pct, rate_kbit)
        return _during(seconds, bad, partial(hosts.restore, host), said)

    return fault


def slow_link(name: str, delay_ms: int, loss_pct: float, seconds: float = 60.0) -> Fault:
    """``name``'s host on a slow, lossy link for ``seconds``: every packet it sends held
    ``delay_ms`` (``tests.chaos.link_delay`` on ``hosts.hold``'s queue: each round trip
    with it ``delay_ms`` longer) and ``loss_pct`` of its packets lost each way."""

    def fault(_p: Pipeline, settings: Settings) -> tuple[float, float]:
        host = _host(settings, name)
        delayer = link_delay.Delayer(host, delay_ms)
        said = (
            f"{name}: every packet it sends held {delay_ms} ms, {loss_pct:g} % lost each way, "
            f"{seconds:.0f} s",
            f"{name}: link clear",
        )

        def begin() -> None:
            delayer.start()
            hosts.lossy(host, loss_pct)
            hosts.hold(host, delayer.queue)

        def end() -> None:
            hosts.restore(host)
            if delayer.started:
                say(f"{name}'s delay: {delayer.stop()}")

        return _during(seconds, begin, end, said)

    return fault


def on_a_host(member: str, number: int) -> Callable[[Pipeline, Settings], None]:
    """A scenario's ``prepare``: ``member`` (``s1``) on a host of its own."""

    def prepare(p: Pipeline, _settings: Settings) -> None:
        p.hosted[member] = hosts.role_host(f"chaos-{member}", number)

    return prepare


def cut_member(member: str, seconds: float = 30.0) -> Fault:
    """``member``'s host (``on_a_host``) cut from the brokers and everything else for
    ``seconds``: it goes on believing it owns its partitions (a zombie) until it hears
    otherwise; then healed."""

    def fault(p: Pipeline, _settings: Settings) -> tuple[float, float]:
        host = p.members[member].host
        if host is None:
            raise RuntimeError(f"{member} is not on a host of its own: prepare with on_a_host")
        return _cut(member, host, seconds)

    return fault


def clock_ahead(member: str, offset_s: int = 30, seconds: float = 60.0) -> Fault:
    """``member`` (a scheduler) restarted with its wall clock ``offset_s`` ahead
    (``tests.chaos.shifted_clock``) for ``seconds``, then restarted on the true clock. It
    fires what is due by its clock: every run ``offset_s`` early, each with its due time,
    which the workers hold until due by theirs (docs/guarantees.md, "Clocks")."""

    def fault(p: Pipeline, _settings: Settings) -> tuple[float, float]:
        said = (
            f"{member} restarted with its clock {offset_s} s ahead for {seconds:.0f} s",
            f"{member} restarted on the true clock",
        )
        begin = partial(p.members[member].restart_clean, float(offset_s))
        return _during(seconds, begin, partial(p.members[member].restart_clean, None), said)

    return fault


def settle_replicas(settings: Settings) -> None:
    """After a link or pause fault: wait until every partition is in sync again."""
    wait_replicated(settings)


CLUSTER_SCENARIOS = [
    Scenario("broker-loss", "one broker kill -9, left down", lose("kafka-2"), restore=restore),
    Scenario(
        "controller-loss",
        "the active controller's node kill -9, left down",
        lose(active_controller),
        restore=restore,
    ),
    Scenario("rolling-restart", "the three brokers restarted one at a time", rolling_restart),
    Scenario(
        "cassandra-node-loss",
        "one Cassandra node kill -9, left down",
        lose("cassandra-2"),
        restore=restore,
    ),
    Scenario(
        "leader-isolated",
        "the leader of a runs partition cut from the other brokers and every client, 30 s",
        isolate(runs_leader),
        restore=settle_replicas,
    ),
    Scenario(
        "broker-frozen",
        "one broker frozen (SIGSTOP) for 30 s, a long GC pause",
        freeze("kafka-2"),
        restore=settle_replicas,
    ),
    Scenario(
        "broker-bad-link",
        "one broker's link losing 5 % of packets each way and held to 8 Mbit/s, 60 s",
        bad_link("kafka-2", 5.0, 8000),
        restore=settle_replicas,
    ),
    Scenario(
        "broker-slow-link",
        "one broker's packets held 200 ms and 5 % lost each way, 60 s",
        slow_link("kafka-2", 200, 5.0),
        restore=settle_replicas,
    ),
    Scenario(
        "scheduler-cut-off",
        "a scheduler cut off from the brokers for 30 s, then healed (a zombie)",
        cut_member("s1"),
        prepare=on_a_host("s1", 1),
    ),
    Scenario(
        "scheduler-clock-ahead",
        "a scheduler's wall clock 30 s ahead for 60 s",
        clock_ahead("s1"),
    ),
    Scenario(
        "worker-cut-off",
        "a worker cut off from the brokers and its target for 30 s mid-run, then healed",
        cut_member("w1"),
        prepare=on_a_host("w1", 2),
    ),
    Scenario(
        "cassandra-isolated",
        "one Cassandra node cut off for 30 s",
        isolate("cassandra-2"),
    ),
]
