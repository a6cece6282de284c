"""Avro's binary encoding by hand, for the few hot paths that skip fastavro: zig-zag
varints (int/long, enum and union indexes) and length-prefixed UTF-8 strings.

Reading raises HeadError for bytes that are not what the layout says, and lets
IndexError (the record ended early) and a string's UnicodeDecodeError through; callers
turn all three into a DecodeError.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from cronstream.schemas.errors import HeadError

V = TypeVar("V")

_ONE_BYTE = [bytes([n]) for n in range(0x80)]
# Varints of 14 bits: the last two bytes (``_TWO_BYTES``) or two with more to come.
_TWO_BYTES = [bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(0x4000)]
_MORE_14 = [bytes([(n & 0x7F) | 0x80, (n >> 7) | 0x80]) for n in range(0x4000)]
# A long is at most 10 varint bytes.
_MAX_VARINT = 10
# timestamp-millis values fastavro can read (years 1-9999); it refuses the others.
FIRST_MS, LAST_MS = -62_135_596_800_000, 253_402_300_799_999
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def zigzag(n: int) -> bytes:
    """Avro's int/long encoding: zig-zag, then little-endian base-128 varint (written
    14 bits at a time from tables: a millisecond timestamp is 6 bytes)."""
    n = (n << 1) ^ (n >> 63)
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:
        return _TWO_BYTES[n]
    out = _MORE_14[n & 0x3FFF]
    n >>= 14
    while n >= 0x4000:
        out += _MORE_14[n & 0x3FFF]
        n >>= 14
    return out + (_ONE_BYTE[n] if n < 0x80 else _TWO_BYTES[n])


def avro_string(text: str) -> bytes:
    data = text.encode()
    return zigzag(len(data)) + data


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the zig-zag varint at ``pos`` (IndexError past the
    end: the callers catch it once around a whole head)."""
    byte = data[pos]
    if byte < 0x80:  # most values: one byte
        return (byte >> 1) ^ -(byte & 1), pos + 1
    shift = n = 0
    while True:
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            if n >> 64:
                raise HeadError("varint longer than 64 bits")
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise HeadError("varint longer than 64 bits")


def read_int(data: bytes, pos: int) -> tuple[int, int]:
    """An Avro int: a varint within 32 bits."""
    value, pos = read_long(data, pos)
    if not INT_MIN <= value <= INT_MAX:
        raise HeadError(f"int {value} is outside 32 bits")
    return value, pos


def read_instant(data: bytes, pos: int) -> tuple[int, int]:
    """A timestamp-millis long that a datetime can hold (as fastavro insists)."""
    ms, pos = read_long(data, pos)
    if not FIRST_MS <= ms <= LAST_MS:
        raise HeadError(f"instant {ms} ms is outside years 1-9999")
    return ms, pos


def read_string(data: bytes, pos: int) -> tuple[str, int]:
    head = data[pos]
    if head < 0x80 and not head & 1:  # a length under 64: one byte
        end = pos + 1 + (head >> 1)
        if end > len(data):
            raise HeadError(f"string of {head >> 1} bytes at {pos + 1} runs past the record")
        return data[pos + 1 : end].decode(), end
    size, pos = read_long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise HeadError(f"string of {size} bytes at {pos} runs past the record")
    return data[pos:end].decode(), end


def last_varint_start(data: bytes, floor: int) -> int:
    """Where the varint that ends the record begins (not before ``floor``): a varint's
    last byte is its only one below 0x80, so the one before it ends the field before."""
    end = len(data) - 1
    if end < floor or data[end] >= 0x80:
        raise HeadError("record does not end with a number")
    start = end
    while start > floor and data[start - 1] >= 0x80:
        start -= 1
    if end - start >= _MAX_VARINT:
        raise HeadError("varint longer than 64 bits")
    return start


class Tails(Generic[V]):
    """What the hand readers remember per *tail* (the bytes after a record's head, the
    same for every record of one definition): at most ``limit`` tails and ``max_bytes``
    of them (a tail can be a megabyte), forgotten all at once when full."""

    def __init__(self, limit: int = 4096, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.limit = limit
        self.max_bytes = max_bytes
        self._size = 0
        self._known: dict[bytes, V] = {}

    def get(self, tail: bytes) -> V | None:
        return self._known.get(tail)

    def put(self, tail: bytes, value: V) -> None:
        if len(self._known) >= self.limit or self._size + len(tail) > self.max_bytes:
            self._known.clear()
            self._size = 0
        self._known[tail] = value
        self._size += len(tail)
