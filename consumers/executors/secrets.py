"""Secrets a worker resolves at run time, so that their values never travel in topics.

A job names a secret with a header value ``secret:NAME`` (``schemas.redact``). Every
tenant has a namespace of its own, and a job resolves NAME only in its tenant's:

- the operators' jobs (tenant ``default``): the file ``<secrets-dir>/NAME``, else the
  variable ``<NAME>`` of the family ``r.SECRET``;
- a job of tenant T: the file ``<secrets-dir>/T/NAME``, else the variable ``<T>__<NAME>``
  of the family ``r.TENANT_SECRET`` (docs/configuration.md).

So a tenant's job naming an operators' secret finds nothing, and fails. Files are laid out
as a Kubernetes secret volume or a Docker secrets mount lays them out (one trailing newline
dropped) and read at every use, so a rotated secret is used from the next run on. In a
variable name T and NAME are upper-cased with every character other than a letter or
digit turned into ``_`` (``tenant_env_name`` says why no two namespaces share one). A name
found nowhere fails the run as an invalid target (FAILED, not retried), naming the secret
and the tenant but never a value; for a tenant's job it names no place either (the
worker's directory and variable names are the operators' to know: their log has them),
for an operators' job it says where it looked. Every value resolved for an attempt is
recorded on its ``RunContext.revealed``, so that the worker scrubs it from the attempt's error text.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from cronstream.consumers.errors import TargetInvalid
from cronstream.consumers.executors.base import RunContext
from cronstream.runtime.options import roles as r
from cronstream.schemas.redact import secret_name
from cronstream.schemas.tenancy import OPERATORS, TENANT_NAME

log = logging.getLogger("cronstream.worker")

MAX_SECRET_BYTES = 16 * 1024
ENV_PREFIX = r.SECRET.prefix
TENANT_ENV_PREFIX = r.TENANT_SECRET.prefix


def _upper(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def env_name(name: str) -> str:
    """The variable that holds the operators' secret ``name``."""
    return ENV_PREFIX + _upper(name)


def tenant_env_name(tenant: str, name: str) -> str | None:
    """The variable that holds ``tenant``'s secret ``name``; None for a tenant whose name
    would make it ambiguous (that tenant's secrets are files only).

    No variable belongs to two namespaces: the operators' names start with ``ENV_PREFIX``,
    the tenants' with ``TENANT_ENV_PREFIX``, which differ. Among tenants, a secret name
    starts with a letter or digit (``SECRET_REF``), so ``<T>__<NAME>`` is split by the
    first ``__`` after the prefix, unless T itself holds ``__``: only a tenant named with
    ``--`` does (tenant names are a-z, 0-9 and '-'), and that one gets no variables."""
    if "--" in tenant:
        return None
    return f"{TENANT_ENV_PREFIX}{_upper(tenant)}__{_upper(name)}"


class Secrets:
    def __init__(
        self, directory: str | Path | None = None, *, env: Mapping[str, str] | None = None
    ) -> None:
        self.directory = Path(directory) if directory else None
        self._env = os.environ if env is None else env

    def resolve(self, name: str, tenant: str = OPERATORS) -> str:
        """``tenant``'s secret ``name``; raises TargetInvalid when it has none."""
        if secret_name(f"secret:{name}") != name:  # '/', '..' first: never a path
            raise TargetInvalid(f"{name[:40]!r} is not a secret name")
        if tenant != OPERATORS and not TENANT_NAME.match(tenant):
            # Run records come from the admission, which checks names; this one did not.
            raise TargetInvalid(f"tenant {tenant[:40]!r} has no secrets (not a tenant name)")
        folder = self._folder(tenant)
        variable = env_name(name) if tenant == OPERATORS else tenant_env_name(tenant, name)
        value = self._from_file(folder / name, name) if folder is not None else None
        if value is None and variable is not None:
            value = self._env.get(variable)
        if value is None:
            places = [str(folder / name)] if folder is not None else []
            places += [f"${variable}"] if variable is not None else []
            looked = f"looked in {' and '.join(places) or 'nowhere: no --secrets-dir'}"
            if tenant == OPERATORS:
                raise TargetInvalid(f"secret {name!r} is not configured on this worker ({looked})")
            log.warning("secret %r of tenant %r is not configured (%s)", name, tenant, looked)
            raise TargetInvalid(f"secret {name!r} is not configured for tenant {tenant!r}")
        if any(c in value for c in "\r\n\0"):
            raise TargetInvalid(f"secret {name!r} holds a line break or NUL: not a header value")
        return value

    def _folder(self, tenant: str) -> Path | None:
        """Where ``tenant``'s files are: the directory itself for the operators, a folder
        named after the tenant for a tenant (a tenant name has no '/' and no '.', and a
        secret name no '/', so a lookup never leaves it)."""
        if self.directory is None:
            return None
        return self.directory if tenant == OPERATORS else self.directory / tenant

    def _from_file(self, path: Path, name: str) -> str | None:
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

    def headers(self, headers: Mapping[str, str], context: RunContext) -> dict[str, str]:
        """``headers`` with every ``secret:NAME`` value replaced by the secret of the run's
        tenant, each value recorded on ``context.revealed``."""
        out = dict(headers)
        for key, value in headers.items():
            name = secret_name(value)
            if name is not None:
                out[key] = secret = self.resolve(name, context.tenant)
                context.revealed.add(secret)
        return out
