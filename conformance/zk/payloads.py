"""What each quorum packet's ``data`` holds, decoded (ZooKeeper 3.8 / 3.9, read from its Learner, LearnerHandler,
Leader and Follower).

Theory of operation
-------------------
=====================  ======================  ===================================================================
packet                 sent by                 data
=====================  ======================  ===================================================================
FOLLOWERINFO 11,       learner                 LearnerInfo {long serverid; int protocolVersion; long configVersion}
OBSERVERINFO 16                                (LearnerHandler reads whichever of the three are present)
LEADERINFO 17          leader                  int protocolVersion (0x10000)
ACKEPOCH 18            learner                 int currentEpoch (-1 when it has none)
NEWLEADER 10           leader                  the leader's configuration as text (``server.N=...``, ``version=``)
PROPOSAL 2             leader                  a transaction (`conformance.zk.txns`)
INFORM 8               leader, to observers    a transaction
INFORMANDACTIVATE 19   leader, to observers    long suggestedLeaderId, then a transaction
COMMITANDACTIVATE 9    leader                  long suggestedLeaderId
REQUEST 1              learner                 long sessionId; int cxid; int type; the client's request bytes
PING 5                 both                    learner: (long sessionId, int timeout)* it touched; leader: empty
REVALIDATE 6           both                    learner: long sessionId, int timeout; leader: long sessionId,
                                               boolean valid
ACK 3, COMMIT 4,       both                    nothing (null or empty); SNAP is followed by the data tree on the
UPTODATE 12, DIFF 13,                          stream (`conformance.zk.snapshot`)
TRUNC 14, SNAP 15,
SYNC 7
=====================  ======================  ===================================================================

`decode_data(type, data, from_leader, what)` returns the fields as a dict; bytes that do not fit raise
`zabref.errors.CodecError` with the offset inside ``data`` (`conformance.zk.wire` adds the packet's place).
"""

from __future__ import annotations

from typing import Any

from conformance.zk.txns import OPS, TxnReader, decode_txn
from zabref.errors import CodecError
from zabref.net.zkwire import PACKET_TYPES

__all__ = ["decode_data", "REQUEST_OPS"]

#: A forwarded request's op (ZooDefs.OpCode): a transaction's, or sync (9), the one request a follower forwards that
#: makes no transaction (FollowerRequestProcessor: a sync must reach the leader).
REQUEST_OPS = {**OPS, 9: "sync"}

EMPTY = {"ACK", "COMMIT", "UPTODATE", "DIFF", "TRUNC", "SNAP", "SYNC"}


def _learner_info(r: TxnReader) -> dict[str, Any]:
    """A LearnerInfo of ZooKeeper's three forms (8, 12, 20 bytes), or 3.5+'s followed by a zabref learner's
    connection id (28: `zabref.net.wire.with_connection_id`, which a ZooKeeper leader does not read)."""
    n = len(r.buf)
    if n not in (8, 12, 20, 28):
        raise r.fail(f"LearnerInfo is {n} bytes (expected 8, 12 or 20; 28 from a zabref learner)")
    out: dict[str, Any] = {"sid": r.i64("serverid")}
    if n >= 12:
        out["protocolVersion"] = f"0x{r.i32('protocolVersion'):x}"
    if n >= 20:
        out["configVersion"] = r.i64("configVersion")
    if n == 28:
        out["zabrefConnection"] = r.i64("zabref connection id")
    return out


def _text(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CodecError(what, e.start, f"text is not UTF-8 ({e.reason})") from None


def decode_data(ptype: int, data: bytes | None, from_leader: bool, what: str) -> dict[str, Any]:
    name = PACKET_TYPES[ptype]
    raw = data or b""
    r = TxnReader(raw, what)
    out: dict[str, Any]
    if name in EMPTY:
        if raw:
            raise r.fail(f"{name} carries {len(raw)} bytes of data (expected none)")
        return {}
    if name in ("FOLLOWERINFO", "OBSERVERINFO"):
        out = _learner_info(r)
    elif name == "LEADERINFO":
        out = {"protocolVersion": f"0x{r.i32('protocolVersion'):x}"}
    elif name == "ACKEPOCH":
        out = {"currentEpoch": r.i32("currentEpoch")}
    elif name == "NEWLEADER":
        return {"config": _text(raw, what)} if raw else {}
    elif name in ("PROPOSAL", "INFORM"):
        return decode_txn(raw, what)
    elif name == "INFORMANDACTIVATE":
        leader = r.i64("suggestedLeaderId")
        try:
            return {"suggestedLeader": leader, **decode_txn(raw[8:], what)}
        except CodecError as e:
            raise CodecError(what, e.offset + 8, e.reason) from None
    elif name == "COMMITANDACTIVATE":
        out = {"suggestedLeader": r.i64("suggestedLeaderId")}
    elif name == "REQUEST":
        session, cxid, op = r.i64("sessionId"), r.i32("cxid"), r.i32("type")
        out = {"session": f"0x{session & (1 << 64) - 1:x}", "cxid": cxid, "op": REQUEST_OPS.get(op, str(op)),
               "request_len": len(raw) - r.pos}
        r.pos = len(raw)
    elif name == "PING":
        if len(raw) % 12:
            raise r.fail(f"PING data is {len(raw)} bytes, not a multiple of 12 (sessionId, timeout)")
        out = {"sessions": [(f"0x{r.i64('sessionId') & (1 << 64) - 1:x}", r.i32("timeout"))
                            for _ in range(len(raw) // 12)]} if raw else {}
    else:  # REVALIDATE
        session = f"0x{r.i64('sessionId') & (1 << 64) - 1:x}"
        out = {"session": session, "valid": r.boolean("valid")} if from_leader else \
            {"session": session, "timeout": r.i32("timeout")}
    r.end()
    return out
