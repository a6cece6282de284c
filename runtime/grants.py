"""Where the admission and the workers find the tenants' grants (``schemas.policy``).

Two sources, added together: the ``--grant TENANT:KIND=VALUE`` flags a process was
started with, and the policy file (``--policy FILE``, ``r.TENANT_POLICY``, by default
the stack's ``security/tenant-grants``): one grant a line, ``#`` starts a
comment. The file is re-read when it changes (checked at most once a second), so a
grant added or withdrawn takes effect without a restart; a file that cannot be read
whole keeps the grants read before and logs why once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path

from cronstream.runtime.credentials import security_dir
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings
from cronstream.schemas.errors import GrantError
from cronstream.schemas.policy import TenantPolicy

log = logging.getLogger("cronstream.grants")
CHECK_EVERY_S = 1.0


def policy_path(settings: Settings, named: str | None = None) -> Path:
    given = named or r.TENANT_POLICY.get()
    return Path(given) if given else security_dir(settings) / "tenant-grants"


def read_grants(path: Path) -> list[str]:
    """The grants of a policy file (none when there is no file); GrantError when a line
    is not a grant, naming the line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = [line.partition("#")[0].strip() for line in text.splitlines()]
    grants = [line for line in lines if line]
    try:
        TenantPolicy(grants)
    except GrantError as exc:
        raise GrantError(f"{path}: {exc}") from None
    return grants


class PolicyBook:
    """The current ``TenantPolicy`` of the flags and the file."""

    def __init__(self, flags: Iterable[str], path: Path | None) -> None:
        self.flags = tuple(flags)
        TenantPolicy(self.flags)  # a bad flag is refused at start
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._policy = TenantPolicy(self.flags)
        self._load()

    def current(self) -> TenantPolicy:
        now = time.monotonic()
        if self.path is not None and now - self._checked >= CHECK_EVERY_S:
            self._checked = now
            self._load()
        return self._policy

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            stat = self.path.stat()
            stamp: tuple[int, int] | None = (stat.st_mtime_ns, stat.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            self._policy = TenantPolicy((*self.flags, *read_grants(self.path)))
        except (GrantError, OSError) as exc:
            log.error("tenant policy file not used (the grants before stay): %s", exc)
            return
        log.info("tenant policy: %d tenants with grants", len(self._policy.grants))
