"""ZooKeeper transactions as they cross the wire (PROPOSAL data) and lie in the transaction log, for reports.

Theory of operation
-------------------
zabref reads ZooKeeper's transactions itself (`zabref.core.zktxn`: the layout of every type, and `decode_txn`, one
complete body to a dict, with a `zabref.errors.CodecError` naming the offset for anything else, which the callers
here turn into a `WireError` naming the stream or file). What this module adds is a report's view of a node's data:
its length and its first 32 bytes as text (`TxnReader.data`), not the bytes themselves.
"""

from __future__ import annotations

from typing import Any

from zabref.core import zktxn
from zabref.core.zktxn import OPS

__all__ = ["OPS", "TxnReader", "decode_txn"]


class TxnReader(zktxn.TxnReader):
    """zabref's transaction reader with a data field summarized for a report."""

    __slots__ = ()

    def data(self, field: str) -> dict[str, Any]:
        raw = self.buffer(field)
        return {"data_len": None if raw is None else len(raw),
                "data": None if raw is None else raw[:32].decode("utf-8", "replace")}


def decode_txn(data: bytes, what: str) -> dict[str, Any]:
    """`zabref.core.zktxn.decode_txn` with the data fields summarized (`TxnReader`)."""
    return zktxn.decode_txn(data, what, TxnReader)
