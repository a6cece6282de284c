"""API tokens (runtime.tokens): only digests in the book, issued once, revoked at once."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from cronstream.runtime.settings import Settings
from cronstream.runtime.tokens import (
    ADMIN,
    TokenBook,
    book_path,
    issue_token,
    revoke_tokens,
    token_path,
)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.delenv("CRONSTREAM_API_TOKENS_FILE", raising=False)
    return Settings.from_env({"CRONSTREAM_HOME": str(tmp_path)})


def test_tokens_name_their_holder_and_the_book_keeps_digests_only(settings: Settings) -> None:
    kept = issue_token(settings, "acme")
    assert kept == token_path(settings, "acme")
    assert issue_token(settings, "acme") == kept  # idempotent: the same token
    token = kept.read_text()
    admin = issue_token(settings, ADMIN).read_text()
    book = TokenBook(book_path(settings))
    assert book.holder(token) == "acme"
    assert book.holder(admin) == ADMIN
    assert book.holder("") is None
    assert book.holder(token + "x") is None
    raw = book_path(settings).read_text()
    assert token not in raw
    assert admin not in raw
    assert set(json.loads(raw)["tokens"].values()) == {"acme", ADMIN}
    for path in (kept, book_path(settings)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_revoked_token_stops_working_in_a_running_book(settings: Settings) -> None:
    token = issue_token(settings, "acme").read_text()
    book = TokenBook(book_path(settings))
    assert book.holder(token) == "acme"
    revoke_tokens(settings, "acme")
    assert book.holder(token) is None
    assert not token_path(settings, "acme").exists()
    again = issue_token(settings, "acme").read_text()
    assert again != token
    assert book.holder(again) == "acme"
