"""`cronstream api`: the HTTP API in the foreground (uvicorn), until SIGTERM or Ctrl-C,
behind the front door of ``cronstream.api.guard`` (allowed Host names, security headers,
a bound on request bodies)."""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI

from cronstream.api.app import build_app
from cronstream.api.backend import Backend
from cronstream.api.guard import AllowedHosts, Guard
from cronstream.foreground import setup_process, stop_on_signals
from cronstream.runtime import metrics
from cronstream.runtime.metrics_server import metrics_token
from cronstream.runtime.settings import Settings
from cronstream.runtime.stop import STOP_BUDGET_S, StopWaiting, requested
from cronstream.runtime.stop import arm as arm_stop_deadline
from cronstream.runtime.tokens import TokenBook, book_path
from cronstream.runtime.waiting import CASSANDRA, KAFKA, REGISTRY, reach, wait_for

log = logging.getLogger("cronstream.api")


# Builds the application on the backend and token book instead of the bare API (the
# dashboard: ``cronstream.ui.app.ui_factory``), with what must be closed at the end.
AppFactory = Callable[[Backend, TokenBook], tuple[FastAPI, list[Any]]]


def serve(  # long: the server's parts and its stop, in order
    settings: Settings,
    *,
    host: str,
    port: int,
    answer_timeout: float = 30.0,
    factory: AppFactory | None = None,
    allowed_hosts: Sequence[str] = (),
) -> int:
    """The API; with ``factory``, what it builds (``cronstream ui``: the dashboard).
    ``allowed_hosts``: Host names served besides the loopback ones and ``host``."""
    setup_process()
    hosts = AllowedHosts.of(host, allowed_hosts)  # ValueError: a name that is none
    # /metrics on the API's own port names tenants and jobs: behind the metrics token when
    # the API listens beyond the loopback (SettingsError without one), as every role's.
    token = metrics_token(host)
    stop_on_signals()  # until uvicorn's: a stop while waiting exits 0

    def started() -> Backend:  # reads the jobs topic (the registry), opens a session
        reach(settings, (KAFKA, REGISTRY, CASSANDRA))
        backend = Backend(settings, answer_timeout=answer_timeout)
        try:
            backend.start()
        except BaseException:
            backend.close()
            raise
        return backend

    try:  # not listening meanwhile: not ready for whoever probes /readyz
        backend = wait_for(f"api on {host}:{port}", started, log=log, stop=requested)
    except StopWaiting:
        return 0
    # The jobs loaded at start (100,000 jobs: ~550,000 objects) out of the collector's
    # reach: a full collection traversed them all (~170 ms, the dashboard's p99 tail) and
    # so ran seldom, leaving the Cassandra driver's cyclic garbage (each query's
    # future and its rows) to pile up (775-925 MiB after 2,400 job pages; ~500 with this).
    gc.collect()
    gc.freeze()
    book = TokenBook(book_path(settings))
    closing: list[Any] = []
    if factory is None:
        app = build_app(backend, book)
    else:
        app, closing = factory(backend, book)
    app.state.metrics_token = token
    metrics.PROBES.set_ready(True)  # cronstream_member_ready: the API serves from here on
    log.info(
        "api on http://%s:%d (OpenAPI at /openapi.json; tokens from %s; Host names served: %s)",
        host,
        port,
        book.path,
        hosts.describe(),
    )
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again for
    # the handler it found installed: with the default one the process died by SIGTERM
    # (exit -15) after a clean stop. A handler of ours makes a clean stop exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    try:
        _listen(Guard(app, hosts), host, port)
    finally:
        for part in closing:
            part.close()
        backend.close()
    return 0


def _listen(app: Guard, host: str, port: int) -> None:
    """Serve ``app`` until a stop signal. At most 5 s for requests still running (a put
    waits up to answer_timeout for the admission): without a bound, a stop after make
    bench's load outlasted 60 s; the rest of the 10 s stop budget closes the backend
    (``_Server``)."""
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
    )
    _Server(config).run()


class _Server(uvicorn.Server):
    """uvicorn's server whose stop signal also arms the process's stop deadline
    (``runtime.stop.arm``): the requests still running get up to 5 s, and closing the
    backend what is left of the 10 s; a broker frozen under ``backend.close`` does not
    keep the process."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        arm_stop_deadline(STOP_BUDGET_S)
        super().handle_exit(sig, frame)


def _stopped(signum: int, _frame: object) -> None:
    log.info("api stopped by signal %d", signum)
