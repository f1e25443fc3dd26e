"""A cursor over a recorded byte stream that tells a stream cut short from a stream that is wrong.

Theory of operation
-------------------
`zabref.core.jute.Reader` reads one complete body and fails on anything short. A recorded TCP stream is different:
its last record may stop in the middle (the sender was killed while writing, or the recording stopped), and that is
a fact to report, not an error. ZooKeeper's bytes are read by zabref's own codec of them, `zabref.net.zkwire`, whose
readers raise `Short` when a read needs more bytes than the stream holds -- only possible at its end -- and call
the cursor's ``fail`` when the bytes present are impossible. `Cursor` here is that codec's cursor with ``fail``
making a `WireError` naming the recorded stream and the byte offset; a decoder catches `Short` at a record's start
and reports the record as a truncated tail. Lengths are checked against limits before anything is allocated
(`JUTE_MAX`: ZooKeeper's ``jute.maxbuffer`` default plus its extra 1024 bytes).
"""

from __future__ import annotations

from conformance.zk import WireError
from zabref.net import zkwire
from zabref.net.zkwire import JUTE_MAX, Short

__all__ = ["Cursor", "Short", "JUTE_MAX"]


class Cursor(zkwire.Cursor):
    """`zabref.net.zkwire.Cursor` over a recorded stream; ``where`` names the stream in its WireErrors."""

    __slots__ = ()

    def __init__(self, buf: bytes | memoryview, where: str, pos: int = 0) -> None:
        super().__init__(buf, where, pos)

    @property
    def where(self) -> str:
        return self.what

    def fail(self, reason: str, offset: int | None = None) -> WireError:
        return WireError(self.what, self.pos if offset is None else offset, reason)
