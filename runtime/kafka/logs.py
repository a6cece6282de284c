"""librdkafka's own log lines through Python logging, for the processes that ask
(``route``: the CLI's commands).

Left alone, librdkafka prints its lines on stderr from its own threads
(``%3|1795814637.239|FAIL|rdkafka#consumer-2| [thrd:GroupCoordinator]: ...``), whatever
the process's logging says. A client given confluent-kafka's ``logger`` config entry
queues them instead, and they reach the logger from the calls that serve the client:
``poll``, ``consume``, ``flush`` (and a consumer's ``close``). A client never served
keeps its lines, and drops them with itself: the admin clients here, and a client of a
long-running role that is polled rarely would hold them, which is why the roles are
not routed (their lines go to stderr as before).
"""

from __future__ import annotations

import logging
from typing import Any

from cronstream.runtime.kafka.security import handshake_cut

LOG = logging.getLogger("librdkafka")
_ROUTED: dict[str, Any] = {}  # config entries every client built from now on gets


class ClientLog:
    """What confluent-kafka hands each librdkafka line to: ``log(level, "%s [%s] %s",
    facility, client name, text)``, librdkafka's syslog level mapped to logging's.

    A SASL handshake cut short (``security.handshake_cut``) is connection churn, not
    trouble: logged at INFO, not ERROR. A short-lived reader meets it at close: Python's
    consumer needs a ``group.id``, so librdkafka connects to the group's coordinator,
    which the reader never uses, and closing it while that connection authenticates
    logs "SASL authentication error: SaslAuthenticateRequest failed: Local: Broker
    transport failure" (confluent-kafka-python issue 1780). Never raises: it runs inside
    the client call that serves it."""

    def __init__(self, logger: logging.Logger = LOG) -> None:
        self.logger = logger

    def log(self, level: int, msg: str, *args: Any) -> None:
        text = str(args[-1]) if args else msg
        if level > logging.INFO and "SASL" in text and handshake_cut(text):
            level = logging.INFO
        self.logger.log(level, msg, *args)


def route(*, debug: str | None = None) -> None:
    """Every Kafka client this process builds from now on (``runtime.kafka.clients``)
    hands its lines to ``ClientLog`` on the ``librdkafka`` logger; with ``debug``, also
    librdkafka's debug contexts (e.g. ``broker,cgrp,security``)."""
    _ROUTED.clear()
    _ROUTED["logger"] = ClientLog()
    if debug:
        _ROUTED["debug"] = debug


def routed() -> dict[str, Any]:
    """The config entries ``route`` asked for ({} when the process did not)."""
    return dict(_ROUTED)
