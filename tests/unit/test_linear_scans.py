"""Text a tenant controls is scanned in linear time (found by review: the regular
expression that finds URLs in outputs and errors backtracked, "://" + "a." * 32768 took
1.25 s of a worker's loop; a duration's pattern, searched again from every digit, took
330 s for a 64 KiB "every").

Redaction is held to what it did before, character for character, by comparing it with
the old pattern (``_reference``, fine on short texts) over texts built from the shapes
that make scanners slow; its cost is held linear by running 1 MiB of each shape in a
child process that must finish within a generous bound (the quadratic scan needed
minutes for 64 KiB)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronstream.schemas.definition.values import parse_duration
from cronstream.schemas.redact import (
    FULL_URLS,
    MASK,
    MAX_PARSED_QUERY,
    MIN_PART,
    _forms,
    redact_text,
    redact_url,
    scrub,
    sensitive,
)

# The shapes: scheme runs, separators, userinfo, escapes, queries, quotes and spaces.
PIECES = [
    "://",
    "a.",
    "@",
    "%",
    "%2",
    "?x=",
    "?token=t&",
    "&",
    "=",
    ";",
    "#",
    " ",
    '"',
    "'",
    "<",
    ">",
    "\t",
    "\n",
    "a",
    "A",
    "1",
    "_",
    "-",
    "+",
    "/",
    ":",
    "[",
    "]",
    "é",
    "\u212a",
    "HTTP",
    "https://u:pw@h/p?token=s&x=1",
    "key=",
    "%74oken=",
    "sig",
    "\x00",
    "\x1c",
]
texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)

_URL_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"'<>]+")


def _reference(text: str) -> str:
    """Redaction as the old single pattern and urlsplit's cached path did it."""
    return _URL_IN_TEXT.sub(lambda m: _reference_url(m.group(0)), text)


def _reference_url(url: str) -> str:
    """A URL as the old redaction showed it: taken apart by urlsplit, every time."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return f"{url.partition('://')[0]}://{MASK}" if "://" in url else MASK
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query
    if any(sensitive(k) for k, _ in pairs):
        query = urlencode([(k, MASK if sensitive(k) else v) for k, v in pairs], safe="*")
    netloc = re.sub(r"\A.*@", f"{MASK}@", parts.netloc, flags=re.DOTALL)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


@settings(max_examples=3000, deadline=None)
@given(texts)
def test_redaction_is_what_it_was_on_every_shape(text: str) -> None:
    assert redact_text(text) == _reference(text)
    for url in (f"a://{text}", f"http://{text}", f"H://h/{text}"):
        assert redact_url(url) == _reference_url(url)


@settings(max_examples=500, deadline=None)
@given(texts, texts)
def test_no_credential_survives_among_hostile_shapes(before: str, after: str) -> None:
    text = f"{before} https://bob:hunter2@h.example/x?token=t0psecret&page=2 {after}"
    shown = redact_text(text)
    assert "hunter2" not in shown
    assert "t0psecret" not in shown


@settings(max_examples=200, deadline=None)
@given(texts, st.integers(min_value=FULL_URLS - 2, max_value=FULL_URLS + 70))
def test_past_the_urls_redacted_one_by_one_no_credential_survives_either(
    noise: str, many: int
) -> None:
    """A text of thousands of URLs is redacted coarsely past ``FULL_URLS`` (URL by URL it
    held the worker's loop 20-50 ms a 64 KiB): still no userinfo and no query shown."""
    secret = " https://bob:hunter2@h.example/x?token=t0psecret&page=2 "
    shown = redact_text(noise + secret * many + noise)
    assert "hunter2" not in shown
    assert "t0psecret" not in shown
    assert shown.count("h.example/x") == many  # the hosts and paths are kept


def test_a_query_too_long_to_take_apart_is_masked_whole() -> None:
    long = "a=1&" * (MAX_PARSED_QUERY // 4 + 1)
    assert redact_url(f"https://h.example/p?{long}token=x") == "https://h.example/p?***"
    assert redact_url("https://h.example/p?a=1&token=x") == "https://h.example/p?a=1&token=***"


def _reference_scrub(text: str, values: list[str]) -> str:
    """The edges as ``scrub`` cut them before: each place a form could start, tried."""
    forms = sorted({f for v in values for f in _forms(v)}, key=len, reverse=True)
    for form in forms:
        text = text.replace(form, MASK)
    for form in forms:
        for start in range(max(0, len(text) - len(form) + 1), len(text) - MIN_PART + 1):
            if form.startswith(text[start:]):
                text = text[:start] + MASK
                break
    for form in forms:
        for end in range(min(len(text), len(form) - 1), MIN_PART - 1, -1):
            if form.endswith(text[:end]):
                text = MASK + text[end:]
                break
    return text


periodic = st.text(alphabet='ab%+ \\"B', max_size=30)


@settings(max_examples=3000, deadline=None)
@given(periodic, st.lists(periodic, max_size=3), st.booleans())
def test_scrub_cuts_what_it_cut_on_every_shape(text: str, values: list[str], bearer: bool) -> None:
    if bearer:
        values = [*values, f"Bearer {text[:12]}"]
    assert scrub(text, values) == _reference_scrub(text, values)


# Each shape at 1 MiB: quadratic scans took minutes at 64 KiB; linear ones take about a
# second together, even on a busy machine.
_SHAPES = textwrap.dedent(
    """
    from cronstream.schemas.definition.values import parse_duration
    from cronstream.schemas.redact import redact_text, scrub

    n = 1 << 20
    for text in ("://" + "a." * (n // 2), "a." * (n // 2) + ":// ", "1a." * (n // 3),
                 "a://" * (n // 4), "a:// " * (n // 5), "://" * (n // 3),
                 "a://h/" + "?x=" * (n // 3), "a://" + "@" * n, "a.a://x " * (n // 8)):
        redact_text(text)
    scrub("b" + "a" * (n - 2) + "b", ["a" * n])  # a secret's start at the end, almost
    for text in ("1" * n + "x", "1." * (n // 2), "1s" * 400 + "1" * n):
        try:
            parse_duration(text)
        except ValueError:
            pass
    """
)


def test_hostile_shapes_cost_linear_time() -> None:
    root = Path(__file__).resolve().parents[2]  # this tree's code, not an installed copy
    subprocess.run([sys.executable, "-c", _SHAPES], check=True, timeout=120, cwd=root)


def test_a_duration_is_read_part_by_part() -> None:
    assert parse_duration("1h30m") == 5_400_000
    assert parse_duration("1.5s500ms") == 2000
    for bad in ("1" * 30 + "x", "1.5.5s", "5 m x", "1s" * 600):
        with pytest.raises(ValueError, match=r"not a duration|over 1024"):
            parse_duration(bad)


def test_a_text_of_thousands_of_urls_takes_apart_only_the_first_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each URL taken apart costs Python work (~4-30 us); 4,096 URLs of an output held the
    worker's loop ~50 ms. Past ``FULL_URLS`` the regex engine masks the rest."""
    from cronstream.schemas import redact

    calls: list[str] = []
    whole = redact.redact_url

    def counted(url: str) -> str:
        calls.append(url)
        return whole(url)

    monkeypatch.setattr(redact, "redact_url", counted)
    shown = redact.redact_text("a://u:p@h?token=1 " * 4096)
    assert len(calls) == FULL_URLS
    assert "u:p@" not in shown
    assert "token=1" not in shown
