"""The data of the packets whose data has structure (seed 000's table), as bytes and back. Sans-IO.

Theory of operation: a QuorumPacket's ``data`` is an opaque jute buffer on the wire (`zabref.net.wire`); the core
gives it structure here, one ``encode_*``/``decode_*`` pair per packet type: LEADERINFO (the protocol version),
ACKEPOCH (the follower's currentEpoch, or -1), FOLLOWERINFO (a LearnerInfo, in ZooKeeper 3.5+'s form), PROPOSAL (the
value, as ZooKeeper's transaction: `zabref.core.zktxn`), SNAP (a whole history, as ZooKeeper's snapshot
stream: `zabref.core.zksnap`) and REQUEST (a learner's forwarded request, of which zabref reads a sync). Decoding
is as strict as the wire's (`zabref.core.jute`): a null, short or overlong data field raises `CodecError` naming the
packet, the field and the offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from zabref.core import jute, zksnap, zktree, zktxn
from zabref.core.packets import LearnerInfo
from zabref.core.types import Txn
from zabref.errors import CodecError

__all__ = ["ACKEPOCH_ALREADY_ACKNOWLEDGED", "LEARNER_INFO_SIZE", "encode_learner_info", "decode_learner_info",
           "encode_leaderinfo_data",
           "decode_leaderinfo_data", "encode_ackepoch_data", "decode_ackepoch_data", "encode_followerinfo_data",
           "decode_followerinfo_data", "encode_proposal_data", "decode_proposal_data", "encode_snap_data",
           "decode_snap_data", "OP_SYNC", "PING_STEP", "encode_request_data", "encode_request", "decode_request_data",
           "decode_revalidate_data", "encode_revalidate_answer"]

#: ACKEPOCH's currentEpoch when the follower had already accepted the proposed epoch (seed 000's table: "it passes -1
#: as the currentEpoch to signal that the new epoch is not acknowledged").
ACKEPOCH_ALREADY_ACKNOWLEDGED = -1

_LEARNER_INFO = struct.Struct(">qiq")
#: Bytes of a LearnerInfo; a zabref learner's FOLLOWERINFO has a connection id (8 bytes) after it (`zabref.net.wire`).
LEARNER_INFO_SIZE = _LEARNER_INFO.size
#: REQUEST's header: ``long sessionId, int cxid, int type``, before the request's own record.
_REQUEST_HEADER = struct.Struct(">qii")
#: ZooKeeper's OpCode.sync: the one request a zabref leader takes from a learner (spec/ZabSync.tla).
OP_SYNC = 9
#: The zxid of a zabref leader's PING that is a step of spec/ZabSync.tla's round (PingAll: for a sync that arrived,
#: or that still needs an answer); its other PINGs carry the commit point. ZooKeeper's learners read no leader PING's
#: zxid and echo it in their answer (Learner.ping), as zabref's do, so the answer of either says which it answers.
PING_STEP = -2


def encode_learner_info(info: LearnerInfo) -> bytes:
    """``long serverid, int protocolVersion, long configVersion`` (ZooKeeper 3.5+; 20 bytes)."""
    return _LEARNER_INFO.pack(jute.check_long("serverid", info.serverid),
                              jute.check_int("protocolVersion", info.protocol_version),
                              jute.check_long("configVersion", info.config_version))


def decode_learner_info(body: bytes) -> LearnerInfo:
    r = jute.Reader(jute.bytes_like(body, "LearnerInfo"), "LearnerInfo")
    info = LearnerInfo(r.i64("serverid"), r.i32("protocolVersion"), r.i64("configVersion"))
    r.end()
    return info


def _data_reader(data: bytes | None, what: str) -> jute.Reader:
    if data is None:
        raise CodecError(what, 0, "data is null")
    return jute.Reader(jute.bytes_like(data, what), what)


def encode_leaderinfo_data(protocol_version: int) -> bytes:
    """LEADERINFO's data: ``int protocolVersion`` (seed 000's table: data = "protocol")."""
    return jute.INT.pack(jute.check_int("protocolVersion", protocol_version))


def decode_leaderinfo_data(data: bytes | None) -> int:
    r = _data_reader(data, "LEADERINFO data")
    version = r.i32("protocolVersion")
    r.end()
    return version


def encode_ackepoch_data(current_epoch: int) -> bytes:
    """ACKEPOCH's data: ``int currentEpoch``, or -1 when the epoch was already acknowledged (seed 000's table)."""
    if current_epoch < ACKEPOCH_ALREADY_ACKNOWLEDGED:
        raise ValueError(f"currentEpoch = {current_epoch}: only -1 may be negative")
    return jute.INT.pack(jute.check_int("currentEpoch", current_epoch))


def decode_ackepoch_data(data: bytes | None) -> int:
    r = _data_reader(data, "ACKEPOCH data")
    epoch = r.i32("currentEpoch")
    if epoch < ACKEPOCH_ALREADY_ACKNOWLEDGED:
        raise r.fail(f"currentEpoch is {epoch}; only -1 may be negative", 0)
    r.end()
    return epoch


def encode_followerinfo_data(info: LearnerInfo) -> bytes:
    """FOLLOWERINFO's data: a LearnerInfo (seed 000's table)."""
    return encode_learner_info(info)


def decode_followerinfo_data(data: bytes | None) -> LearnerInfo:
    """The LearnerInfo of FOLLOWERINFO's data: 20 bytes, or 28 when a zabref learner wrote its connection's id after
    it (read by the net layer, `zabref.net.wire.connection_id`; a ZooKeeper leader reads the first 20 bytes only)."""
    r = _data_reader(data, "FOLLOWERINFO data")
    if len(r.buf) not in (LEARNER_INFO_SIZE, LEARNER_INFO_SIZE + 8):
        raise r.fail(f"a LearnerInfo is {LEARNER_INFO_SIZE} bytes, or {LEARNER_INFO_SIZE + 8} with a connection id, "
                     f"not {len(r.buf)}", 0)
    return LearnerInfo(r.i64("serverid"), r.i32("protocolVersion"), r.i64("configVersion"))


def encode_proposal_data(zxid: int, value: bytes) -> bytes:
    """PROPOSAL's data: transaction ``[zxid, value]`` as ZooKeeper's create of its own node (`zabref.core.zktxn`)."""
    return zktxn.encode_value(zxid, bytes(value))


def decode_proposal_data(zxid: int, data: bytes | None) -> bytes:
    """The value PROPOSAL(``zxid``) carries; a null buffer, or anything but the create `encode_proposal_data`
    writes, is an error (a proposal always carries a value, possibly empty)."""
    if data is None:
        raise CodecError("PROPOSAL data", 0, "data is null")
    return zktxn.decode_value(zxid, jute.bytes_like(data, "PROPOSAL data"), "PROPOSAL data")


def encode_snap_data(history: Iterable[tuple[int, bytes]]) -> bytes:
    """SNAP's data: the history as ZooKeeper's snapshot stream (`zabref.core.zksnap`), each transaction ``[z, v]``
    the node `zktxn.node_of` (z) holding v, created by z -- the tree a ZooKeeper follower holds after applying
    each as the PROPOSAL `encode_proposal_data` writes. A history holding ZooKeeper's own transactions
    (`zktxn.FOREIGN`) is written as the tree they all make (`zabref.core.zktree`), which is what a ZooKeeper
    follower must hold; `decode_snap_data` refuses that tree's other nodes (a zabref server keeps no data tree)."""
    nodes = []
    txns = []
    for i, (zxid, value) in enumerate(history):
        if value is None:
            raise ValueError(f"history[{i}] has no value")
        txns.append(Txn(jute.check_long(f"history[{i}].zxid", zxid), bytes(value)))
        nodes.append((zktxn.node_of(zxid), bytes(value), zxid))
    if any(t.value[:1] in zktxn.MARKERS for t in txns):
        return zktree.HistoryTree().follow(txns).snapshot()
    return zksnap.write_snapshot(nodes)


def decode_snap_data(data: bytes | None, zxid: int | None = None) -> list[tuple[int, bytes]]:
    """The history a SNAP's snapshot stream carries: its transactions' nodes (`zktxn.node_of`) in zxid order; the
    root and ZooKeeper's own subtree (``/zookeeper``) are not transactions. A tree with any other node -- a ZooKeeper
    client's own, or a transaction's node created by another zxid or holding null -- is a ZooKeeper leader's data
    tree: given the SNAP's ``zxid``, the history is one base transaction at that zxid holding the stream whole
    (`zktxn.SNAPSHOT`) -- at the tree's last create when the zxid is a new epoch's ``<<e, 0>>``, which names no
    transaction, so that a later leader whose history ends in the epoch before never TRUNCs the base away (one that
    sends again what came after that create, a setData or a session's, has it applied to the tree again, as
    ZooKeeper replays its log over a fuzzy snapshot); without it, `CodecError` names the node and its offset.
    Ordering is checked by whoever installs the history."""
    what = "SNAP data"
    if data is None:
        raise CodecError(what, 0, "data is null: the snapshot stream follows the SNAP packet")
    cur = jute.Cursor(jute.bytes_like(data, what), what)
    try:
        tree = zksnap.read_snapshot(cur)
    except jute.Short:
        raise CodecError(what, len(data), "the snapshot stream ends before its signature") from None
    if cur.remaining:
        raise cur.fail(f"{cur.remaining} bytes after the signature")
    history: list[tuple[int, bytes]] = []
    for node in tree.nodes:
        if node.path == "/" or node.path == zksnap.SYSTEM_ROOT or node.path.startswith(zksnap.SYSTEM_ROOT + "/"):
            continue
        if node.path != zktxn.node_of(node.czxid) or node.data is None:
            if zxid is not None:  # a new epoch's <<e, 0>> names no transaction: the tree's last create does
                base = zxid if zxid & 0xFFFFFFFF else max(n.czxid for n in tree.nodes)
                return [(base, zktxn.SNAPSHOT + bytes(data))]
            raise cur.fail(f"node {node.path!r} (czxid {node.czxid:#x}) is not a transaction's node "
                           f"({zktxn.node_of(node.czxid)!r} holding a value): a zabref server keeps no ZooKeeper "
                           "data tree", node.at)
        history.append((node.czxid, node.data))
    history.sort()
    return history


def encode_request_data(session: int, cxid: int, op: int, path: str) -> bytes:
    """REQUEST's data of a sync as ZooKeeper's Learner.request writes it: `encode_request` with the record
    ``ustring path``."""
    return encode_request(session, cxid, op, jute.ustring("path", path))


def encode_request(session: int, cxid: int, op: int, record: bytes) -> bytes:
    """REQUEST's data as ZooKeeper's Learner.request writes it: ``long sessionId, int cxid, int type``, then the
    request's record as the client sent it."""
    return _REQUEST_HEADER.pack(jute.check_long("sessionId", session), jute.check_int("cxid", cxid),
                                jute.check_int("type", op)) + bytes(record)


def decode_request_data(data: bytes | None) -> tuple[int, int, int, bytes]:
    """``(sessionId, cxid, type, record)`` of REQUEST's data; the record (whatever follows the header) is checked
    only for sync, whose record is one ``ustring path`` and nothing after it."""
    r = _data_reader(data, "REQUEST data")
    session, cxid, op = r.i64("sessionId"), r.i32("cxid"), r.i32("type")
    record = bytes(r.buf[r.pos:])
    if op == OP_SYNC:
        r.ustring("path")
        r.end()
    return session, cxid, op, record


def decode_revalidate_data(data: bytes | None) -> tuple[int, int]:
    """``(sessionId, timeout)`` of a learner's REVALIDATE (ZooKeeper's Learner.validateSession: ``long, int``)."""
    r = _data_reader(data, "REVALIDATE data")
    session, timeout = r.i64("sessionId"), r.i32("timeout")
    r.end()
    return session, timeout


def encode_revalidate_answer(session: int, valid: bool) -> bytes:
    """A leader's REVALIDATE answer (ZooKeeper's Leader.revalidateSession): ``long sessionId, boolean valid``."""
    return jute.LONG.pack(jute.check_long("sessionId", session)) + (b"\x01" if valid else b"\x00")
