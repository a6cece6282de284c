"""A run's output as the worker keeps it: the last bytes of what an attempt printed or
returned, or the first of an http body (docs/run-output.md). Pure: no I/O, no clock.

An executor returns (or its ``ExecutionFailed`` carries) a ``Result``: an ``Output`` when
it already dropped part of it (a shell command's output read past what it keeps: its
start; an http body read no further: its end), else plain text or bytes (a python
callable's return value, a target plugin's line), or None (nothing to keep: the common,
free case). ``kept`` makes one rule of all of them: at most ``limit`` bytes, cut on a
character boundary, from the end unless the executor kept a start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dropped = Literal["start", "end"]
"""What was not kept of an output: its start (its last bytes are kept) or its end (its
first bytes are kept: an http body read no further)."""


@dataclass(frozen=True, slots=True)
class Output:
    """What an attempt printed or returned, as its executor kept it. ``dropped``: the part
    the executor did not keep (None: all of it is here)."""

    data: str | bytes
    dropped: Dropped | None = None


Result = Output | str | bytes | None
"""What ``Executor.execute`` returns: the attempt's output, or None for none."""


def kept(result: Output | str | bytes, limit: int) -> tuple[str, Dropped | None] | None:
    """(text, dropped) of an attempt's output as the worker keeps it: at most ``limit``
    bytes (the last, or the first when the executor kept a start), decoded as UTF-8 (a
    byte that is not: U+FFFD); None when there is nothing to keep (empty output, or
    ``limit`` 0)."""
    dropped: Dropped | None = None
    if isinstance(result, Output):
        dropped = result.dropped
        result = result.data
    if not result or limit <= 0:
        return None
    if isinstance(result, str):  # a lone surrogate (from a callable) becomes U+FFFD too
        result = result.encode("utf-8", "surrogatepass")
    return _cut(result, limit, dropped)


def fit(text: str, limit: int, dropped: Dropped | None) -> tuple[str, Dropped | None]:
    """``text`` (as ``kept`` gave it, then redacted: a mask may be longer than what it
    hides) cut again to ``limit`` bytes the same way."""
    if len(text) <= limit // 4:  # at most 4 bytes a character: it fits
        return text, dropped
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, dropped
    return _cut(data, limit, dropped)


def _cut(data: bytes, limit: int, dropped: Dropped | None) -> tuple[str, Dropped | None]:
    """``data`` in at most ``limit`` bytes, decoded: its first bytes when the executor
    kept a start (``dropped`` "end"), else its last."""
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), dropped
    if dropped == "end":
        return head(data, limit).decode("utf-8", "replace"), "end"
    return tail(data, limit).decode("utf-8", "replace"), "start"


def tail(data: bytes, limit: int) -> bytes:
    """The last ``limit`` bytes of ``data``, without a character cut in two at the
    start (UTF-8 continuation bytes there are dropped, at most three)."""
    if len(data) <= limit:
        return data
    start = len(data) - limit
    end = min(start + 3, len(data))
    while start < end and 0x80 <= data[start] <= 0xBF:
        start += 1
    return data[start:]


def head(data: bytes, limit: int) -> bytes:
    """The first ``limit`` bytes of ``data``, without a character cut in two at the end
    (a character whose bytes go past ``limit`` is left out whole)."""
    if len(data) <= limit:
        return data
    end = limit
    while end > max(0, limit - 3) and 0x80 <= data[end] <= 0xBF:
        end -= 1
    return data[:end]
