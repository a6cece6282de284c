"""What never appears in what cronstream prints or records: credentials and raw controls.

Secrets by reference: a header value ``secret:NAME`` names a secret the worker resolves
from its own configuration at run time (``consumers.executors.secrets``), so the value
never travels in a topic, the history or the dead-letter queue. Such a reference is shown
as it is: it names the secret, it is not one.

Everything else that may hold a credential is redacted wherever cronstream shows or
keeps it (CLI output, run errors, history): the userinfo of a URL (``https://***@host``),
query parameters with a sensitive name (``?token=***``), the values of sensitive headers
(``Authorization``, ``Cookie``, any name with ``token``, ``secret``, ``password``, ``key``,
``auth``, ``session`` or ``credential`` in it, ``sig`` and ``key``). That one list
(``sensitive``) also decides which headers a worker drops when a redirect leaves the
origin the job named. Control characters (and Unicode format characters that reorder
text, like U+202E) are escaped (``\\x1b``) when shown.

A secret value a worker resolved for a run is scrubbed (``scrub``) from every text about
that run before it leaves the worker, however the target echoed it back.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import (
    SplitResult,
    parse_qsl,
    quote,
    quote_plus,
    urlencode,
    urlsplit,
    urlunsplit,
)

MASK = "***"
# URLs of one text redacted one by one (~4 us a URL in Python, more through urllib's
# parsers); past them the rest of the text in two passes of the regex engine
# (``_coarse``), so an output of thousands of URLs does not hold the worker's loop
# 20-50 ms a 64 KiB.
FULL_URLS = 64
# A query longer than this is masked whole rather than taken apart (a URL carries a
# few hundred characters of query; a tenant's output can carry 64 KiB of one).
MAX_PARSED_QUERY = 4096
# Possessive runs that stop at the next "/" (so at the next "://"): linear.
_COARSE_USERINFO = re.compile(r"://[^\s\"'<>/?#@]*+@")
_COARSE_QUERY = re.compile(r"\?[^\s\"'<>]++")
SECRET_REF = re.compile(r"secret:([A-Za-z0-9][A-Za-z0-9_.-]{0,127})\Z")
_SENSITIVE = re.compile(
    r"auth|cookie|token|secret|passw|pwd|api[-_]?key|access[-_]?key|private[-_]?key"
    r"|signature|^sig$|^key$|session|credential",
    re.IGNORECASE,
)
# A URL inside free text: a scheme (a letter at a word's start, then letters, digits,
# ``+ . -``), ``://``, and at least one character up to a space, a quote or ``<>``. Found
# in linear time by three patterns that cannot backtrack: ``_SCHEME_RUN`` starts only
# where a run of scheme characters starts (the lookbehind) and takes the run whole
# (possessive), so each character is read once; the URL's first letter is then searched
# inside that run, and its end is one more possessive run. One pattern
# (``\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>]+``) restarted at every word start inside a
# long run and read the run again from there: quadratic ("://" + "a." * 32768, 64 KiB:
# 1.25 s of a worker's loop per attempt).
_SCHEME_RUN = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z0-9+.-]++://(?=[^\s\"'<>])")
_SCHEME_START = re.compile(r"\b[a-zA-Z]")
_URL_REST = re.compile(r"[^\s\"'<>]++")
# A URL that ``redact_url`` gives back as it is: a lower-case scheme, a host, and none of
# what holds a credential (``@``: userinfo; ``?``: a query) or what urlsplit checks or
# rewrites (``[ ]``: an IPv6 host; tabs and line breaks, which it drops; an upper-case
# scheme; an empty fragment; non-ASCII, see ``_split``). Taking it apart and putting it
# together again costs a few µs a URL, and an output of 64 KiB may hold 10,000 of them.
_PLAIN_URL = re.compile(r"[a-z][a-z0-9+.-]*+://[^/#@?\[\]\t\r\n][^@?\[\]\t\r\n]*+\Z")
# urlsplit's parts of a URL it does not check or rewrite (ASCII, no IPv6 host, no tabs or
# line breaks): the scheme, then the host up to "/", "?" or "#", the path up to "?" or
# "#", the query after the first "?" up to the first "#", the fragment after it.
_URL_PARTS = re.compile(
    r"([a-zA-Z][a-zA-Z0-9+.-]*+)://([^/?#\[\]\t\r\n]*+)(?=[/?#]|\Z)([^?#\t\r\n]*+)"
    r"(?:\?([^#\t\r\n]*+))?(?:#([^\t\r\n]*+))?\Z"
)
# urlsplit's own cache (functools.lru_cache, 128 entries of any length) would keep the
# last 128 URLs found in outputs alive, each up to an output's size: not used here.
_urlsplit: Callable[[str], SplitResult] = getattr(urlsplit, "__wrapped__", urlsplit)
_AUTH_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*\s+(\S.*)\Z", re.DOTALL)
# A part of a value (the credential after ``Bearer``, the start of a value that a length
# cap cut) is scrubbed only from this many characters: shorter ones are common text.
MIN_PART = 6


def secret_name(value: str) -> str | None:
    """The NAME of a ``secret:NAME`` reference, or None for a plain value."""
    match = SECRET_REF.match(value)
    return match.group(1) if match else None


def sensitive(name: str) -> bool:
    """Whether a header or query parameter of this name may carry a credential."""
    return bool(_SENSITIVE.search(name))


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        name: value if not sensitive(name) or secret_name(value) else MASK
        for name, value in headers.items()
    }


def redact_url(url: str) -> str:
    """``url`` without its userinfo's secret and sensitive query values."""
    if _PLAIN_URL.match(url) and url.isascii() and url.find("#") != len(url) - 1:
        return url  # what taking it apart and putting it together would give back
    try:
        scheme, netloc, path, query, fragment = _split(url)
        if "@" in netloc:
            netloc = f"{MASK}@{netloc.rpartition('@')[2]}"
        if len(query) > MAX_PARSED_QUERY:
            query = MASK  # parse_qsl and urlencode of 64 KiB: 30-75 ms of the loop
        elif query and _may_name_a_secret(query):
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(sensitive(k) for k, _ in pairs):
                query = urlencode([(k, MASK if sensitive(k) else v) for k, v in pairs], safe="*")
        return urlunsplit((scheme, netloc, path, query, fragment))
    except ValueError:  # not a URL we can take apart: keep nothing after the scheme
        scheme, sep, _ = url.partition("://")
        return f"{scheme}://{MASK}" if sep else MASK


def _split(url: str) -> tuple[str, str, str, str, str]:
    """urlsplit's parts of ``url``: an ASCII URL of the usual shape by ``_URL_PARTS``
    (~1 µs), any other by urlsplit itself (~5 µs; raises ValueError)."""
    parts = _URL_PARTS.match(url)
    if parts is None or not url.isascii():
        scheme, netloc, path, query, fragment = _urlsplit(url)
        return scheme, netloc, path, query, fragment
    return parts[1].lower(), parts[2], parts[3], parts[4] or "", parts[5] or ""


def _may_name_a_secret(query: str) -> bool:
    """Whether a query may have a sensitive parameter name: a name without ``%`` is
    judged as written (``+`` read as a space changes no verdict); one with ``%`` is
    left to ``parse_qsl`` to decode."""
    names = [field.partition("=")[0] for field in query.split("&")]
    return any("%" in name or sensitive(name) for name in names)


def redact_text(text: str) -> str:
    """Every URL inside a free text (an error message, a run's output) redacted: the
    first ``FULL_URLS`` as ``redact_url`` does; past them the rest of the text coarsely
    (``_coarse``)."""
    if "://" not in text:
        return text
    out: list[str] = []
    done = 0  # text[:done] is in out
    urls = 0
    for run in _SCHEME_RUN.finditer(text):
        if run.start() < done:
            continue  # inside the URL just redacted (a run cannot cross its end)
        start = _SCHEME_START.search(text, run.start(), run.end() - 3)
        if start is None:
            continue  # no letter at a word's start before "://" ("1://x", "_a://x")
        if urls == FULL_URLS:
            out += (text[done : start.start()], _coarse(text[start.start() :]))
            return "".join(out)
        urls += 1
        end = _URL_REST.match(text, run.end())
        assert end is not None  # _SCHEME_RUN looked ahead at its first character
        out += (text[done : start.start()], redact_url(text[start.start() : end.end()]))
        done = end.end()
    if not out:
        return text
    out.append(text[done:])
    return "".join(out)


def _coarse(text: str) -> str:
    """``text`` with every userinfo (``scheme://***@``) and every ``?`` and what follows
    it up to a space or quote (``?***``) masked, in two passes of the regex engine
    with a fixed replacement (no Python per match): a text of thousands of URLs cost
    20-50 ms of the worker's loop a 64 KiB output URL by URL. It masks more than the
    URLs' parts (any ``?word``): only for a text past ``FULL_URLS``."""
    return _COARSE_QUERY.sub("?" + MASK, _COARSE_USERINFO.sub("://" + MASK + "@", text))


def scrub(text: str, values: Iterable[str]) -> str:
    """``text`` with each of ``values`` replaced by ``***`` wherever it occurs: as is,
    percent-encoded, JSON-escaped, the credential after an auth scheme (``Bearer X``: X
    too), at the very end of the text the start of one (a body cut at a length cap), and
    at the very start the end of one (an output whose start was dropped: its last bytes
    are kept). A part shorter than ``MIN_PART`` characters is left."""
    forms = sorted({form for value in values for form in _forms(value)}, key=len, reverse=True)
    for form in forms:
        text = text.replace(form, MASK)
    for form in forms:  # the text ends with the start of one
        cut = _overlap(text[max(0, len(text) - len(form) + 1) :], form)
        if cut >= MIN_PART:
            text = text[: len(text) - cut] + MASK
    for form in forms:  # the text starts with the end of one
        cut = _overlap(form, text[: len(form) - 1])
        if cut >= MIN_PART:
            text = MASK + text[cut:]
    return text


def _overlap(a: str, b: str) -> int:
    """The length of the longest end of ``a`` that ``b`` starts with, by Knuth, Morris
    and Pratt's failure table: linear. Trying each place where it could start was
    quadratic in a secret's length (a 16 KiB secret: ~60 ms an attempt)."""
    if not a or not b:
        return 0
    fail = [0] * len(b)  # fail[i]: the longest proper start of b[: i + 1] that ends it
    k = 0
    for i in range(1, len(b)):
        while k and b[i] != b[k]:
            k = fail[k - 1]
        if b[i] == b[k]:
            k += 1
        fail[i] = k
    matched = 0
    for char in a:
        if matched == len(b):
            matched = fail[matched - 1]
        while matched and char != b[matched]:
            matched = fail[matched - 1]
        if char == b[matched]:
            matched += 1
    return matched


def _forms(value: str) -> set[str]:
    if not value:
        return set()
    found = {value}
    scheme = _AUTH_SCHEME.match(value)
    if scheme and len(scheme.group(1)) >= MIN_PART:
        found.add(scheme.group(1))
    for part in list(found):
        found.update((quote(part, safe=""), quote_plus(part), json.dumps(part)[1:-1]))
    return found


def clip(text: str, most: int) -> str:
    """``text`` cut to ``most`` characters, the cut marked "…" (a reason or an id that a
    record echoes: a 400 KB job id echoed whole made an answer the broker refused)."""
    return text if len(text) <= most else text[: most - 1] + "…"


def escape_controls(text: str) -> str:
    """Control and bidi-format characters shown as escapes, so that a record cannot move
    the cursor, recolour or reorder a terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else _escape(ch) for ch in text)


def _escape(ch: str) -> str:
    if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
        return ch  # printable in a terminal (e.g. a non-breaking space)
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def redact_jsonable(value: Any) -> Any:
    """A record as plain JSON values (``schemas.events.to_jsonable``) with its URLs,
    sensitive headers and errors redacted."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "headers" and isinstance(item, Mapping):
                out[key] = redact_headers({str(k): str(v) for k, v in item.items()})
            elif key == "url" and isinstance(item, str):
                out[key] = redact_url(item)
            elif isinstance(item, str):
                out[key] = redact_text(item)
            else:
                out[key] = redact_jsonable(item)
        return out
    if isinstance(value, list):
        return [redact_jsonable(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
