"""No role exits because a dependency is away (``runtime.waiting``): each role started
while the schema registry, Cassandra or Kafka cannot be reached stays up, logs once what
it waits for, and starts when it answers. The outage is a forwarder of the test's own
(``Outage``), never the shared service. Found by review: a history sink started during
a registry outage exited at once (``error: schema registry ... unreachable``), and so
did the admission, the API and the flows coordinator."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import pytest

from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.kafka.publisher import Publisher
from cronstream.runtime.lakehouse import local_environment
from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import ADMIN, token_path
from cronstream.schemas.catalog import Topics
from cronstream.schemas.events import Priority
from tests.integration.helpers import (
    CronstreamProcess,
    Outage,
    free_port,
    group_caught_up,
    read_topic,
)
from tests.integration.test_connect import outcomes
from tests.integration.test_history import sink_done
from tests.integration.test_scheduler_outages import every_second

pytestmark = pytest.mark.integration
WAIT_S = 120  # a role's start under the load of the whole suite on 2 cores


def published(ns: Settings) -> int:
    """A job firing every second and 3 runs' outcomes: what the roles read at start."""
    publisher = Publisher(ns)
    try:
        publisher.publish(Topics(ns).jobs, every_second("waits"))
        runs = outcomes(3, int(time.time() * 1000) - 3_600_000)
        for outcome in runs:
            publisher.publish(Topics(ns).history, outcome)
        publisher.flush()
    finally:
        publisher.close()
    return len(runs)


def rows_written(ns: Settings) -> int:
    cluster, session = cassandra_session(ns, keyspace=ns.keyspace)
    try:
        return int(session.execute("SELECT count(*) FROM runs_by_id", timeout=60).one()[0])
    finally:
        cluster.shutdown()


def until(check: Callable[[], bool], what: str, procs: list[CronstreamProcess]) -> None:
    """Until ``check()``; fails at once if one of ``procs`` exited."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        for p in procs:
            assert p.proc.poll() is None, f"{p.name} exited:\n{p.log()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n" + "\n".join(
            f"--- {p.name}\n{p.log()[-1500:]}" for p in procs
        )
        time.sleep(0.5)


def ready(port: int) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code
    except httpx.HTTPError:
        return 0


def start(
    ns: Settings,
    tmp_path: Path,
    procs: list[CronstreamProcess],
    env: dict[str, str],
    roles: dict[str, tuple[str, ...]],
) -> dict[str, CronstreamProcess]:
    started = {}
    for name, args in roles.items():
        command = args[0]
        started[name] = CronstreamProcess(ns, tmp_path, name, *args[1:], command=command, env=env)
        procs.append(started[name])
    return started


def registry_outage(ns: Settings) -> tuple[Outage, dict[str, str]]:
    """A forwarder standing for the schema registry (up), and the environment that sends
    a role's registry calls through it."""
    url = urllib.parse.urlsplit(ns.registry_url)
    outage = Outage(url.hostname or "127.0.0.1", url.port or 80)
    through = ns.registry_url.replace(f"{url.hostname}:{url.port}", f"127.0.0.1:{outage.port}")
    return outage, {"CRONSTREAM_REGISTRY_URL": through}


def sink_and_api() -> tuple[dict[str, tuple[str, ...]], int, int]:
    """The roles of a sink and an API for ``start``, each on a free port of its own; the
    sink's metrics port, the API's port."""
    sink_port, api_port = free_port(), free_port()
    roles = {
        "sink": ("sink", "--metrics-port", str(sink_port)),
        "api": ("api", "--port", str(api_port)),
    }
    return roles, sink_port, api_port


def history_and_api_back(
    ns: Settings, started: dict[str, CronstreamProcess], api_port: int, runs: int
) -> None:
    """The sink wrote the ``runs`` published before it started, and the API is ready."""
    live = list(started.values())
    until(lambda: sink_done(ns), "the sink to write the history", live)
    until(lambda: ready(api_port) == 200, "the API's /readyz", live)
    assert rows_written(ns) == runs


def waits_then_starts(
    started: dict[str, CronstreamProcess], outage: Outage, dependency: str
) -> None:
    """Each process logs once that it waits for ``dependency`` and stays up; once the
    outage ends each logs that it is back."""
    procs = list(started.values())
    waiting = f"is waiting for {dependency}"
    until(lambda: all(waiting in p.log() for p in procs), f"every role {waiting}", procs)
    time.sleep(3)  # a few more tries: still up, still logged once
    for p in procs:
        assert p.proc.poll() is None, f"{p.name} exited:\n{p.log()[-3000:]}"
        assert p.log().count(" is waiting for ") == 1, p.log()[-3000:]
    outage.up()
    back = f"{dependency} is back after"
    until(lambda: all(back in p.log() for p in procs), f"every role: {back}", procs)


def stop_all(started: dict[str, CronstreamProcess]) -> None:
    for p in started.values():
        p.stop()  # SIGTERM: exits 0


def test_roles_started_while_the_registry_is_away_wait_then_start(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    runs = published(ns)
    outage, env = registry_outage(ns)
    outage.down()
    env |= local_environment(tmp_path / "archive")
    roles = {
        "scheduler": ("scheduler",),
        "admission": ("admission",),
        "archiver": ("archiver",),
        "flows-coordinator": ("flows-coordinator", "--nice", "0"),
    }
    history_roles, sink_port, api_port = sink_and_api()
    started = start(ns, tmp_path, procs, env, history_roles | roles)
    live = list(started.values())
    try:
        until(lambda: ready(sink_port) == 503, "the sink's /readyz", live)
        waits_then_starts(started, outage, "the schema registry")
        history_and_api_back(ns, started, api_port, runs)
        assert ready(sink_port) == 200
        runs_topic = Topics(ns).runs(Priority.NORMAL)
        until(
            lambda: any(r.headers.get("job_id") == "waits" for r in read_topic(ns, runs_topic)),
            "the scheduler to fire",
            live,
        )
        stop_all(started)
    finally:
        outage.down()


def test_roles_started_while_cassandra_is_away_wait_then_start(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    ns = history_ns
    runs = published(ns)
    outage = Outage(ns.cassandra_hosts[0], ns.cassandra_port)
    outage.down()
    env = {"CRONSTREAM_CASSANDRA_PORT": str(outage.port)}
    roles, _, api_port = sink_and_api()
    started = start(ns, tmp_path, procs, env, roles)
    try:
        waits_then_starts(started, outage, "Cassandra")
        history_and_api_back(ns, started, api_port, runs)
        stop_all(started)
    finally:
        outage.down()


def test_roles_started_while_kafka_is_away_wait_then_start(
    ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """The forwarder stands for the bootstrap servers: once it answers, the clients
    learn the broker's own address from its metadata."""
    published_at = time.time()
    published(ns)
    host, _, port = ns.bootstrap_servers.split(",")[0].rpartition(":")
    outage = Outage(host, int(port))
    outage.down()
    env = {"CRONSTREAM_BOOTSTRAP_SERVERS": f"127.0.0.1:{outage.port}"}
    started = start(
        ns,
        tmp_path,
        procs,
        env,
        {
            "scheduler": ("scheduler",),
            "worker": ("worker",),
            "admission": ("admission",),
        },
    )
    try:
        waits_then_starts(started, outage, "Kafka")
        runs_topic = Topics(ns).runs(Priority.NORMAL)
        until(
            lambda: any(
                r.headers.get("job_id") == "waits" and r.timestamp_ms / 1000 > published_at
                for r in read_topic(ns, runs_topic)
            ),
            "the scheduler to fire",
            list(started.values()),
        )
        until(
            lambda: "assigned" in started["worker"].log(),
            "the worker to join",
            list(started.values()),
        )
        stop_all(started)
    finally:
        outage.down()


@pytest.mark.parametrize("role", ["sink", "archiver"])
def test_a_running_reader_of_history_waits_for_the_registry_when_a_new_schema_id_arrives(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess], role: str
) -> None:
    """Started with the registry up, the sink (the archiver) has seen no history record
    yet: the first ones arrive while the registry is away. Before: RegistryUnavailable
    escaped its step and it exited (``error: schema registry ... unreachable``)."""
    ns = history_ns
    outage, env = registry_outage(ns)
    env |= local_environment(tmp_path / "archive")
    args = ("--flush-interval", "1s") if role == "archiver" else ()
    reader = start(ns, tmp_path, procs, env, {role: (role, *args)})[role]
    try:
        until(lambda: "assigned" in reader.log(), f"the {role} to join", [reader])
        outage.down()
        runs = published(ns)
        until(
            lambda: "is waiting for the schema registry" in reader.log(),
            f"the {role} to wait",
            [reader],
        )
        time.sleep(3)
        caught_up = partial(group_caught_up, ns, f"{ns.topic_prefix}.{role}", Topics(ns).history)
        assert not caught_up()
        outage.up()
        until(caught_up, f"the {role} to commit the history", [reader])
        if role == "sink":
            assert rows_written(ns) == runs
        assert reader.log().count(" is waiting for ") == 1, reader.log()[-3000:]
        assert "the schema registry is back after" in reader.log()
        reader.stop()
    finally:
        outage.down()


def test_a_running_admission_and_api_wait_for_the_registry_for_a_first_definition(
    history_ns: Settings, tmp_path: Path, procs: list[CronstreamProcess]
) -> None:
    """Both follow the jobs topic, empty at their start: the first definition arrives
    while the registry is away. Before: the admission exited, the API's thread following
    the jobs died (its /readyz 503 for good)."""
    ns = history_ns
    outage, env = registry_outage(ns)
    api_port = free_port()
    started = start(
        ns,
        tmp_path,
        procs,
        env,
        {
            "admission": ("admission",),
            "api": ("api", "--port", str(api_port)),
        },
    )
    live = list(started.values())
    try:
        until(lambda: "jobs topic read" in started["admission"].log(), "the admission", live)
        until(lambda: ready(api_port) == 200, "the API's /readyz", live)
        outage.down()
        published(ns)
        waiting = "is waiting for the schema registry"
        until(lambda: all(waiting in p.log() for p in live), "both to wait", live)
        time.sleep(3)
        outage.up()
        back = "the schema registry is back after"
        until(lambda: all(back in p.log() for p in live), "both to go on", live)
        token = token_path(ns, ADMIN).read_text().strip()
        jobs = httpx.get(
            f"http://127.0.0.1:{api_port}/v1/jobs",
            timeout=10,
            headers={"Authorization": f"Bearer {token}"},
        ).json()
        assert "waits" in str(jobs)
        assert ready(api_port) == 200
        stop_all(started)
    finally:
        outage.down()
