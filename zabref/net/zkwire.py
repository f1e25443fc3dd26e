"""ZooKeeper's own wire (3.8, 3.9): what its servers write on the quorum and election ports. Sans-IO.

Theory of operation
-------------------
This is the codec of ZooKeeper's bytes, in zabref so that a zabref server can speak them (issue 37) and so that the
conformance tools read a ZooKeeper recording with the same code (`conformance.zk.wire`). It differs from zabref's
own framing (`zabref.net.wire`) in three ways:

* **Quorum port**: no length prefix. One jute ``QuorumPacket {int type; long zxid; buffer data; vector<Id>
  authinfo}`` follows another, bounded by its own lengths (`read_quorum_packet`). The type numbers are
  `PACKET_TYPES` (Leader.java; 9 and 19 are dynamic reconfiguration's). After a SNAP the leader writes the data tree
  on the stream, outside any packet (`zabref.core.zksnap` reads and writes it).
* **Election port, the connecting side's first bytes** (QuorumCnxManager.InitialMessage, `read_initial`): ``long
  protocolVersion`` (-65536, or -65535 when several addresses follow, joined by ``|``), ``long sid``, ``int len`` and
  the address(es) as text (at most `INITIAL_MAX` bytes). A value >= 0 in place of the version is the pre-3.5 form:
  the sid alone.
* **Election port, notifications** (FastLeaderElection.buildMsg, `read_notification`): ``int len`` (1 to
  `NOTIFICATION_MAX`), then ``int state; long leader; long zxid; long electionEpoch`` (28 bytes, before 3.4),
  ``+ long peerEpoch`` (40: the form that ends with version 1), ``+ int version`` and, when version > 1, ``int len``
  + the configuration as text (3.8 sends version 2).

Readers take a `Cursor` over the bytes received so far. A read that needs more bytes than there are raises `Short`
(the caller waits for more, or reports a truncated tail if the stream ended); bytes that are impossible where they
are -- a negative length, one above its limit, text that is not UTF-8, an unknown type or version -- raise what the
cursor's ``fail`` makes (`CodecError` naming the byte offset; `conformance.zk.stream` makes its WireError naming
the recorded stream). No length read from the wire is allocated before it is checked against its limit. The
encoders are the readers' inverses: a value written and read back is the same value.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from zabref.core import jute
from zabref.core.jute import JUTE_MAX, Cursor, Short
from zabref.core.packets import AuthId
from zabref.errors import CodecError

__all__ = ["Cursor", "Short", "JUTE_MAX", "PACKET_TYPES", "PROTOCOL_V1", "PROTOCOL_V2", "INITIAL_MAX",
           "NOTIFICATION_MAX", "AUTHINFO_MAX", "RawPacket", "Initial", "ZkNotification", "read_quorum_packet",
           "read_initial", "read_notification", "decode_notification_body", "encode_quorum_packet",
           "encode_initial", "encode_notification", "config_text"]

PACKET_TYPES = {1: "REQUEST", 2: "PROPOSAL", 3: "ACK", 4: "COMMIT", 5: "PING", 6: "REVALIDATE", 7: "SYNC",
                8: "INFORM", 9: "COMMITANDACTIVATE", 10: "NEWLEADER", 11: "FOLLOWERINFO", 12: "UPTODATE", 13: "DIFF",
                14: "TRUNC", 15: "SNAP", 16: "OBSERVERINFO", 17: "LEADERINFO", 18: "ACKEPOCH",
                19: "INFORMANDACTIVATE"}
PROTOCOL_V1, PROTOCOL_V2 = -65536, -65535
INITIAL_MAX = 2048  # QuorumCnxManager's bound on the initial message's address text
NOTIFICATION_MAX = 512 * 1024  # QuorumCnxManager.PACKETMAXSIZE
AUTHINFO_MAX = 1024

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


# ---------------------------------------------------------------------------------------------------- quorum port


@dataclass(frozen=True, slots=True, init=False)
class RawPacket:
    """A QuorumPacket as ZooKeeper writes it; ``type`` is a number of `PACKET_TYPES`, ``data`` opaque here."""

    type: int
    zxid: int
    data: bytes | None
    authinfo: tuple[AuthId, ...]
    data_at: int  # where ``data`` starts in the stream (its length prefix ends there): for errors inside it

    def __init__(self, type: int, zxid: int, data: bytes | None, authinfo: tuple[AuthId, ...] = (),
                 data_at: int = 0) -> None:
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "zxid", zxid)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "authinfo", authinfo)
        object.__setattr__(self, "data_at", data_at)


def read_quorum_packet(cur: Cursor) -> RawPacket:
    """The QuorumPacket at the cursor. On `Short` the cursor may have moved: read again from where it started."""
    at = cur.pos
    ptype = cur.i32()
    if ptype not in PACKET_TYPES:
        raise cur.fail(f"unknown quorum packet type {ptype}", at)
    zxid = cur.i64()
    data_at = cur.pos + 4
    data = cur.buffer("data")
    count = cur.length("authinfo count", AUTHINFO_MAX, nullable=True) or 0
    ids = tuple(AuthId(cur.ustring("authinfo scheme") or "", cur.ustring("authinfo id") or "") for _ in range(count))
    return RawPacket(ptype, zxid, data, ids, data_at)


def encode_quorum_packet(p: RawPacket) -> bytes:
    """``p`` as it goes on ZooKeeper's quorum port (no prefix); an empty authinfo is written null, as ZooKeeper
    writes a packet built with ``authinfo = null``."""
    if p.type not in PACKET_TYPES:
        raise ValueError(f"{p.type} is not a ZooKeeper quorum packet type")
    parts = [_I32.pack(p.type), _I64.pack(jute.check_long("zxid", p.zxid)), jute.buffer("data", p.data)]
    parts.append(_I32.pack(jute.check_int("authinfo count", len(p.authinfo)) if p.authinfo else -1))
    for a in p.authinfo:
        parts += (jute.ustring("authinfo scheme", a.scheme), jute.ustring("authinfo id", a.id))
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------------- election port


@dataclass(frozen=True, slots=True, init=False)
class Initial:
    """The connecting side's first message: ``protocol_version`` None for the pre-3.5 form (the sid alone)."""

    sid: int
    protocol_version: int | None
    addresses: tuple[str, ...]

    def __init__(self, sid: int, protocol_version: int | None = PROTOCOL_V1, addresses: tuple[str, ...] = ()) -> None:
        object.__setattr__(self, "sid", sid)
        object.__setattr__(self, "protocol_version", protocol_version)
        object.__setattr__(self, "addresses", addresses)


def read_initial(cur: Cursor) -> Initial:
    at = cur.pos
    version = cur.i64()
    if version >= 0:
        return Initial(version, None)
    if version not in (PROTOCOL_V1, PROTOCOL_V2):
        raise cur.fail(f"unknown election protocol version {version}", at)
    sid = cur.i64()
    n = cur.length("address length", INITIAL_MAX, nullable=False) or 0
    if n == 0:
        raise cur.fail("address length is 0", cur.pos - 4)
    text = cur.take(n)
    try:
        addresses = text.decode("utf-8")
    except UnicodeDecodeError as e:
        raise cur.fail(f"address is not UTF-8 ({e.reason})", cur.pos - n + e.start) from None
    return Initial(sid, version, tuple(addresses.split("|")))


def encode_initial(m: Initial) -> bytes:
    if m.protocol_version is None:
        return _I64.pack(jute.check_long("sid", m.sid))
    text = "|".join(m.addresses).encode("utf-8")
    if not 0 < len(text) <= INITIAL_MAX:
        raise ValueError(f"the initial message's address text is {len(text)} bytes (1..{INITIAL_MAX})")
    return _I64.pack(m.protocol_version) + _I64.pack(jute.check_long("sid", m.sid)) + _I32.pack(len(text)) + text


@dataclass(frozen=True, slots=True, init=False)
class ZkNotification:
    """One notification; the fields a shorter (older) form lacks are None."""

    state: int
    leader: int
    zxid: int
    election_epoch: int
    peer_epoch: int | None
    version: int | None
    config: str | None

    def __init__(self, state: int, leader: int, zxid: int, election_epoch: int, peer_epoch: int | None = None,
                 version: int | None = None, config: str | None = None) -> None:
        object.__setattr__(self, "state", state)
        object.__setattr__(self, "leader", leader)
        object.__setattr__(self, "zxid", zxid)
        object.__setattr__(self, "election_epoch", election_epoch)
        object.__setattr__(self, "peer_epoch", peer_epoch)
        object.__setattr__(self, "version", version)
        object.__setattr__(self, "config", config)


def read_notification(cur: Cursor) -> ZkNotification:
    at = cur.pos
    n = cur.length("notification length", NOTIFICATION_MAX, nullable=False) or 0
    if n == 0:
        raise cur.fail("notification length is 0", at)
    body_at = cur.pos
    try:
        return decode_notification_body(cur.take(n))
    except CodecError as e:
        raise cur.fail(f"notification: {e.reason}", body_at + e.offset) from None


def decode_notification_body(body: bytes) -> ZkNotification:
    """A notification's body (what follows its ``int len``): 28, 40 or at least 44 bytes. `CodecError` names the
    offset in the body."""
    n = len(body)
    if n < 28 or 28 < n < 40 or 40 < n < 44:
        raise CodecError("notification", 0, f"a notification is 28, 40 or at least 44 bytes, not {n}")
    r = jute.Reader(body, "notification")
    state, leader, zxid, epoch = r.i32("state"), r.i64("leader"), r.i64("zxid"), r.i64("electionEpoch")
    peer_epoch = version = config = None
    if n >= 40:
        peer_epoch, version = r.i64("peerEpoch"), r.i32("version")  # 40 bytes: version 1, written, never read
    if n >= 44 and version is not None and version > 1:
        config = r.ustring("config")
    r.end()
    return ZkNotification(state, leader, zxid, epoch, peer_epoch, version, config)


def config_text(members: Iterable[tuple[int, str, int, int]], version: int = 0) -> str:
    """A configuration as ZooKeeper writes it in NEWLEADER and in notifications (QuorumMaj.toString): a line
    ``server.ID=HOST:QUORUM_PORT:ELECTION_PORT:participant`` for each ``(id, host, quorum port, election port)`` in
    id order, then ``version=`` and the version in hex."""
    lines = [f"server.{sid}={host}:{quorum}:{election}:participant\n" for sid, host, quorum, election in
             sorted(members)]
    return "".join(lines) + f"version={version:x}"


def encode_notification(n: ZkNotification) -> bytes:
    """``n`` with its length prefix, in the form its fields make: 28 bytes (no peerEpoch, no version), 40 (both), or
    more (a config, which only a version above 1 carries). ValueError for fields no form holds."""
    if (n.peer_epoch is None) != (n.version is None):
        raise ValueError("a notification has both peerEpoch and version (40 bytes or more) or neither (28)")
    if n.config is not None and not (n.version is not None and n.version > 1):
        raise ValueError(f"only a version above 1 carries a config (version {n.version})")
    body = _I32.pack(jute.check_int("state", n.state)) + b"".join(
        _I64.pack(jute.check_long(name, v)) for name, v in (("leader", n.leader), ("zxid", n.zxid),
                                                          ("electionEpoch", n.election_epoch)))
    if n.peer_epoch is not None and n.version is not None:
        body += _I64.pack(jute.check_long("peerEpoch", n.peer_epoch)) + _I32.pack(jute.check_int("version", n.version))
    if n.config is not None:
        body += jute.ustring("config", n.config)
    return _I32.pack(len(body)) + body
