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

A ZooKeeper leader's transactions are not zabref's creates (a session's creation, a client's own node, a setData,
a multi): a zabref follower of a ZooKeeper leader keeps each one whole as its value, `FOREIGN` (a byte UTF-8 never
holds, while a client's value is always UTF-8 text, `zabref.net.clientport`) followed by the PROPOSAL's data as it
came, and `encode_value` sends those bytes again as they were, so that a ZooKeeper follower of a later zabref leader
applies what the ZooKeeper leader proposed. Reads show one as the transaction's fields (`read_form`).

A ZooKeeper leader's SNAP of a tree that holds other nodes than zabref's (its clients' own) is no list of
transactions: a zabref follower keeps the snapshot stream whole as the value of one transaction at the SNAP's zxid,
`SNAPSHOT` (another byte UTF-8 never holds) followed by the stream, the *base* of its history
(`zabref.core.payloads.decode_snap_data`); the trees (`zabref.core.zktree`) start from its nodes, and a later SNAP
of this server writes the tree again. A base is never a PROPOSAL (`encode_value` refuses it): a learner below it is
sent SNAP.

`decode_value` is as strict as the rest of the codec: the create of the transaction's own node must be zabref's
(non-null value, persistent; a digest may follow), any other transaction must be one of ZooKeeper's (`OPS`), for
the packet's zxid, whose record `decode_txn` reads whole; anything else raises `CodecError` naming the field and the
byte offset. The header's session, cxid and time of zabref's own create are read and not kept, so a value re-sent
carries 0 in them.

`TxnReader` adds to `zabref.core.jute.Reader` the jute values transactions use that zabref's own packets do not (a
boolean, a vector of ACLs, a data field kept whole, which `conformance.zk.txns` summarizes for its reports).
The records, by type (``zookeeper.jute``, module ``org.apache.zookeeper.txn``; read by `decode_txn`):

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

After the record exactly 0 bytes (no digest) or 12 (a ``TxnDigest {int version; long treeDigest}``) may remain.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

from mypy_extensions import mypyc_attr

from zabref.core import jute
from zabref.errors import CodecError

__all__ = ["TxnReader", "HEADER", "OP_CREATE", "OPS", "DIGEST_BYTES", "FOREIGN", "SNAPSHOT", "MARKERS", "node_of",
           "encode_create", "carries_zxid", "encode_value", "decode_value", "decode_txn", "read_form", "OPEN_ACL",
           "Create", "read_create", "WORLD_ANYONE_ALL"]

#: ZooKeeper's OpCode.create.
OP_CREATE = 1
#: The transaction types (ZooKeeper's OpCode) a PROPOSAL or a transaction log may carry.
OPS = {1: "create", 2: "delete", 5: "setData", 7: "setACL", 13: "check", 14: "multi", 15: "create2",
       16: "reconfig", 19: "createContainer", 20: "deleteContainer", 21: "createTTL", -10: "createSession",
       -11: "closeSession", -1: "error"}
#: The first byte of a value that is a ZooKeeper transaction zabref did not write, kept whole after it.
FOREIGN = b"\xff"
#: The first byte of a value that is a ZooKeeper leader's snapshot stream, the base of a history (module docstring).
SNAPSHOT = b"\xfe"
#: Both markers: a value that starts with one of them is not a client's value of zabref's own.
MARKERS = (FOREIGN, SNAPSHOT)
#: A TxnDigest after the record: ``int version, long treeDigest``.
DIGEST_BYTES = 12
#: ZooKeeper's ZooDefs.Perms.ALL (read, write, create, delete, admin).
PERMS_ALL = 31
HEADER = struct.Struct(">qiqqi")  # TxnHeader: clientId, cxid, zxid, time, type
#: `OPEN_ACL` as a ``vector<ACL>``'s bytes.
WORLD_ANYONE_ALL = jute.INT.pack(1) + jute.INT.pack(PERMS_ALL) + jute.ustring("scheme", "world") + \
    jute.ustring("id", "anyone")
_PERSISTENT = WORLD_ANYONE_ALL + b"\x00"  # the ACL, then ephemeral = false
#: world:anyone with every permission as a read gives an ACL (``scheme:id:perms`` each): ZooKeeper's OPEN_ACL_UNSAFE.
OPEN_ACL = ("world:anyone:31",)


@mypyc_attr(allow_interpreted_subclasses=True)  # conformance.zk.txns' reader, which summarizes data
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
        """A ``vector<ACL>`` (``int perms; Id {ustring scheme; ustring id}``), each as ``scheme:id:perms``;
        world:anyone's one ACL (`OPEN_ACL`), nearly every request's, by its bytes."""
        if self.buf[self.pos : self.pos + len(WORLD_ANYONE_ALL)] == WORLD_ANYONE_ALL:
            self.pos += len(WORLD_ANYONE_ALL)
            return list(OPEN_ACL)
        return self.acl_entries(field)

    def acl_entries(self, field: str) -> list[str]:
        """`acls`, entry by entry."""
        out = []
        for _ in range(self.count(field, 12, nullable=True)):
            perms = self.i32("acl perms")
            out.append(f"{self.ustring('acl scheme')}:{self.ustring('acl id')}:{perms}")
        return out

    def data(self, field: str) -> dict[str, Any]:
        """A node's data: ``{"data": bytes or None}``."""
        return {"data": self.buffer(field)}


def node_of(zxid: int) -> str:
    """The node transaction ``zxid`` creates: ``/zabref-<epoch>-<counter>``."""
    return f"/zabref-{zxid >> 32}-{zxid & 0xFFFFFFFF}"


def encode_create(zxid: int, path: str, data: bytes | None, *, time_ms: int = 0, session: int = 0, cxid: int = 0,
                  parent_cversion: int = -1) -> bytes:
    """TxnHeader + CreateTxn: the create of persistent node ``path`` holding ``data`` (``None``: ZooKeeper's null
    data; world:anyone, all permissions), no digest."""
    header = HEADER.pack(jute.check_long("clientId", session), jute.check_int("cxid", cxid),
                          jute.check_long("zxid", zxid), jute.check_long("time", time_ms), OP_CREATE)
    return b"".join((header, jute.ustring("path", path), jute.buffer("data", data), _PERSISTENT,
                     jute.INT.pack(jute.check_int("parentCVersion", parent_cversion))))


def carries_zxid(value: bytes, zxid: int) -> bool:
    """Whether ``value`` (a `FOREIGN` one) holds a transaction header whose zxid is ``zxid``."""
    return len(value) >= 1 + HEADER.size and HEADER.unpack_from(value, 1)[2] == zxid


def encode_value(zxid: int, value: bytes) -> bytes:
    """PROPOSAL's data for transaction ``[zxid, value]`` (the module docstring): the create of its node, or a
    ZooKeeper leader's transaction as it came."""
    if value[:1] == SNAPSHOT:
        raise ValueError(f"the value of {zxid:#x} is a snapshot, the base of a history: a learner below it gets SNAP")
    if value[:1] == FOREIGN:
        if not carries_zxid(value, zxid):
            raise ValueError(f"a ZooKeeper transaction kept as the value of {zxid:#x} is another zxid's")
        return bytes(value[1:])
    return encode_create(zxid, node_of(zxid), value)


def decode_value(zxid: int, data: bytes, what: str) -> bytes:
    """The value of transaction ``zxid`` from PROPOSAL's ``data``; `CodecError` (naming ``what`` and the offset) for
    anything but the create of ``node_of(zxid)`` (the module docstring). Every follower reads every proposal, so the
    common form -- the one `encode_create` writes, with any session, cxid, time and parentCVersion, a digest or not --
    is read with a few slices (`_quick_value`), and so is a ZooKeeper client's create (`_quick_create`: what a zabref
    leader's ZooKeeper client port proposes, `zabref.core.zkprep`); anything else, every malformed body among them,
    by `_strict_value`."""
    value = _quick_value(zxid, data)
    if value is not None:
        return value
    return _quick_create(zxid, data) or _strict_value(zxid, data, what)


def _quick_value(zxid: int, data: bytes) -> bytes | None:
    """The value when ``data`` is a create of ``node_of(zxid)`` with world:anyone's one ACL, persistent; else None."""
    path = node_of(zxid).encode()
    value_at = HEADER.size + 8 + len(path)
    if len(data) < value_at:
        return None
    _, _, carried, _, op = HEADER.unpack_from(data)
    if carried != zxid or op != OP_CREATE or jute.INT.unpack_from(data, HEADER.size)[0] != len(path) \
            or data[HEADER.size + 4 : value_at - 4] != path:
        return None
    n = jute.INT.unpack_from(data, value_at - 4)[0]
    after = value_at + n
    if n < 0 or len(data) - after - len(_PERSISTENT) not in (4, 4 + DIGEST_BYTES) \
            or data[after : after + len(_PERSISTENT)] != _PERSISTENT:
        return None
    return bytes(data[value_at:after])


def _quick_create(zxid: int, data: bytes) -> bytes | None:
    """The value `_strict_value` would keep (`FOREIGN`, then ``data``) when ``data`` is a well-formed create (type 1)
    for ``zxid`` of another node than ``node_of(zxid)``; None when it is anything else or not sure (`_strict_value`
    then reads it, and says where it goes wrong). The create read is kept for the tree that applies the value at its
    COMMIT (`foreign_create`)."""
    value = FOREIGN + bytes(data)
    create = foreign_create(value)
    if create is None or create.zxid != zxid or create.path == node_of(zxid):
        return None
    keep_create(value, create)
    return value


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
    own = r.i32("type") == OP_CREATE
    if own:
        at = r.pos
        own = r.ustring("path") == node_of(zxid)
        r.pos = at
    if not own:
        decode_txn(data, what)  # the whole of one of ZooKeeper's transactions, or a CodecError where it is not
        return FOREIGN + bytes(data)
    r.ustring("path")
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


def _record(r: TxnReader, op: int) -> dict[str, Any]:
    """The fields of the record of a transaction of type ``op`` (the module docstring's table)."""
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
    ops = []  # multi
    for _ in range(r.count("txns", 8, nullable=True)):
        inner_op = r.i32("txn type")
        at = r.pos + 4
        raw = r.buffer("txn data") or b""
        inner = type(r)(raw, f"{r.what} (multi op at byte {at})")
        try:
            fields = _record(inner, inner_op) if inner_op != -1 or raw else {}
            inner.end()
        except CodecError as e:
            raise r.fail(f"multi op {OPS.get(inner_op, inner_op)}: {e.reason}", at + e.offset) from None
        ops.append({"op": OPS.get(inner_op, str(inner_op)), **fields})
    return {"ops": ops}


def decode_txn(data: bytes, what: str, reader: type[TxnReader] = TxnReader) -> dict[str, Any]:
    """TxnHeader + record (+ digest) -> a dict: op, session (hex), cxid, zxid, time, the record's fields (a data
    field as ``reader`` gives it), digest. `CodecError` naming ``what`` and the offset for anything else. A plain
    create, the transaction every ZooKeeper client's create is and a server's trees apply once each, is read with a
    few slices (`read_create`); anything else, every malformed body among them, field by field."""
    if reader is TxnReader:
        quick = read_create(data)
        if quick is not None:
            return quick.fields()
    r = reader(data, what)
    session, cxid, zxid, when, op = r.i64("clientId"), r.i32("cxid"), r.i64("zxid"), r.i64("time"), r.i32("type")
    out: dict[str, Any] = {"op": OPS.get(op, str(op)), "session": f"0x{session & (1 << 64) - 1:x}", "cxid": cxid,
                           "zxid": zxid, "time": when}
    out.update(_record(r, op))
    if len(r.buf) - r.pos == DIGEST_BYTES:
        out["digest"] = {"version": r.i32("digest version"), "treeDigest": r.i64("treeDigest")}
    r.end()
    return out


@dataclass(slots=True, init=False)
class Create:
    """A plain create (type 1), the transaction every ZooKeeper client's create is, read whole by `read_create`:
    the header's fields (``session`` signed, as ZooKeeper's long) and the record's, ``acl`` as `TxnReader.acls` gives
    it, ``digest`` the (version, treeDigest) that may follow. Not frozen, as `zabref.core.zktree.ZNode` is not: one
    is made for every create a server reads, and a frozen field costs the pure build a call each; nothing changes
    one after `read_create` made it."""

    session: int
    cxid: int
    zxid: int
    time: int
    path: str
    data: bytes | None
    acl: tuple[str, ...]
    ephemeral: bool
    parent_cversion: int
    digest: tuple[int, int] | None

    def __init__(self, session: int, cxid: int, zxid: int, time: int, path: str, data: bytes | None,
                 acl: tuple[str, ...], ephemeral: bool, parent_cversion: int, digest: tuple[int, int] | None) -> None:
        self.session = session
        self.cxid = cxid
        self.zxid = zxid
        self.time = time
        self.path = path
        self.data = data
        self.acl = acl
        self.ephemeral = ephemeral
        self.parent_cversion = parent_cversion
        self.digest = digest

    def fields(self) -> dict[str, Any]:
        """The create as `decode_txn` gives it."""
        out: dict[str, Any] = {"op": "create", "session": f"0x{self.session & (1 << 64) - 1:x}", "cxid": self.cxid,
                               "zxid": self.zxid, "time": self.time, "path": self.path, "data": self.data,
                               "acl": list(self.acl), "ephemeral": self.ephemeral,
                               "parentCVersion": self.parent_cversion}
        if self.digest is not None:
            out["digest"] = {"version": self.digest[0], "treeDigest": self.digest[1]}
        return out


#: The creates a PROPOSAL's check took or a leader prepared (`keep_create`), by the value that holds them, oldest
#: first; at most `_KEPT_MAX`: a value kept and never applied (a proposal its sync truncated) waits until newer ones
#: push it out.
_KEPT: Final[dict[bytes, Create]] = {}
_KEPT_MAX: Final = 4096


def keep_create(value: bytes, create: Create) -> None:
    """Keep ``create``, which ``read_create(value, 1)`` is, for `foreign_create`'s next read of ``value``: a PROPOSAL's
    check keeps the create it read (`_quick_create`), a leader the create it prepared
    (`zabref.core.zkprep.prepare_value`)."""
    if len(_KEPT) >= _KEPT_MAX:
        del _KEPT[next(iter(_KEPT))]
    _KEPT[value] = create


def foreign_create(value: bytes) -> Create | None:
    """``read_create(value, 1)``: the create a `FOREIGN` value holds. A follower reads a ZooKeeper client's create
    twice, at its PROPOSAL to check it (`_quick_create`, which keeps the create it takes) and at its COMMIT to apply
    it (`zabref.core.zktree.DataTree`); the second read takes the kept create, once -- `read_create` is a function of
    the bytes alone, and nothing changes a `Create` after it is made. A leader's apply at the COMMIT takes the create
    it prepared the value from. A check of a value kept already keeps it again, newest (servers simulated in one
    process read the same PROPOSAL each)."""
    create = _KEPT.pop(value, None)
    return create if create is not None else read_create(value, 1)


def read_create(data: bytes, start: int = 0) -> Create | None:
    """The well-formed create (type 1) that ``data[start:]`` is, read with `struct` and slices; None when it is
    anything else or not sure (the field-by-field read, `decode_txn` or `_strict_value`, then decides, and says
    where it goes wrong). The one quick reader of a ZooKeeper client's create: `decode_value` checks a PROPOSAL with
    it, `decode_txn` gives its fields, and `zabref.core.zktree` applies it without them. world:anyone's one ACL, the
    ACL of nearly every create, is read as the one tuple `OPEN_ACL`."""
    n = len(data)
    if n - start < HEADER.size + 4:
        return None
    session, cxid, zxid, when, op = HEADER.unpack_from(data, start)
    if op != OP_CREATE:
        return None
    ints = jute.INT.unpack_from
    at = start + HEADER.size
    k = ints(data, at)[0]
    at += 4
    if k < 0 or at + k + 4 > n:
        return None
    try:
        path = bytes(data[at : at + k]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    at += k
    k = ints(data, at)[0]  # the node's data, may be null (-1)
    at += 4
    if k < -1 or at + max(k, 0) + 4 > n:
        return None
    value = None if k == -1 else bytes(data[at : at + k])
    at += max(k, 0)
    acl: tuple[str, ...]
    if data.startswith(WORLD_ANYONE_ALL, at):
        acl = OPEN_ACL
        at += len(WORLD_ANYONE_ALL)
    else:
        read = _acl_at(data, at)
        if read is None:
            return None
        acl, at = read
    if at + 5 > n or data[at] > 1 or n - at - 5 not in (0, DIGEST_BYTES):
        return None
    digest = None
    if n - at - 5 == DIGEST_BYTES:
        digest = (ints(data, at + 5)[0], jute.LONG.unpack_from(data, at + 9)[0])
    return Create(session, cxid, zxid, when, path, value, acl, data[at] == 1, ints(data, at + 1)[0], digest)


def _acl_at(data: bytes, at: int) -> tuple[tuple[str, ...], int] | None:
    """The ``vector<ACL>`` at ``at`` (a null vector, -1, reads as none) and the offset after it; None when it is
    not whole or not UTF-8."""
    n = len(data)
    ints = jute.INT.unpack_from
    if at + 4 > n:
        return None
    count = ints(data, at)[0]
    at += 4
    if count < -1 or count * 12 > n - at:
        return None
    acl = []
    for _ in range(count):
        if at + 4 > n:
            return None
        perms = ints(data, at)[0]
        at += 4
        parts = []
        for _ in ("scheme", "id"):
            if at + 4 > n:
                return None
            k = ints(data, at)[0]
            at += 4
            if k < 0 or at + k > n:
                return None
            try:
                parts.append(bytes(data[at : at + k]).decode("utf-8"))
            except UnicodeDecodeError:
                return None
            at += k
        acl.append(f"{parts[0]}:{parts[1]}:{perms}")
    return tuple(acl), at


def read_form(value: bytes) -> str | dict[str, Any]:
    """A value as a read shows it: zabref's own as its text; a ZooKeeper transaction (`FOREIGN`) as an object of
    its fields, ``{"zookeeper": op, "session": ..., "path": ..., "data": text, ...}`` (data as UTF-8, any other
    byte escaped), so that the two kinds never look alike."""
    if value[:1] == SNAPSHOT:
        return {"zookeeper": "snapshot", "bytes": len(value) - 1}
    if value[:1] != FOREIGN:
        return value.decode("utf-8", "backslashreplace")
    txn = decode_txn(value[1:], "a ZooKeeper transaction")
    return {"zookeeper": txn.pop("op"), **_texts(txn)}


def _texts(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.decode("utf-8", "backslashreplace") if isinstance(v, bytes)
                else [_texts(o) for o in v] if k == "ops" else v) for k, v in fields.items()}
