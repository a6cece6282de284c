"""The chaos suite's own stack: Kafka, the registry and Cassandra under their own home
and ports, so killing its broker never touches the stack ``make test`` uses.

Its home is ``.stack/chaos`` (``CRONSTREAM_CHAOS_HOME`` overrides it); every port is
the default plus ``PORT_OFFSET`` (the Kafka controller's: 9196, see ``PORTS``). The jars are not downloaded again: ``lib/`` is a link
to the main stack's (``$CRONSTREAM_HOME/lib``, ``.stack/lib`` by default; fetched there
once when missing). Its processes carry ``-Dcronstream.home=<chaos home>/<service>``,
so ``make down`` of the main stack never stops them, nor the other way round.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cronstream.infra import stack as stack_mod
from cronstream.infra.service import Service
from cronstream.infra.services import all_services
from cronstream.runtime.settings import REPO_ROOT, Settings

PORT_OFFSET = 100
PORTS = {
    "CRONSTREAM_KAFKA_PORT": 9092,
    # 9093 + 100 is the main stack's Alertmanager (9193): the controller takes 9196.
    "CRONSTREAM_KAFKA_CONTROLLER_PORT": 9096,
    "CRONSTREAM_KAFKA_PLAINTEXT_PORT": 9094,
    "CRONSTREAM_KAFKA_ADMIN_PORT": 9095,
    "CRONSTREAM_REGISTRY_PORT": 8081,
    "CRONSTREAM_CASSANDRA_PORT": 9042,
    "CRONSTREAM_CASSANDRA_STORAGE_PORT": 7000,
    "CRONSTREAM_CASSANDRA_JMX_PORT": 7199,
    "CRONSTREAM_PROMETHEUS_PORT": 9190,
    "CRONSTREAM_ALERTMANAGER_PORT": 9193,
    "CRONSTREAM_POSTGRES_PORT": 5442,
    "CRONSTREAM_CONNECT_PORT": 8083,
    "CRONSTREAM_S3_PORT": 9311,
}
# Smaller heaps than the main stack: both may run at once on a small machine.
HEAPS = {
    "CRONSTREAM_KAFKA_HEAP_MB": "768",
    "CRONSTREAM_REGISTRY_HEAP_MB": "384",
    "CRONSTREAM_CASSANDRA_HEAP_MB": "1024",
}


# The 3-node cluster's (CRONSTREAM_NODES=3, tests/integration/test_cluster.py and
# `python -m tests.chaos --cluster`): its own home and ports (+10000: Kafka 19092, 19102,
# 19112 on 10.89.0.11-13; Cassandra 19042 on 10.89.0.21-23: each node in a network
# namespace of its own, infra.hosts), the cluster's own heaps (512 MB a broker, 768 MB a
# Cassandra node).
CLUSTER_PORT_OFFSET = 10000


def cluster_environment() -> dict[str, str]:
    """The variables that point every cronstream process at the 3-node cluster stack."""
    home = os.environ.get("CRONSTREAM_CLUSTER_HOME") or str(REPO_ROOT / ".stack" / "cluster")
    env = chaos_environment(offset=CLUSTER_PORT_OFFSET, home=home, heaps={})
    env.update(CRONSTREAM_NODES="3", CRONSTREAM_KAFKA_HEAP_MB="", CRONSTREAM_CASSANDRA_HEAP_MB="")
    # Each broker and Cassandra node on a host of its own (infra.hosts): faults can cut
    # or slow a node's link, not only kill it.
    env["CRONSTREAM_NETNS"] = "1"
    return env


def chaos_environment(
    offset: int = PORT_OFFSET, home: str | None = None, heaps: dict[str, str] | None = None
) -> dict[str, str]:
    """The variables that point every cronstream process at the chaos stack."""
    main_home = Settings.from_env().home
    home = home or os.environ.get("CRONSTREAM_CHAOS_HOME") or str(REPO_ROOT / ".stack" / "chaos")
    env = {name: str(port + offset) for name, port in PORTS.items()}
    env.update(HEAPS if heaps is None else heaps)
    env["CRONSTREAM_HOME"] = str(Path(home).resolve())
    env["CRONSTREAM_CHAOS_JARS"] = str(main_home / "lib")
    for inherited in (
        "CRONSTREAM_BOOTSTRAP_SERVERS",
        "CRONSTREAM_REGISTRY_URL",
        "CRONSTREAM_CASSANDRA_HOSTS",
        "CRONSTREAM_KAFKA_ADMIN_SERVERS",
        "CRONSTREAM_KAFKA_CA",
        "CRONSTREAM_KAFKA_PASSWORD_FILE",
        "CRONSTREAM_KAFKA_PASSWORD",
    ):
        env[inherited] = ""  # derived from the ports above
    return env


def enter_chaos_environment(*, cluster: bool = False) -> Settings:
    """Point this process (and every process it starts) at the chaos stack (the 3-node
    one with ``cluster``)."""
    os.environ.update(cluster_environment() if cluster else chaos_environment())
    return Settings.from_env()


@contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[Settings]:
    """This process (and the processes it starts: ``cli_env`` copies ``os.environ``)
    pointed at another stack for the block, e.g. ``environment(cluster_environment())``;
    the environment as it was afterwards."""
    saved = dict(os.environ)
    os.environ.update(variables)
    try:
        yield Settings.from_env()
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def fresh(variables: Mapping[str, str]) -> Iterator[Settings]:
    """The stack ``variables`` name, from empty data directories (as on a fresh clone),
    up and bootstrapped for the block; every node of it stopped afterwards, one added
    during the block too (``down`` stops each node that has a pid file)."""
    with environment(variables) as settings:
        down(settings)
        shutil.rmtree(settings.home / "data", ignore_errors=True)
        try:
            up(settings)
            yield settings
        finally:
            down(settings)


def link_jars(settings: Settings) -> None:
    """``<chaos home>/lib`` -> the main stack's jars (made there if missing)."""
    jars = Path(os.environ["CRONSTREAM_CHAOS_JARS"])
    jars.mkdir(parents=True, exist_ok=True)
    lib = settings.home / "lib"
    settings.home.mkdir(parents=True, exist_ok=True)
    if lib.is_symlink() and lib.resolve() == jars.resolve():
        return
    if lib.is_symlink():
        lib.unlink()
    if not lib.exists():
        lib.symlink_to(jars, target_is_directory=True)


def up(settings: Settings) -> None:
    from cronstream.infra.bootstrap import bootstrap

    link_jars(settings)
    took = stack_mod.up(settings, say=_say)
    _say(f"chaos stack up in {took:.1f}s under {settings.home}")
    bootstrap(settings)


def down(settings: Settings) -> None:
    stack_mod.down(settings, say=_say)


def service(settings: Settings, name: str) -> Service:
    return next(s for s in all_services(settings) if s.name == name)


def kill9(svc: Service) -> None:
    """SIGKILL the service's whole process group; return once it is gone."""
    pid = svc.pid()
    if pid is None:
        raise RuntimeError(f"{svc.name} is not running")
    os.killpg(os.getpgid(pid), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while svc.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    svc.pidfile.unlink(missing_ok=True)


def start(svc: Service, timeout: float | None = None) -> float:
    """Start ``svc`` and wait until it answers; returns the seconds it took."""
    began = time.monotonic()
    svc.start()
    svc.wait_ready(timeout)
    return time.monotonic() - began


def _say(msg: str) -> None:
    print(f"[chaos stack] {msg}", flush=True)
