"""Where the local stack keeps its TLS material and passwords, and how a client finds
its password: one scheme for Kafka (``runtime.kafka.security``) and Cassandra
(``runtime.cassandra``). ``infra.security`` makes the files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cronstream.runtime.errors import SettingsError
from cronstream.runtime.options.option import Option
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
    password: Option[str],
    password_file: Option[str] | Option[Path],
    *,
    from_env: bool = True,
) -> str:
    """The password of ``service``'s ``user``: ``password``'s variable, else the file
    named by ``password_file``'s, else ``stored`` (the stack's). Without ``from_env`` (a
    user the variables are not for) only ``stored``."""
    given = password.get(env) if from_env else None
    if given:
        return str(given)
    named = password_file.get(env) if from_env else None
    path = Path(named) if named else stored
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise SettingsError(
            f"no password for {service} user {user!r}: cannot read {path} ({exc.strerror}); "
            f"set {password_file.env} or run `make bootstrap`"
        ) from None
