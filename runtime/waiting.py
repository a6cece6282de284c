"""Waiting for a dependency that is away: Kafka, the schema registry, Cassandra.

A role started while one of them cannot be reached waits for it instead of exiting, and
starts when it answers: a restart during an outage must not leave nothing running once
the outage is over (``reach`` then ``wait_for``: ``cronstream.foreground``, the API, the
flows coordinator). Running, a reader of records written by others waits the same way
for the registry when a record names a schema id it has not seen (``learn_writers``:
the sink, the archiver, the admission, the API, the flow definitions), and the sink for
Cassandra when it connects. The one rule:

- Only *away* waits: nothing listens, the connection is cut or times out, a server
  error (``away``). A dependency that answers "no" (a refused login, a failed TLS
  handshake, a missing topic or keyspace, a registry refusing a request) is bad
  configuration: it raises at once, and the command exits with its message.
- The wait is logged twice, whatever it lasts: once when it begins ("... is waiting for
  the schema registry (...)") and once when the dependency is back ("... after 12.3 s").
  Between tries the delay grows from ``FIRST_DELAY_S`` to ``MAX_DELAY_S``.
- Waiting is alive (``runtime.metrics.PROBES.beat``) and not ready: ``/readyz`` answers
  503 until the role has started, so an orchestrator sends it nothing meanwhile.
- A stop (SIGTERM, Ctrl-C) ends the wait at once with ``StopWaiting``.
"""

from __future__ import annotations

import logging
import ssl
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from cronstream.runtime import metrics
from cronstream.runtime.errors import ServiceRefused
from cronstream.runtime.kafka.clients import KafkaError, KafkaException, kafka_admin
from cronstream.runtime.kafka.records import ConsumedMessage
from cronstream.runtime.registry import registry_client
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import StopWaiting
from cronstream.schemas.errors import RegistryUnavailable
from cronstream.schemas.serde import Codec

T = TypeVar("T")
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 10.0  # a dependency back is noticed within 10 s; a try costs ~1 request

REGISTRY, KAFKA, CASSANDRA = "the schema registry", "Kafka", "Cassandra"

# librdkafka's codes for "no broker answers (yet)": connections refused or cut, requests
# timing out, a cluster still electing leaders or loading its group coordinator. Not:
# authentication, TLS, an unknown topic, a name that does not resolve (configuration).
KAFKA_AWAY = frozenset(
    {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.NOT_ENOUGH_REPLICAS,
    }
)


def away(exc: BaseException) -> str | None:
    """The dependency ``exc`` says is away (unreachable, timing out, failing with a
    server error), or None when it is something else: bad configuration, a refusal,
    a bug. Those must not be waited for."""
    if isinstance(exc, RegistryUnavailable):
        return REGISTRY
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and not error.fatal() and error.code() in KAFKA_AWAY:
            return KAFKA
        return None
    if "cassandra" in sys.modules and _cassandra_away(exc):
        return CASSANDRA
    return None


def _cassandra_away(exc: BaseException) -> bool:
    """The driver's errors for a node down, restarting or slow. NoHostAvailable is
    away when every host's reason is: not a refused login or TLS handshake, and not
    the bare host list it gives when no host would open the keyspace (none such)."""
    from cassandra import AuthenticationFailed, OperationTimedOut, Unavailable
    from cassandra.cluster import NoHostAvailable
    from cassandra.connection import ConnectionException
    from cassandra.protocol import IsBootstrappingErrorMessage, OverloadedErrorMessage

    if isinstance(exc, NoHostAvailable):
        errors = getattr(exc, "errors", None)
        if not isinstance(errors, dict):
            return False
        refused = (AuthenticationFailed, ssl.SSLError)
        return not any(
            isinstance(r, refused) or isinstance(getattr(r, "__cause__", None), ssl.SSLError)
            for r in errors.values()
        )
    return isinstance(
        exc,
        (
            OperationTimedOut,
            Unavailable,
            ConnectionException,
            IsBootstrappingErrorMessage,
            OverloadedErrorMessage,
        ),
    )


class _ConnectFailures(logging.Filter):
    """The Cassandra driver logs each failed connection (a warning and an error with a
    traceback, ~40 lines a try); the wait's own line says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(CASSANDRA_CONNECT_FAILURES)


CASSANDRA_CONNECT_FAILURES = (
    "[control connection] Error connecting to",
    "Control connection failed to connect",
)


@contextmanager
def _drivers_quiet() -> Iterator[None]:
    driver, quiet = logging.getLogger("cassandra.cluster"), _ConnectFailures()
    driver.addFilter(quiet)
    try:
        yield
    finally:
        driver.removeFilter(quiet)


def sleeping(stop: Callable[[], bool]) -> Callable[[float], bool]:
    """A pause for ``wait_for`` that sleeps, waking at once when ``stop()`` (False then)."""

    def pause(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(0.1, left))
        return False

    return pause


def wait_for(
    what: str,
    attempt: Callable[[], T],
    *,
    log: logging.Logger,
    stop: Callable[[], bool] = lambda: False,
    pause: Callable[[float], bool] | None = None,
    first_delay: float = FIRST_DELAY_S,
    max_delay: float = MAX_DELAY_S,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """``attempt()``'s value, calling it again while it raises because a dependency is
    away (``away``); any other exception propagates at once.

    ``what`` names who waits in the two log lines ("sink sink-1"). Between tries it
    sleeps (``pause(seconds)``: the caller's own wait, e.g. one that keeps polling its
    consumer; False when it was asked to stop), the delay doubling from ``first_delay``
    to ``max_delay``. ``stop()`` true ends the wait with StopWaiting."""
    pause = pause or sleeping(stop)
    delay, since, waiting = first_delay, clock(), ""
    while True:
        try:
            with _drivers_quiet():
                value = attempt()
        except Exception as exc:
            dependency = away(exc)
            if dependency is None:
                raise
            if dependency != waiting:  # the first try, or another dependency away now
                if waiting:
                    log.info("%s: %s is back after %.1f s", what, waiting, clock() - since)
                since, waiting = clock(), dependency
                log.warning(
                    "%s is waiting for %s (%s); trying again every %.0f s at most, "
                    "logged again when it answers",
                    what,
                    dependency,
                    exc,
                    max_delay,
                )
            metrics.PROBES.beat()  # waiting is alive, not ready
            if stop() or not pause(delay):
                raise StopWaiting(f"{what}: stopped while waiting for {dependency}") from exc
            delay = min(2 * delay, max_delay)
            continue
        if waiting:
            log.info("%s: %s is back after %.1f s", what, waiting, clock() - since)
        return value


def learn_writers(
    codec: Codec,
    messages: Iterable[ConsumedMessage],
    *,
    what: str,
    log: logging.Logger,
    pause: Callable[[float], bool],
) -> None:
    """Every writer schema ``messages`` name that ``codec`` has not seen, asked of the
    registry, waiting for it while it is away (``wait_for``, StopWaiting on a stop):
    decoding them afterwards needs no registry. A schema id the registry refuses is
    remembered as refused (the record's fault, found when it is decoded). For a
    consumer of records written by others (the sink, the archiver)."""
    unknown = {
        i
        for m in messages  # an error event is the caller's to judge (is_record)
        if m.error() is None and (i := codec.unknown_id(m.value())) is not None
    }
    for schema_id in sorted(unknown):
        ask = partial(codec.learn, schema_id, codec.registry)
        wait_for(what, ask, log=log, pause=pause)


def reach(settings: Settings, needs: Iterable[str]) -> None:
    """Ask each dependency in ``needs`` (``KAFKA``, ``REGISTRY``, ``CASSANDRA``) one
    cheap question, as this role would: metadata, the subjects, a session in the
    keyspace. Raises what the first one that does not answer raised (``away`` tells an
    outage from a refusal)."""
    for dependency in needs:
        ASK[dependency](settings)


def _ask_kafka(settings: Settings) -> None:
    # Quiet: librdkafka logs every refused connection (several a second) on its own.
    quiet: dict[str, Any] = {"log_level": 0, "socket.timeout.ms": 4000}
    admin = kafka_admin(settings, **quiet)
    try:
        admin.list_topics(timeout=5)  # a broker that does not answer: _TRANSPORT after it
    except KafkaException:
        # A refused login or TLS handshake fails the request as _TRANSPORT too; the
        # client's error callback tells it apart (KafkaAuthError) once served.
        admin.poll(0)
        raise


def _ask_registry(settings: Settings) -> None:
    with registry_client(settings) as registry:
        registry.subjects()


def _ask_cassandra(settings: Settings) -> None:
    from cassandra import InvalidRequest  # the driver: ~0.3 s to import
    from cassandra.cluster import NoHostAvailable

    from cronstream.runtime.cassandra import cassandra_session

    try:
        cluster, _session = cassandra_session(settings, keyspace=settings.keyspace, timeout=5.0)
    except NoHostAvailable as exc:
        if away(exc):
            raise
        raise ServiceRefused(
            f"Cassandra refused user {settings.cassandra_user!r} "
            f"(its login, TLS or keyspace {settings.keyspace!r}): {exc}"
        ) from exc
    except InvalidRequest as exc:  # no such keyspace
        raise ServiceRefused(f"Cassandra: {exc} (has the bootstrap run?)") from exc
    cluster.shutdown()


ASK: dict[str, Callable[[Settings], None]] = {
    KAFKA: _ask_kafka,
    REGISTRY: _ask_registry,
    CASSANDRA: _ask_cassandra,
}
