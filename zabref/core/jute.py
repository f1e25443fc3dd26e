"""Jute's binary encoding, the primitives: what ZooKeeper's records are made of on the wire. Sans-IO.

Theory of operation: ``int`` = big-endian int32, ``long`` = big-endian int64; ``buffer`` = int32 length then the
bytes, length -1 meaning null; ``ustring`` = int32 length then UTF-8 bytes; ``vector<T>`` = int32 count then the
elements, count -1 meaning null. Writers check that a value fits its wire type (`ValueError`: the caller's bug).
`Reader` is a cursor over one body: every read checks the bytes present, and a short body, a negative length, bad
UTF-8, a count larger than the bytes that remain or trailing bytes raise `CodecError` naming what was being decoded
and the byte offset. No length read from the wire is allocated before it is checked against the bytes present.
`zabref.core.payloads` (packet data) and `zabref.net.wire` (frames, packets, notifications) are built from these.
"""

from __future__ import annotations

import struct

from zabref.errors import CodecError

__all__ = ["INT", "LONG", "INT_MAX", "check_int", "check_long", "buffer", "ustring", "Reader", "bytes_like"]

INT = struct.Struct(">i")
LONG = struct.Struct(">q")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def check_int(name: str, value: int) -> int:
    if not INT_MIN <= value <= INT_MAX:
        raise ValueError(f"{name} = {value} does not fit in a signed 32-bit int")
    return value


def check_long(name: str, value: int) -> int:
    if not LONG_MIN <= value <= LONG_MAX:
        raise ValueError(f"{name} = {value} does not fit in a signed 64-bit long")
    return value


def buffer(name: str, value: bytes | None) -> bytes:
    if value is None:
        return INT.pack(-1)
    if len(value) > INT_MAX:
        raise ValueError(f"{name} is {len(value)} bytes, more than a jute buffer holds")
    return INT.pack(len(value)) + bytes(value)


def ustring(name: str, value: str) -> bytes:
    return buffer(name, value.encode("utf-8"))


class Reader:
    """A cursor over one body; every read checks the bytes present and names ``what`` and the offset on failure."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.buf = memoryview(data)
        self.pos = 0
        self.what = what

    def fail(self, reason: str, offset: int | None = None) -> CodecError:
        return CodecError(self.what, self.pos if offset is None else offset, reason)

    def _take(self, n: int, field: str) -> memoryview:
        if len(self.buf) - self.pos < n:
            raise self.fail(f"{field} needs {n} bytes, only {len(self.buf) - self.pos} remain")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i32(self, field: str) -> int:
        return INT.unpack(self._take(4, field))[0]

    def i64(self, field: str) -> int:
        return LONG.unpack(self._take(8, field))[0]

    def count(self, field: str, min_element_size: int, *, nullable: bool) -> int:
        """A count; if nullable, -1 (a null vector) reads as 0. A count that cannot fit in the bytes left fails now."""
        start = self.pos
        n = self.i32(field)
        if n == -1 and nullable:
            return 0
        if n < 0:
            raise self.fail(f"{field} is negative ({n})", start)
        remaining = len(self.buf) - self.pos
        if n * min_element_size > remaining:
            raise self.fail(f"{field} is {n} but only {remaining} bytes remain", start)
        return n

    def buffer(self, field: str, *, nullable: bool = True) -> bytes | None:
        start = self.pos
        n = self.i32(f"{field} length")
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.fail(f"{field} length is {n}", start)
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{field} length is {n} but only {len(self.buf) - self.pos} bytes remain", start)
        return bytes(self._take(n, field))

    def ustring(self, field: str) -> str:
        start = self.pos
        raw = self.buffer(field, nullable=False)
        assert raw is not None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not valid UTF-8 ({e.reason})", start + 4 + e.start) from None

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} trailing bytes")


def bytes_like(data: object, what: str) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(what, 0, f"expected bytes, got {type(data).__name__}")
    return bytes(data)
