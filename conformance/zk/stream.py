"""A cursor over a recorded byte stream that tells a stream cut short from a stream that is wrong.

Theory of operation
-------------------
`zabref.core.jute.Reader` reads one complete body and fails on anything short. A recorded TCP stream is different:
its last record may stop in the middle (the sender was killed while writing, or the recording stopped), and that is
a fact to report, not an error. So `Cursor` raises `Short` when a read needs more bytes than the stream holds -- only
possible at its end -- and `WireError` (naming the stream and the byte offset) when the bytes present are impossible:
a negative length, a length or count beyond the limit the receiver enforces, text that is not UTF-8. A decoder
catches `Short` at a record's start and reports the record as a truncated tail.

Lengths are checked against limits before anything is allocated: `JUTE_MAX` for a jute buffer (ZooKeeper's
``jute.maxbuffer`` default, 0xfffff, plus the 1024 bytes of ``zookeeper.jute.maxbuffer.extrasize`` it allows; a
run that raises ``jute.maxbuffer`` needs this raised too).
"""

from __future__ import annotations

import struct

from conformance.zk import WireError

__all__ = ["Cursor", "Short", "JUTE_MAX"]

JUTE_MAX = 0xFFFFF + 1024
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Short(Exception):
    """The stream ends before the value being read does."""


class Cursor:
    """Reads big-endian jute values from ``buf`` at ``pos``; ``where`` names the stream in errors."""

    __slots__ = ("buf", "pos", "where")

    def __init__(self, buf: bytes | memoryview, where: str, pos: int = 0) -> None:
        self.buf, self.where, self.pos = buf, where, pos

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def fail(self, reason: str, offset: int | None = None) -> WireError:
        return WireError(self.where, self.pos if offset is None else offset, reason)

    def take(self, n: int) -> bytes:
        if self.remaining < n:
            raise Short()
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def i32(self) -> int:
        return _I32.unpack(self.take(4))[0]

    def i64(self) -> int:
        return _I64.unpack(self.take(8))[0]

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
