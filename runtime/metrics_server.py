"""The HTTP server of a process's metrics and probes: ``/metrics``, ``/healthz`` and
``/readyz`` on ``--metrics-port``, in a daemon thread.

Where it listens: ``o.METRICS_HOST``, the loopback (127.0.0.1) unless set.
``/metrics`` names tenants and jobs in its labels, so on any address that is not a
loopback one it answers only ``Authorization: Bearer <token>``, the token read once
from the file ``o.METRICS_TOKEN_FILE`` names (Prometheus sends it with
``authorization: {credentials_file: ...}``); a process asked to listen there without
a token refuses to start. A token configured on the loopback is required there too.
``/healthz`` and ``/readyz`` answer anyone: the kubelet probes the pod's address
without credentials, and they tell only "ok" or what the process waits for.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.metrics import PROBES, exposition
from cronstream.runtime.options import services as o


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this host only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: whatever it resolves to, not promised to be the loopback


def metrics_token(host: str, env: Mapping[str, str] | None = None) -> bytes | None:
    """The token ``/metrics`` wants on ``host``: the file's content, None for none on
    the loopback. Raises SettingsError for a non-loopback host without one, or a file
    that cannot be read or is empty."""
    env = os.environ if env is None else env
    named: Path | None = o.METRICS_TOKEN_FILE.get(env)
    variable = o.METRICS_TOKEN_FILE.env
    if not named:
        if is_loopback(host):
            return None
        raise SettingsError(
            f"metrics on {host} ({o.METRICS_HOST.env}) would answer anyone who reaches "
            f"it: set {variable} to a file holding the token Prometheus sends, or listen "
            "on 127.0.0.1"
        )
    try:
        token = named.read_text().strip().encode()
    except OSError as exc:
        raise SettingsError(f"cannot read {variable} ({exc.strerror})") from None
    if not token:
        raise SettingsError(f"{variable} names an empty file")
    return token


def authorized(header: str | None, token: bytes | None) -> bool:
    """Whether an ``Authorization`` header carries ``token`` (None: nothing to carry)."""
    if token is None:
        return True
    scheme, _, given = (header or "").partition(" ")
    # compare_digest: the time taken tells nothing of how much of the token matched
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token)


def _handler(token: bytes | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            extra = {}
            if path == "/metrics" and not authorized(self.headers.get("Authorization"), token):
                body, code, kind = b"a bearer token is needed\n", 401, "text/plain"
                extra["WWW-Authenticate"] = 'Bearer realm="metrics"'
            elif path == "/metrics":
                (body, kind), code = exposition(), 200
            elif path in ("/healthz", "/readyz"):
                ok, why = PROBES.live() if path == "/healthz" else PROBES.ready()
                body, code, kind = why.encode() + b"\n", 200 if ok else 503, "text/plain"
            else:
                body, code, kind = b"/metrics, /healthz or /readyz\n", 404, "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:  # scrapes every few seconds: no log line
            return

    return Handler


def serve(port: int, host: str | None = None) -> ThreadingHTTPServer | None:
    """Serve /metrics, /healthz and /readyz on host:port in a daemon thread (port 0: do
    nothing). The host: ``host``, else ``o.METRICS_HOST``, else 127.0.0.1.
    Raises SettingsError when that host is exposed without a token (``metrics_token``)."""
    if not port:
        return None
    host = host or o.METRICS_HOST.get()
    server = ThreadingHTTPServer((host, port), _handler(metrics_token(host)))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
