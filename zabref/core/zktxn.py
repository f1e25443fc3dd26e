"""A transaction's value as ZooKeeper's transaction: what PROPOSAL carries on the wire. Sans-IO.

Theory of operation
-------------------
A ZooKeeper follower deserializes a PROPOSAL's data as a transaction (``SerializeUtils.deserializeTxn``): a
``TxnHeader {long clientId; int cxid; long zxid; long time; int type}``, the record its type names, then -- since
3.6, only when bytes follow the record -- a ``TxnDigest {int version; long treeDigest}``. It logs it, ACKs it, and
applies it to its data tree on COMMIT. For a ZooKeeper server to follow a zabref leader (and its clients to read what
zabref's clients wrote), zabref's PROPOSAL carries each transaction as such: the spec's ``[zxid, value]`` becomes the
create of a persistent node of its own, named by its zxid (`node_of`: ``/zabref-<epoch>-<counter>``, world:anyone
with every permission), holding the value as its data:

    TxnHeader {clientId 0, cxid 0, zxid, time 0, type 1 (create)}
    CreateTxn {ustring path; buffer data; vector<ACL> acl; boolean ephemeral; int parentCVersion}

``parentCVersion`` -1 asks the follower's DataTree to add one to the root's child version, as ZooKeeper's own
leader would have computed it; no digest follows (a ZooKeeper follower then compares none). One node per
transaction, so the create never fails on a follower whatever it applied before, and a ZooKeeper client finds the
value of transaction ``<<e, c>>`` at ``/zabref-e-c``.

`decode_value` is as strict as the rest of the codec: the transaction must be a create of exactly that node, for the
packet's zxid, with a non-null value, persistent; a digest may follow. Any other transaction (a ZooKeeper leader's
createSession, setData, ...) raises `CodecError` naming the field and the byte offset: zabref holds the values of
its own transactions only (docs/zookeeper.md, "A zabref server in a ZooKeeper ensemble"). The header's session, cxid
and time are read and not kept, so a value re-sent carries 0 in them.

`TxnReader` adds to `zabref.core.jute.Reader` the two jute values transactions use that zabref's own packets do not
(a boolean, a vector of ACLs); `conformance.zk.txns` reads every other transaction type with it.
"""

from __future__ import annotations

import struct

from zabref.core import jute
from zabref.errors import CodecError

__all__ = ["TxnReader", "OP_CREATE", "DIGEST_BYTES", "node_of", "encode_create", "encode_value", "decode_value"]

#: ZooKeeper's OpCode.create.
OP_CREATE = 1
#: A TxnDigest after the record: ``int version, long treeDigest``.
DIGEST_BYTES = 12
#: ZooKeeper's ZooDefs.Perms.ALL (read, write, create, delete, admin).
PERMS_ALL = 31
_HEADER = struct.Struct(">qiqqi")  # clientId, cxid, zxid, time, type
_WORLD_ANYONE_ALL = jute.INT.pack(1) + jute.INT.pack(PERMS_ALL) + jute.ustring("scheme", "world") + \
    jute.ustring("id", "anyone")
_PERSISTENT = _WORLD_ANYONE_ALL + b"\x00"  # the ACL, then ephemeral = false


class TxnReader(jute.Reader):
    """`zabref.core.jute.Reader` plus a jute boolean and a vector of ACLs."""

    __slots__ = ()

    def boolean(self, field: str) -> bool:
        at = self.pos
        b = self._take(1, field)[0]
        if b not in (0, 1):
            raise self.fail(f"{field} is {b}, not a boolean", at)
        return b == 1

    def acls(self, field: str) -> list[str]:
        """A ``vector<ACL>`` (``int perms; Id {ustring scheme; ustring id}``), each as ``scheme:id:perms``."""
        out = []
        for _ in range(self.count(field, 12, nullable=True)):
            perms = self.i32("acl perms")
            out.append(f"{self.ustring('acl scheme')}:{self.ustring('acl id')}:{perms}")
        return out


def node_of(zxid: int) -> str:
    """The node transaction ``zxid`` creates: ``/zabref-<epoch>-<counter>``."""
    return f"/zabref-{zxid >> 32}-{zxid & 0xFFFFFFFF}"


def encode_create(zxid: int, path: str, data: bytes, *, time_ms: int = 0, session: int = 0, cxid: int = 0,
                  parent_cversion: int = -1) -> bytes:
    """TxnHeader + CreateTxn: the create of persistent node ``path`` holding ``data`` (world:anyone, all
    permissions), no digest."""
    header = _HEADER.pack(jute.check_long("clientId", session), jute.check_int("cxid", cxid),
                          jute.check_long("zxid", zxid), jute.check_long("time", time_ms), OP_CREATE)
    return b"".join((header, jute.ustring("path", path), jute.buffer("data", data), _PERSISTENT,
                     jute.INT.pack(jute.check_int("parentCVersion", parent_cversion))))


def encode_value(zxid: int, value: bytes) -> bytes:
    """PROPOSAL's data for transaction ``[zxid, value]`` (the module docstring)."""
    return encode_create(zxid, node_of(zxid), value)


def decode_value(zxid: int, data: bytes, what: str) -> bytes:
    """The value of transaction ``zxid`` from PROPOSAL's ``data``; `CodecError` (naming ``what`` and the offset) for
    anything but the create of ``node_of(zxid)`` (the module docstring). Every follower reads every proposal, so the
    common form -- the one `encode_create` writes, with any session, cxid, time and parentCVersion, a digest or not --
    is read with a few slices (`_quick_value`); anything else, every malformed body among them, by `_strict_value`."""
    value = _quick_value(zxid, data)
    return value if value is not None else _strict_value(zxid, data, what)


def _quick_value(zxid: int, data: bytes) -> bytes | None:
    """The value when ``data`` is a create of ``node_of(zxid)`` with world:anyone's one ACL, persistent; else None."""
    path = node_of(zxid).encode()
    value_at = _HEADER.size + 8 + len(path)
    if len(data) < value_at:
        return None
    _, _, carried, _, op = _HEADER.unpack_from(data)
    if carried != zxid or op != OP_CREATE or jute.INT.unpack_from(data, _HEADER.size)[0] != len(path) \
            or data[_HEADER.size + 4 : value_at - 4] != path:
        return None
    n = jute.INT.unpack_from(data, value_at - 4)[0]
    after = value_at + n
    if n < 0 or len(data) - after - len(_PERSISTENT) not in (4, 4 + DIGEST_BYTES) \
            or data[after : after + len(_PERSISTENT)] != _PERSISTENT:
        return None
    return bytes(data[value_at:after])


def _strict_value(zxid: int, data: bytes, what: str) -> bytes:
    """`decode_value` field by field, for any body."""
    r = TxnReader(data, what)
    r.i64("clientId")
    r.i32("cxid")
    at = r.pos
    carried = r.i64("zxid")
    if carried != zxid:
        raise r.fail(f"the transaction's zxid is {carried:#x}, the packet's {zxid:#x}", at)
    r.i64("time")
    at = r.pos
    op = r.i32("type")
    if op != OP_CREATE:
        raise r.fail(f"transaction type {op} is not a create (1): zabref holds its own transactions only", at)
    at = r.pos
    path = r.ustring("path")
    if path != node_of(zxid):
        raise r.fail(f"the create of {path!r} is not transaction {zxid:#x}'s ({node_of(zxid)!r})", at)
    value = r.buffer("data", nullable=False)
    r.acls("acl")
    at = r.pos
    if r.boolean("ephemeral"):
        raise r.fail("a transaction's node is persistent, not ephemeral", at)
    r.i32("parentCVersion")
    if len(r.buf) - r.pos == DIGEST_BYTES:
        r.i32("digest version")
        r.i64("treeDigest")
    r.end()
    assert value is not None
    return value
