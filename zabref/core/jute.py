"""Jute's binary encoding, the primitives: what ZooKeeper's records are made of on the wire. Sans-IO.

Theory of operation: ``int`` = big-endian int32, ``long`` = big-endian int64; ``buffer`` = int32 length then the
bytes, length -1 meaning null; ``ustring`` = int32 length then UTF-8 bytes; ``vector<T>`` = int32 count then the
elements, count -1 meaning null. Writers check that a value fits its wire type (`ValueError`: the caller's bug).
`Reader` is a cursor over one body: every read checks the bytes present, and a short body, a negative length, bad
UTF-8, a count larger than the bytes that remain or trailing bytes raise `CodecError` naming what was being decoded
and the byte offset. No length read from the wire is allocated before it is checked against the bytes present.
`Cursor` reads a stream that may still be arriving: a read that needs more bytes than are here raises `Short` (wait
for more), impossible bytes what its ``fail`` makes, and lengths are checked against a limit (`JUTE_MAX`) instead.
`zabref.core.payloads` (packet data) and `zabref.net.wire` (frames, packets, notifications) are built from these.
"""

from __future__ import annotations

import struct

from mypy_extensions import mypyc_attr

from zabref.errors import CodecError

__all__ = ["INT", "LONG", "INT_MAX", "JUTE_MAX", "check_int", "check_long", "buffer", "ustring", "Reader", "Cursor",
           "Short", "bytes_like"]

INT: struct.Struct = struct.Struct(">i")
LONG: struct.Struct = struct.Struct(">q")
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
#: A jute buffer's limit: ZooKeeper's ``jute.maxbuffer`` default (0xfffff) plus the 1024 bytes of
#: ``zookeeper.jute.maxbuffer.extrasize`` it allows; a run that raises ``jute.maxbuffer`` needs this raised too.
JUTE_MAX = 0xFFFFF + 1024


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


@mypyc_attr(allow_interpreted_subclasses=True)  # zktxn.TxnReader, which conformance.zk.txns subclasses
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


class Short(Exception):
    """The bytes end before the value being read does; ``need`` is how many bytes (from the buffer's start) the read
    that stopped needed."""

    def __init__(self, need: int = 0) -> None:
        super().__init__(need)
        self.need = need


@mypyc_attr(allow_interpreted_subclasses=True)  # conformance.zk.stream's reader of ZooKeeper's files
class Cursor:
    """Reads big-endian jute values from ``buf`` at ``pos``; ``what`` names the bytes in errors (`fail`)."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes | bytearray | memoryview, what: str, pos: int = 0) -> None:
        self.buf, self.what, self.pos = buf, what, pos

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def fail(self, reason: str, offset: int | None = None) -> Exception:
        """The error for impossible bytes at ``offset`` (default: here); a subclass may make its own kind."""
        return CodecError(self.what, self.pos if offset is None else offset, reason)

    def take(self, n: int) -> bytes:
        if self.remaining < n:
            raise Short(self.pos + n)
        out = bytes(self.buf[self.pos: self.pos + n])
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def i32(self) -> int:
        return INT.unpack(self.take(4))[0]

    def i64(self) -> int:
        return LONG.unpack(self.take(8))[0]

    def length(self, field: str, limit: int, *, nullable: bool) -> int | None:
        """A jute length or count: -1 is null when ``nullable``; other negatives and values above ``limit`` fail."""
        at = self.pos
        n = self.i32()
        if n == -1 and nullable:
            return None
        if n < 0 or n > limit:
            raise self.fail(f"{field} is {n} (expected 0..{limit})", at)
        return n

    def buffer(self, field: str, limit: int = JUTE_MAX) -> bytes | None:
        n = self.length(f"{field} length", limit, nullable=True)
        return None if n is None else self.take(n)

    def ustring(self, field: str, limit: int = JUTE_MAX) -> str | None:
        at = self.pos
        raw = self.buffer(field, limit)
        if raw is None:
            return None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not UTF-8 ({e.reason})", at + 4 + e.start) from None
