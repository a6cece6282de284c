"""Bring the whole local stack up or down, and report on it.

``up`` is idempotent: services already running and ready are left alone, so a warm
``make up`` costs a few probes. Readiness is polled with a per-service timeout; a service
that dies while starting fails the call with the tail of its log.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from cronstream.infra.cassandra_node import Cassandra
from cronstream.infra.errors import StackError
from cronstream.infra.growth import check_shape, grow, upgrade_static
from cronstream.infra.service import Service, log_tail
from cronstream.infra.services import Kafka, all_services
from cronstream.runtime.settings import Settings


def _say(msg: str) -> None:
    print(f"[stack] {msg}", file=sys.stderr, flush=True)


START_ATTEMPTS = 3  # starts of a service that exits during startup before giving up


def fetch(settings: Settings, say: Callable[[str], None] = _say) -> None:
    for svc in all_services(settings):
        say(f"fetching {svc.name} (cached after the first time)")
        svc.fetch()


def _start(settings: Settings, say: Callable[[str], None], *, bootstrapped: bool) -> list[Service]:
    """Start the services of this phase that are not running; those to wait for."""
    services = [s for s in all_services(settings) if s.after_bootstrap == bootstrapped]
    if not bootstrapped:
        fetch(settings, say)
        check_shape(settings)
        upgrade_static(settings, say)  # an old static quorum about to grow
    waiting: list[Service] = []
    for svc in services:
        if svc.after is not None and not svc.running():
            waiting.append(svc)  # started by up() once its predecessor answers
            continue
        if svc.running():
            if svc.ready():
                say(f"{svc.name} already up at {svc.endpoint}")
                continue
            say(f"{svc.name} process is running but not ready yet; waiting")
        else:
            say(f"starting {svc.name} (log: {svc.log})")
            svc.start()
        waiting.append(svc)
    return waiting


def up(
    settings: Settings, say: Callable[[str], None] = _say, *, bootstrapped: bool = False
) -> float:
    """Start every service that is not running and wait until all are ready: those
    that need the bootstrap (``Service.after_bootstrap``) when ``bootstrapped``, the
    others when not.

    Brokers added to a stack with data (``make up NODES=3`` after ``make up``) are made
    controller voters (``infra.growth.grow``); the bootstrap then gives every topic and
    the keyspace their copies on them (``infra.growth``).

    Returns the seconds spent. Raises StackError with advice when something fails.
    """
    began = time.monotonic()
    waiting = _start(settings, say, bootstrapped=bootstrapped)
    deadlines = {svc.name: time.monotonic() + svc.start_timeout for svc in waiting}
    starts = dict.fromkeys(deadlines, 1)
    held = {svc.name for svc in waiting if svc.after is not None and not svc.running()}
    while waiting:
        for svc in list(waiting):
            if svc.name in held:
                if svc.after not in {w.name for w in waiting}:  # its predecessor answers
                    say(f"starting {svc.name} (log: {svc.log})")
                    held.discard(svc.name)
                    svc.start()
                    deadlines[svc.name] = time.monotonic() + svc.start_timeout
                continue
            if not svc.running() and starts[svc.name] < START_ATTEMPTS:
                # Seen under heavy load: the registry's H2 store took longer to open than
                # its connection pool waits, and the registry exited. Another start opens
                # the same store; a service that keeps exiting is reported below.
                say(
                    f"{svc.name} exited during startup; starting it again "
                    f"(attempt {starts[svc.name] + 1} of {START_ATTEMPTS})"
                )
                starts[svc.name] += 1
                svc.start()
                deadlines[svc.name] = time.monotonic() + svc.start_timeout
                continue
            svc.check_alive()
            if svc.ready():
                say(f"{svc.name} ready at {svc.endpoint}")
                waiting.remove(svc)
            elif time.monotonic() > deadlines[svc.name]:
                raise StackError(
                    f"{svc.name} did not become ready within {svc.start_timeout:.0f}s. "
                    f"It is still running (pid {svc.pid()}); 'make logs' or {svc.log} "
                    f"tells why. Last lines:\n{log_tail(svc.log)}"
                )
        if waiting:
            time.sleep(0.5)
    if not bootstrapped:
        grow(settings, say)  # a broker added to the stack joins the controller quorum
    return time.monotonic() - began


def restart(settings: Settings, names: list[str], say: Callable[[str], None] = _say) -> float:
    """Stop the services ``names`` and start them again, their config written anew (a
    changed login, certificate or setting): ``up`` leaves a running service alone.
    Returns the seconds spent."""
    known = {svc.name: svc for svc in all_services(settings)}
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise StackError(f"no service {', '.join(unknown)} (the services: {', '.join(known)})")
    for name in names:
        say(f"stopping {name}")
        known[name].stop()
    return up(settings, say) + up(settings, say, bootstrapped=True)


NODE_SERVICES: dict[str, type[Kafka] | type[Cassandra]] = {"kafka": Kafka, "cassandra": Cassandra}


def nodes_started(settings: Settings) -> int:
    """The most Kafka or Cassandra nodes running, by their pid files in the stack's
    ``run/`` (``kafka-3.pid``: a third node), at least ``settings.nodes``."""
    most = settings.nodes
    for pidfile in (settings.home / "run").glob("*-*.pid"):
        service, _, node = pidfile.stem.rpartition("-")
        if service not in NODE_SERVICES or not node.isdigit() or int(node) <= most:
            continue
        # only a node that runs (a stale pid file, left by a crash, is removed)
        if NODE_SERVICES[service](replace(settings, nodes=int(node)), int(node)).running():
            most = int(node)
    return most


def started_services(settings: Settings) -> list[Service]:
    """``all_services`` with every node that runs (``nodes_started``), whatever
    ``o.NODES`` says now."""
    return all_services(replace(settings, nodes=nodes_started(settings)))


def down(settings: Settings, say: Callable[[str], None] = _say) -> None:
    """Stop every service that runs (``started_services``): a stack started with
    ``NODES=3`` and stopped without it stops its nodes 2 and 3 too (they went on
    running, seeded to the single node that came up next)."""
    # Reverse order: the registry and Kafka clients go before Cassandra. The nodes of
    # one service stop together: the last of three brokers stopped alone waited for a
    # controller quorum that was gone, until it was killed 45 s later.
    for _, group in itertools.groupby(reversed(started_services(settings)), key=type):
        running = [svc for svc in group if svc.running()]
        for svc in running:
            say(f"stopping {svc.name}")
        with ThreadPoolExecutor(max(1, len(running))) as pool:
            list(pool.map(lambda svc: svc.stop(), running))
    say("stack stopped")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceStatus:
    name: str
    running: bool
    ok: bool
    endpoint: str
    pid: int | None
    rss_bytes: int | None


def status(settings: Settings) -> list[ServiceStatus]:
    """One line per service, every node that runs included (``started_services``)."""
    result = []
    for svc in started_services(settings):
        pid = svc.pid()
        result.append(
            ServiceStatus(
                name=svc.name,
                running=pid is not None,
                ok=svc.ready(),
                endpoint=svc.endpoint,
                pid=pid,
                rss_bytes=svc.rss_bytes(),
            )
        )
    return result


def logs(settings: Settings, lines: int = 40) -> str:
    parts = []
    for svc in all_services(settings):
        parts.append(f"==== {svc.name}: {svc.log}\n{log_tail(svc.log, lines)}")
    return "\n\n".join(parts)


def clean(settings: Settings, *, keep_lib: bool = True, say: Callable[[str], None] = _say) -> None:
    """Stop everything and delete data, logs and config (jars stay unless keep_lib=False)."""
    down(settings, say)
    home = settings.home
    for sub in ("data", "logs", "run", "conf", *(() if keep_lib else ("lib",))):
        target = home / sub
        if target.exists():
            say(f"removing {target}")
            shutil.rmtree(target)


__all__ = ["ServiceStatus", "clean", "down", "fetch", "logs", "restart", "status", "up"]
