"""ZooKeeper transactions as they cross the wire (PROPOSAL data) and lie in the transaction log.

Theory of operation
-------------------
A transaction is ``TxnHeader {long clientId; int cxid; long zxid; long time; int type}``, then the record its type
names, then -- since 3.6, when digests are on (the default) -- ``TxnDigest {int version; long treeDigest}``
(``Util.marshallTxnEntry``; read back by ``SerializeUtils.deserializeTxn``). The records (``zookeeper.jute``, module
``org.apache.zookeeper.txn``) by type:

=========================  ============================================================================
type                       record
=========================  ============================================================================
create 1, create2 15       CreateTxn {ustring path; buffer data; vector<ACL> acl; boolean ephemeral; int parentCVersion}
createContainer 19         CreateContainerTxn {path; data; acl; int parentCVersion}
createTTL 21               CreateTTLTxn {path; data; acl; int parentCVersion; long ttl}
delete 2, deleteContainer  DeleteTxn {ustring path}
20
setData 5, reconfig 16     SetDataTxn {ustring path; buffer data; int version}
setACL 7                   SetACLTxn {ustring path; vector<ACL> acl; int version}
check 13 (in a multi)      CheckVersionTxn {ustring path; int version}
createSession -10          CreateSessionTxn {int timeOut}
closeSession -11           CloseSessionTxn {vector<ustring> paths2Delete} (absent before 3.6)
error -1                   ErrorTxn {int err}
multi 14                   MultiTxn {vector<Txn {int type; buffer data}>}, each data one of the above
=========================  ============================================================================

`decode_txn` reads one complete body with `zabref.core.zktxn.TxnReader` and returns its fields as a plain dict; after
the record exactly 0 bytes (no digest) or 12 (a digest) may remain, anything else is a `zabref.errors.CodecError`
naming the offset, which the callers turn into a `WireError` naming the stream or file.
"""

from __future__ import annotations

from typing import Any

from zabref.core import zktxn
from zabref.core.zktxn import DIGEST_BYTES
from zabref.errors import CodecError

__all__ = ["OPS", "TxnReader", "decode_txn"]

OPS = {1: "create", 2: "delete", 5: "setData", 7: "setACL", 13: "check", 14: "multi", 15: "create2",
       16: "reconfig", 19: "createContainer", 20: "deleteContainer", 21: "createTTL", -10: "createSession",
       -11: "closeSession", -1: "error"}


class TxnReader(zktxn.TxnReader):
    """zabref's transaction reader (a jute boolean, ACLs) plus a data field summarized for a report."""

    __slots__ = ()

    def data(self, field: str) -> dict[str, Any]:
        raw = self.buffer(field)
        return {"data_len": None if raw is None else len(raw),
                "data": None if raw is None else raw[:32].decode("utf-8", "replace")}


def _body(r: TxnReader, op: int) -> dict[str, Any]:
    name = OPS.get(op)
    if name is None:
        raise r.fail(f"unknown transaction type {op}")
    if name in ("create", "create2", "createContainer", "createTTL"):
        out = {"path": r.ustring("path"), **r.data("data"), "acl": r.acls("acl")}
        if name in ("create", "create2"):
            out["ephemeral"] = r.boolean("ephemeral")
        out["parentCVersion"] = r.i32("parentCVersion")
        if name == "createTTL":
            out["ttl"] = r.i64("ttl")
        return out
    if name in ("delete", "deleteContainer"):
        return {"path": r.ustring("path")}
    if name in ("setData", "reconfig"):
        return {"path": r.ustring("path"), **r.data("data"), "version": r.i32("version")}
    if name == "setACL":
        return {"path": r.ustring("path"), "acl": r.acls("acl"), "version": r.i32("version")}
    if name == "check":
        return {"path": r.ustring("path"), "version": r.i32("version")}
    if name == "createSession":
        return {"timeout": r.i32("timeOut")}
    if name == "closeSession":
        start = r.pos
        try:  # the record is absent before 3.6: then only a digest, if any, follows the header
            paths = [r.ustring("path") for _ in range(r.count("paths2Delete", 4, nullable=True))]
            if len(r.buf) - r.pos in (0, DIGEST_BYTES):
                return {"paths2Delete": paths}
        except CodecError:
            pass
        r.pos = start
        return {}
    if name == "error":
        return {"err": r.i32("err")}
    # multi
    ops = []
    for _ in range(r.count("txns", 8, nullable=True)):
        inner_op = r.i32("txn type")
        at = r.pos + 4
        raw = r.buffer("txn data") or b""
        inner = TxnReader(raw, f"{r.what} (multi op at byte {at})")
        try:
            fields = _body(inner, inner_op) if inner_op != -1 or raw else {}
            inner.end()
        except CodecError as e:
            raise r.fail(f"multi op {OPS.get(inner_op, inner_op)}: {e.reason}", at + e.offset) from None
        ops.append({"op": OPS.get(inner_op, str(inner_op)), **fields})
    return {"ops": ops}


def decode_txn(data: bytes, what: str) -> dict[str, Any]:
    """TxnHeader + record (+ digest) -> a dict: op, session (hex), cxid, zxid, time, the record's fields, digest."""
    r = TxnReader(data, what)
    session, cxid, zxid, when, op = r.i64("clientId"), r.i32("cxid"), r.i64("zxid"), r.i64("time"), r.i32("type")
    out: dict[str, Any] = {"op": OPS.get(op, str(op)), "session": f"0x{session & (1 << 64) - 1:x}", "cxid": cxid,
                           "zxid": zxid, "time": when}
    out.update(_body(r, op))
    left = len(r.buf) - r.pos
    if left == DIGEST_BYTES:
        out["digest"] = {"version": r.i32("digest version"), "treeDigest": r.i64("treeDigest")}
    r.end()
    return out
