"""How a client reaches the stack's consoles: Prometheus, Alertmanager and Kafka
Connect's REST API. Each answers nobody without a login.

Every console has one login, the operator's (``CONSOLE_USER``), whose password the
local stack keeps in ``credentials/<console>-operator.secret`` (made by
``infra.security`` at the console's first start). Prometheus and Alertmanager speak
HTTPS only, with the stack's server certificate; Connect's REST API listens on the
loopback over HTTP with basic auth (``infra.connect``).

A client elsewhere names its console with ``CRONSTREAM_<CONSOLE>_URL``, its login with
``CRONSTREAM_<CONSOLE>_USER`` and ``CRONSTREAM_<CONSOLE>_PASSWORD`` (or ``..._FILE``),
and the CA that signed the console's certificate with ``CRONSTREAM_<CONSOLE>_CA``
(default: the local stack's). A console whose password is configured nowhere is asked
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
from cronstream.runtime.settings import Settings, env_int

CONSOLE_USER = "operator"

# console -> (its port's variable, default port, scheme on the local stack). 9193, not
# Alertmanager's own 9093: that is Kafka's controller port here.
CONSOLES = {
    "prometheus": ("CRONSTREAM_PROMETHEUS_PORT", 9190, "https"),
    "alertmanager": ("CRONSTREAM_ALERTMANAGER_PORT", 9193, "https"),
    "connect": ("CRONSTREAM_CONNECT_PORT", 8083, "http"),
}


def console_port(console: str, env: Mapping[str, str] | None = None) -> int:
    variable, default, _ = CONSOLES[console]
    return env_int(variable, default, env=env, minimum=1)


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
    _, _, scheme = CONSOLES[console]
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
    name = f"CRONSTREAM_{console.upper()}"
    stack = stack_console(settings, console, env)
    user = env.get(f"{name}_USER") or CONSOLE_USER
    password = stack.password
    if env.get(f"{name}_PASSWORD") or env.get(f"{name}_PASSWORD_FILE"):
        stored = console_secret_path(settings, console)
        password = read_password(console, user, stored, env, f"{name}_PASSWORD")
    ca = env.get(f"{name}_CA")
    return ConsoleAccess(
        url=(env.get(f"{name}_URL") or stack.url).rstrip("/"),
        user=user,
        password=password,
        ca=Path(ca) if ca else stack.ca,
    )
