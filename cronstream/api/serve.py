"""`cronstream api`: the HTTP API in the foreground (uvicorn), until SIGTERM or Ctrl-C."""

from __future__ import annotations

import logging
import signal

import uvicorn

from cronstream.api.app import build_app
from cronstream.api.backend import Backend
from cronstream.foreground import setup_logging
from runtime import metrics
from runtime.settings import Settings
from runtime.tokens import TokenBook, book_path

log = logging.getLogger("cronstream.api")


def serve(settings: Settings, *, host: str, port: int, answer_timeout: float = 30.0) -> int:
    setup_logging()
    backend = Backend(settings, answer_timeout=answer_timeout)
    backend.start()
    metrics.PROBES.set_ready(True)  # cronstream_member_ready: the API serves from here on
    book = TokenBook(book_path(settings))
    log.info("api on http://%s:%d (OpenAPI at /openapi.json; tokens from %s)", host, port,
             book.path)  # fmt: skip
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again for
    # the handler it found installed: with the default one the process died by SIGTERM
    # (exit -15) after a clean stop. A handler of ours makes a clean stop exit 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stopped)
    try:
        # At most 10 s for requests still running (a put waits up to answer_timeout for the
        # admission): without a bound, a stop after make bench's load outlasted 60 s.
        uvicorn.run(build_app(backend, book), host=host, port=port, log_level="warning",
                    timeout_graceful_shutdown=10)  # fmt: skip
    finally:
        backend.close()
    return 0


def _stopped(signum: int, _frame: object) -> None:
    log.info("api stopped by signal %d", signum)
