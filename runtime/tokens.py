"""API tokens: who a caller of `cronstream api` is.

The book is a JSON file (``r.API_TOKENS_FILE``, by default the stack's
``security/api-tokens.json``, 0600) mapping the SHA-256 of each token to its holder: a
tenant, or ``*`` for an admin. Tokens themselves are never stored in the book; the
stack keeps each one issued in ``credentials/api-token-<holder>.secret`` for the
operator to hand over. The API re-reads the book when it changes, so a tenant added or
removed takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cronstream.runtime.credentials import credentials_dir, security_dir
from cronstream.runtime.options import roles as r
from cronstream.runtime.settings import Settings

ADMIN = "*"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def book_path(settings: Settings) -> Path:
    named = r.API_TOKENS_FILE.get()
    return Path(named) if named else security_dir(settings) / "api-tokens.json"


def token_path(settings: Settings, holder: str) -> Path:
    name = "admin" if holder == ADMIN else holder
    return credentials_dir(settings) / f"api-token-{name}.secret"


@dataclass
class TokenBook:
    """The holders by token digest, re-read when the file changes."""

    path: Path
    _holders: dict[str, str] | None = None
    _stamp: tuple[int, int] | None = None

    def holder(self, token: str) -> str | None:
        """The tenant (or ADMIN) ``token`` was issued to, or None."""
        return self._load().get(digest(token)) if token else None

    def _load(self) -> dict[str, str]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        stamp = (stat.st_mtime_ns, stat.st_size)
        if self._holders is None or stamp != self._stamp:
            data = json.loads(self.path.read_text() or "{}")
            self._holders = {str(k): str(v) for k, v in data.get("tokens", {}).items()}
            self._stamp = stamp
        return self._holders


def _write(path: Path, holders: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"tokens": holders}, out, indent=1, sort_keys=True)
    temp.replace(path)


def issue_token(settings: Settings, holder: str) -> Path:
    """A token for ``holder`` (a tenant, or ADMIN) unless it has one; the file keeping
    it (0600). Idempotent."""
    book, kept = book_path(settings), token_path(settings, holder)
    holders = TokenBook(book)._load().copy()
    if kept.exists() and holders.get(digest(kept.read_text().strip())) == holder:
        return kept
    token = secrets.token_urlsafe(32)
    kept.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(token)
    holders = {k: v for k, v in holders.items() if v != holder}
    holders[digest(token)] = holder
    _write(book, holders)
    return kept


def revoke_tokens(settings: Settings, holder: str) -> None:
    """Every token of ``holder`` stops working."""
    book = book_path(settings)
    holders = TokenBook(book)._load()
    _write(book, {k: v for k, v in holders.items() if v != holder})
    token_path(settings, holder).unlink(missing_ok=True)
