"""Secrets a worker resolves at run time, so that their values never travel in topics.

A job names a secret with a header value ``secret:NAME`` (``schemas.redact``). The
worker looks NAME up, in this order, in its ``--secrets-dir`` (a file named NAME, as a
Kubernetes secret volume or Docker secrets mount it; one trailing newline dropped) and
in its environment (``CRONSTREAM_SECRET_<NAME>``, NAME upper-cased with every character
other than a letter or digit turned into ``_``). Files are read at every use, so a
rotated secret is used from the next run on. A name found nowhere fails the run as an
invalid target (FAILED, not retried), naming the secret but never a value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from consumers.executors.base import TargetInvalid
from schemas.redact import secret_name

MAX_SECRET_BYTES = 16 * 1024
ENV_PREFIX = "CRONSTREAM_SECRET_"


def env_name(name: str) -> str:
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


class Secrets:
    def __init__(
        self, directory: str | Path | None = None, *, env: Mapping[str, str] | None = None
    ) -> None:
        self.directory = Path(directory) if directory else None
        self._env = os.environ if env is None else env

    def resolve(self, name: str) -> str:
        value = self._from_file(name)
        if value is None:
            value = self._env.get(env_name(name))
        if value is None:
            where = f"{self.directory}/{name} nor " if self.directory else ""
            raise TargetInvalid(
                f"secret {name!r} is not configured on this worker "
                f"(neither {where}${env_name(name)})"
            )
        if any(c in value for c in "\r\n\0"):
            raise TargetInvalid(f"secret {name!r} holds a line break or NUL: not a header value")
        return value

    def _from_file(self, name: str) -> str | None:
        if self.directory is None:
            return None
        path = self.directory / name  # SECRET_REF allows no '/', so it stays inside
        try:
            with path.open("rb") as handle:
                raw = handle.read(MAX_SECRET_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TargetInvalid(f"secret {name!r} cannot be read: {exc.strerror}") from None
        if len(raw) > MAX_SECRET_BYTES:
            raise TargetInvalid(f"secret {name!r} is over {MAX_SECRET_BYTES} bytes")
        text = raw.decode("utf-8", "replace")
        return text[:-1] if text.endswith("\n") else text

    def headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """``headers`` with every ``secret:NAME`` value replaced by the secret."""
        out = dict(headers)
        for key, value in headers.items():
            name = secret_name(value)
            if name is not None:
                out[key] = self.resolve(name)
        return out
