"""Is each service answering its own protocol? Used by `cronstream status` and `make up`."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from urllib.parse import urlparse

import httpx

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.kafka.clients import kafka_admin
from cronstream.runtime.kafka.security import admin_certificate
from cronstream.runtime.settings import Settings


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    ok: bool
    detail: str
    latency_ms: float


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _host_port(endpoint: str, default_port: int) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return (host, int(port)) if host else (endpoint, default_port)


def kafka_health(settings: Settings, timeout: float = 3.0) -> Health:
    """Kafka answers metadata and every partition has a leader. Asked as the stack's
    super user when its admin certificate is here (as cronstream's user, metadata
    lists only the topics the ACLs let it see)."""
    began = time.perf_counter()
    superuser = settings.kafka_security != "plaintext" and admin_certificate(settings).exists()
    servers = settings.admin_servers if superuser else settings.bootstrap_servers
    listed = [server.strip() for server in servers.split(",") if server.strip()]
    if not any(port_open(port, host) for host, port in (_host_port(s, 9092) for s in listed)):
        return Health(ok=False, detail=f"nothing listens on {servers}", latency_ms=0.0)
    try:
        admin = kafka_admin(
            settings, superuser=superuser, log_level=0, **{"socket.timeout.ms": 2000}
        )
    except SettingsError as exc:
        return Health(ok=False, detail=str(exc), latency_ms=0.0)
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception as exc:
        return Health(ok=False, detail=f"metadata request failed: {exc}", latency_ms=0.0)
    ms = (time.perf_counter() - began) * 1000
    # Right after a restart the broker answers metadata before partition leaders are
    # elected; clients then fail with NOT_LEADER. Ready means every partition has a leader.
    # On a cluster a partition whose in-sync replicas are fewer than its replicas is
    # under-replicated (a broker is away or behind): still served, one loss from
    # refusing writes at min.insync.replicas 2. Reported, not a failure.
    parts = [part for topic in md.topics.values() for part in topic.partitions.values()]
    leaderless = sum(1 for part in parts if part.leader < 0 or part.error is not None)
    short = sum(1 for part in parts if len(part.isrs) < len(part.replicas))
    if leaderless:
        also = f", {short} under-replicated" if short else ""
        return Health(
            ok=False, detail=f"{leaderless} partitions offline (no leader){also}", latency_ms=ms
        )
    return Health(
        ok=bool(md.brokers),
        detail=f"{len(md.brokers)} broker(s), {len(md.topics)} topics"
        + (f", {short} partitions under-replicated" if short else ""),
        latency_ms=ms,
    )


def registry_health(url: str, timeout: float = 3.0) -> Health:
    began = time.perf_counter()
    parsed = urlparse(url)
    if not port_open(parsed.port or 80, parsed.hostname or "127.0.0.1"):
        return Health(ok=False, detail=f"nothing listens on {parsed.netloc}", latency_ms=0.0)
    try:
        resp = httpx.get(f"{url.rstrip('/')}/subjects", timeout=timeout)
    except httpx.HTTPError as exc:
        return Health(ok=False, detail=f"GET /subjects failed: {exc}", latency_ms=0.0)
    ms = (time.perf_counter() - began) * 1000
    if resp.status_code != 200:
        return Health(ok=False, detail=f"GET /subjects answered {resp.status_code}", latency_ms=ms)
    return Health(ok=True, detail=f"{len(resp.json())} subjects", latency_ms=ms)


def cassandra_health(
    settings: Settings,
    timeout: float = 5.0,
    *,
    login: tuple[str, str] | None = None,
    refused_is_up: bool = False,
) -> Health:
    """Cassandra answers a query as cronstream's user (or ``login``). With
    ``refused_is_up`` a refused login still counts as up: ``make up`` waits for the
    node before the bootstrap has made the users."""
    began = time.perf_counter()
    hosts, port = settings.cassandra_hosts, settings.cassandra_port
    if not any(port_open(port, h) for h in hosts):
        return Health(ok=False, detail=f"nothing listens on port {port} of {hosts}", latency_ms=0)
    from cassandra.cluster import NoHostAvailable

    from cronstream.runtime.cassandra import cassandra_cluster, login_refused

    try:
        cluster = cassandra_cluster(settings, timeout=timeout, login=login)
    except SettingsError as exc:
        return Health(ok=False, detail=str(exc), latency_ms=0.0)
    try:
        session = cluster.connect()
        row = session.execute("SELECT release_version FROM system.local", timeout=timeout).one()
        down = sorted(str(h.endpoint) for h in cluster.metadata.all_hosts() if not h.is_up)
    except NoHostAvailable as exc:
        if refused_is_up and login_refused(exc):
            return Health(ok=True, detail="answers (login refused)", latency_ms=0.0)
        return Health(ok=False, detail=f"CQL connection failed: {exc}", latency_ms=0.0)
    except Exception as exc:
        return Health(ok=False, detail=f"CQL query failed: {exc}", latency_ms=0.0)
    finally:
        cluster.shutdown()
    ms = (time.perf_counter() - began) * 1000
    # A node down is reported, not a failure: at LOCAL_QUORUM on 3 replicas the others
    # answer.
    nodes = len(cluster.metadata.all_hosts())
    detail = f"Cassandra {row.release_version}"
    if down:
        detail += f", {nodes} nodes, down: {', '.join(down)}"
    elif nodes > 1:
        detail += f", {nodes} nodes up"
    return Health(ok=row is not None, detail=detail, latency_ms=ms)
