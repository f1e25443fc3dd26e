"""ZooKeeper's client protocol on the wire: the records a ZooKeeper client (kazoo, ZooKeeper's Java client) and a
server exchange, as far as `zabref.net.zkclientport` serves them. Sans-IO.

Theory of operation
-------------------
Every message is a frame (``int`` length, then the body: `zabref.net.wire.FrameDecoder` reads them). The client's
first is ConnectRequest ``{int protocolVersion; long lastZxidSeen; int timeOut; long sessionId; buffer passwd}`` and
since 3.4 a ``boolean readOnly``; the server answers ConnectResponse ``{int protocolVersion; int timeOut; long
sessionId; buffer passwd}`` and ``boolean readOnly``. Then each request is RequestHeader ``{int xid; int type}`` and
its record, each answer ReplyHeader ``{int xid; long zxid; int err}`` and, when err is 0 (or always, for a multi),
the response's record (``zookeeper.jute``, module ``org.apache.zookeeper.proto``): getData ``{buffer data; Stat}``,
exists and setData ``{Stat}``, getChildren ``{vector<ustring>}``, getChildren2 that and a Stat, create ``{ustring
path}``, create2 that and a Stat, sync ``{ustring path}``, delete nothing, multi a MultiHeader ``{int type; boolean
done; int err}`` and a result per operation, then a header with done. A PING is xid -2, type 11, and is answered
with xid -2. Stat is ``{long czxid, mzxid, ctime, mtime; int version, cversion, aversion; long ephemeralOwner; int
dataLength, numChildren; long pzxid}``.

Readers take a body and raise `CodecError` naming the record and the offset for anything short, long or malformed.
"""

from __future__ import annotations

import struct
from typing import Any

from zabref.core import jute
from zabref.core.zktxn import TxnReader
from zabref.errors import CodecError

__all__ = ["PING_XID", "OP_PING", "OP_CLOSE", "OP_SYNC", "Connect", "decode_connect", "encode_connect_response",
           "decode_header", "encode_reply", "decode_path_watch", "decode_path", "encode_result", "STAT"]

PING_XID = -2
OP_PING = 11
OP_CLOSE = -11
OP_SYNC = 9
#: Stat: czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength, numChildren, pzxid.
STAT = struct.Struct(">qqqqiiiqiiq")
_REPLY = struct.Struct(">iqi")
_MULTI_HEADER = struct.Struct(">i?i")
_OPS = {"create": 1, "delete": 2, "setData": 5, "setACL": 7, "check": 13, "create2": 15, "createContainer": 19,
        "deleteContainer": 20, "createTTL": 21, "error": -1}


class Connect:
    """A ConnectRequest's fields."""

    __slots__ = ("protocol_version", "last_zxid_seen", "timeout_ms", "session", "passwd", "read_only")

    def __init__(self, protocol_version: int, last_zxid_seen: int, timeout_ms: int, session: int, passwd: bytes,
                 read_only: bool) -> None:
        self.protocol_version = protocol_version
        self.last_zxid_seen = last_zxid_seen
        self.timeout_ms = timeout_ms
        self.session = session
        self.passwd = passwd
        self.read_only = read_only


def decode_connect(body: bytes) -> Connect:
    r = TxnReader(body, "ConnectRequest")
    version, seen, timeout, session = r.i32("protocolVersion"), r.i64("lastZxidSeen"), r.i32("timeOut"), \
        r.i64("sessionId")
    passwd = r.buffer("passwd") or b""
    read_only = r.boolean("readOnly") if r.pos < len(r.buf) else False
    r.end()
    return Connect(version, seen, timeout, session, passwd, read_only)


def encode_connect_response(timeout_ms: int, session: int, passwd: bytes) -> bytes:
    """ConnectResponse (protocol version 0, not read-only); a timeout of 0 tells the client its session expired."""
    return jute.INT.pack(0) + jute.INT.pack(timeout_ms) + jute.LONG.pack(session) + jute.buffer("passwd", passwd) + \
        b"\x00"


def decode_header(body: bytes) -> tuple[int, int, bytes]:
    """``(xid, type, record)`` of a request."""
    if len(body) < 8:
        raise CodecError("RequestHeader", len(body), f"a request header is 8 bytes, the frame holds {len(body)}")
    xid, op = struct.unpack_from(">ii", body)
    return xid, op, body[8:]


def encode_reply(xid: int, zxid: int, err: int, record: bytes = b"") -> bytes:
    return _REPLY.pack(xid, zxid, err) + record


def decode_path_watch(record: bytes, what: str) -> tuple[str, bool]:
    """``{ustring path; boolean watch}``: getData, exists, getChildren, getChildren2."""
    r = TxnReader(record, what)
    path, watch = r.ustring("path"), r.boolean("watch")
    r.end()
    return path, watch


def decode_path(record: bytes, what: str) -> str:
    """``{ustring path}``: sync."""
    r = TxnReader(record, what)
    path = r.ustring("path")
    r.end()
    return path


def _stat(stat: tuple[int, ...] | None) -> bytes:
    return STAT.pack(*(stat or (0,) * 11))


def encode_result(result: dict[str, Any]) -> bytes:
    """The response record of a result `zabref.core.zkclients` gives (its ``op`` names the request it answers)."""
    op = result["op"]
    if op == "multi":
        out = []
        for o in result["ops"]:
            kind = o["op"]
            err = o.get("err", 0) if kind == "error" else 0
            out.append(_MULTI_HEADER.pack(_OPS[kind], False, err) + _op_record(o))
        return b"".join(out) + _MULTI_HEADER.pack(-1, True, -1)
    if result["err"] != 0:
        return b""
    return _op_record(result)


def _op_record(o: dict[str, Any]) -> bytes:
    op = o["op"]
    if op == "getData":
        return jute.buffer("data", o["data"]) + _stat(o["stat"])
    if op in ("exists", "setData", "setACL"):
        return _stat(o["stat"])
    if op in ("getChildren", "getChildren2"):
        kids = jute.INT.pack(len(o["children"])) + b"".join(jute.ustring("child", c) for c in o["children"])
        return kids + (_stat(o["stat"]) if op == "getChildren2" else b"")
    if op == "create":
        return jute.ustring("path", o["path"])
    if op in ("create2", "createContainer", "createTTL"):
        return jute.ustring("path", o["path"]) + _stat(o["stat"])
    if op == "error":
        return jute.INT.pack(o.get("err", 0))
    if op == "sync":
        return jute.ustring("path", o["path"])
    return b""  # delete, deleteContainer, check
