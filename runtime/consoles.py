"""How a client reaches the stack's consoles: Prometheus, Alertmanager and Kafka
Connect's REST API. Each answers nobody without a login.

Every console has one login, the operator's (``CONSOLE_USER``), whose password the
local stack keeps in ``credentials/<console>-operator.secret`` (made by
``infra.security`` at the console's first start). Prometheus and Alertmanager speak
HTTPS only, with the stack's server certificate; Connect's REST API listens on the
loopback over HTTP with basic auth (``infra.connect``).

A client elsewhere names its console with the family ``o.CONSOLE``: ``<CONSOLE>_URL``,
its login with ``<CONSOLE>_USER`` and ``<CONSOLE>_PASSWORD`` (or ``..._FILE``), and the
CA that signed the console's certificate with ``<CONSOLE>_CA`` (default: the local
stack's; docs/configuration.md). A console whose password is configured nowhere is asked
anonymously: it answers 401, which the caller reports like any refusal.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from cronstream.runtime.credentials import credentials_dir, read_password, stack_ca
from cronstream.runtime.options import services as o
from cronstream.runtime.settings import Settings

CONSOLE_USER = "operator"

# console -> (its port's setting, scheme on the local stack). 9193 by default, not
# Alertmanager's own 9093: that is Kafka's controller port here.
CONSOLES = {
    "prometheus": (o.PROMETHEUS_PORT, "https"),
    "alertmanager": (o.ALERTMANAGER_PORT, "https"),
    "connect": (o.CONNECT_PORT, "http"),
}


def console_port(console: str, env: Mapping[str, str] | None = None) -> int:
    port, _ = CONSOLES[console]
    return int(port.get(env))


def console_secret_path(settings: Settings, console: str) -> Path:
    """Where the local stack keeps the password of ``console``'s operator login."""
    return credentials_dir(settings) / f"{console}-{CONSOLE_USER}.secret"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleAccess:
    """Where a console is and how to log in to it."""

    url: str  # without a trailing slash
    user: str
    password: str | None  # None: configured nowhere (asked anonymously)
    ca: Path  # the CA its HTTPS certificate is checked against

    @property
    def auth(self) -> tuple[str, str] | None:
        return None if self.password is None else (self.user, self.password)

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """What checks its certificate: its CA (loaded only for an HTTPS console)."""
        return ssl.create_default_context(cafile=self.ca) if self.url.startswith("https") else True

    def client(self, timeout: float = 10.0) -> httpx.Client:
        """An HTTP client of the console with its login and CA."""
        return httpx.Client(base_url=self.url, auth=self.auth, verify=self.verify, timeout=timeout)


def stack_console(
    settings: Settings, console: str, env: Mapping[str, str] | None = None
) -> ConsoleAccess:
    """The local stack's own ``console``: its port, the stored password, the stack's CA."""
    _, scheme = CONSOLES[console]
    stored = console_secret_path(settings, console)
    return ConsoleAccess(
        url=f"{scheme}://127.0.0.1:{console_port(console, env)}",
        user=CONSOLE_USER,
        password=stored.read_text().strip() if stored.exists() else None,
        ca=stack_ca(settings),
    )


def console_access(
    settings: Settings, console: str, env: Mapping[str, str] | None = None
) -> ConsoleAccess:
    """``console``'s access as the environment names it, the local stack's by default."""
    env = os.environ if env is None else env
    name = console.upper()
    stack = stack_console(settings, console, env)
    user = env.get(o.CONSOLE.name(f"{name}_USER")) or CONSOLE_USER
    password = stack.password
    given, given_file = (
        o.CONSOLE.option(f"{name}_PASSWORD"),
        o.CONSOLE.option(f"{name}_PASSWORD_FILE"),
    )
    if given.is_set(env) or given_file.is_set(env):
        stored = console_secret_path(settings, console)
        password = read_password(console, user, stored, env, given, given_file)
    ca = env.get(o.CONSOLE.name(f"{name}_CA"))
    return ConsoleAccess(
        url=(env.get(o.CONSOLE.name(f"{name}_URL")) or stack.url).rstrip("/"),
        user=user,
        password=password,
        ca=Path(ca) if ca else stack.ca,
    )
