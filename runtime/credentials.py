"""Where the local stack keeps its TLS material and passwords, and how a client finds
its password: one scheme for Kafka (``runtime.kafka.security``) and Cassandra
(``runtime.cassandra``). ``infra.security`` makes the files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.settings import Settings


def security_dir(settings: Settings) -> Path:
    return settings.home / "data" / "security"


def tls_dir(settings: Settings) -> Path:
    return security_dir(settings) / "tls"


def credentials_dir(settings: Settings) -> Path:
    return security_dir(settings) / "credentials"


def stack_ca(settings: Settings) -> Path:
    """The local CA's certificate: what clients trust unless told another CA."""
    return tls_dir(settings) / "ca.pem"


def read_password(
    service: str,
    user: str,
    stored: Path,
    env: Mapping[str, str],
    variable: str,
    *,
    from_env: bool = True,
) -> str:
    """The password of ``service``'s ``user``: ``$<variable>``, else the file named by
    ``$<variable>_FILE``, else ``stored`` (the stack's). Without ``from_env`` (a user
    the variables are not for) only ``stored``."""
    if from_env and env.get(variable):
        return env[variable]
    named = env.get(f"{variable}_FILE") if from_env else None
    path = Path(named) if named else stored
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise SettingsError(
            f"no password for {service} user {user!r}: cannot read {path} ({exc.strerror}); "
            f"set {variable}_FILE or run `make bootstrap`"
        ) from None
