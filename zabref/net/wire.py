"""The wire codec: QuorumPacket, LearnerInfo, election notifications and handshakes as bytes, and back. Sans-IO.

Theory of operation
-------------------
Every connection (quorum port and election port alike) carries a stream of *frames*: a big-endian ``int32`` length,
then that many bytes of body. The first frame on a connection is a *handshake* whose body is the connecting server's
sid and a connection id (two ``int64``); every later frame is a QuorumPacket (quorum port) or a Notification
(election port, in ZooKeeper 3.8's form: `zabref.net.zkwire` reads and writes it). Bodies use jute's binary
encoding, as ZooKeeper does:

* ``int`` = big-endian int32, ``long`` = big-endian int64;
* ``buffer`` = int32 length then the bytes, length -1 meaning null;
* ``ustring`` = int32 length then UTF-8 bytes;
* ``vector<T>`` = int32 count then the elements, count -1 meaning null.

This module holds no sockets, clocks or threads. ``frame(body)`` and the ``encode_*`` functions turn values into bytes;
a `FrameDecoder` takes bytes as they arrive (``feed``) and hands back complete frame bodies, whatever the chunking; the
``decode_*`` functions turn a body into a value. A QuorumPacket's ``data`` is an opaque buffer at this level;
`zabref.core.payloads` gives it structure for the packet types whose data has structure (seed 000's table). The jute
primitives both use are `zabref.core.jute`.

Decoding is strict: an unknown type number, a short body, trailing bytes, a negative length, invalid UTF-8 or a count
larger than the bytes that remain raise `CodecError`, naming what was being decoded and the byte offset. Nothing else
escapes a decoder, and no length read from the wire is allocated before it is checked against the bytes present (or,
for a frame prefix, against the decoder's maximum frame size). Encoding a value whose fields do not fit their wire
types raises `ValueError`: that is the caller's bug, not the peer's.

Two equal values always encode to the same bytes. An empty ``authinfo`` is written as a null vector (count -1), as
ZooKeeper writes packets built with ``authinfo = null``; a count of 0 decodes to the same empty tuple.
"""

from __future__ import annotations

import struct

from zabref.core import jute
from zabref.core.packets import AuthId, Notification, PacketType, QuorumPacket, ServerState
from zabref.errors import CodecError
from zabref.net import zkwire

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FrameDecoder",
    "frame",
    "encode_handshake",
    "decode_handshake",
    "encode_quorum_packet",
    "decode_quorum_packet",
    "encode_notification",
    "decode_notification",
]

#: Largest frame body a `FrameDecoder` accepts unless told otherwise (ZooKeeper's jute.maxbuffer is of this order).
DEFAULT_MAX_FRAME = 64 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------------- frames


def frame(body: bytes) -> bytes:
    """One frame: the body's length as a big-endian int32, then the body."""
    if len(body) > jute.INT_MAX:
        raise ValueError(f"frame body is {len(body)} bytes, more than an int32 length prefix holds")
    return jute.INT.pack(len(body)) + bytes(body)




class FrameDecoder:
    """Bytes in, complete frame bodies out, however the stream is cut into chunks.

    ``feed(data)`` returns the bodies of every frame completed by ``data`` (possibly none, possibly many). A negative
    length prefix, or one above ``max_frame``, raises `CodecError` as soon as its four bytes are present, before any
    body arrives. After an error the decoder is broken: every later ``feed`` raises the same error (the connection must
    be closed). ``close()`` checks that the stream ended on a frame boundary. Offsets in errors count bytes from the
    start of the stream.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, what: str = "frame") -> None:
        if not 0 <= max_frame <= jute.INT_MAX:
            raise ValueError(f"max_frame = {max_frame} must be in 0..{jute.INT_MAX}")
        self.max_frame = max_frame
        self.what = what
        self._buf = bytearray()
        self._consumed = 0  # stream offset of self._buf[0]
        self._error: CodecError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        if self._error is not None:
            raise self._error
        self._buf += data
        bodies: list[bytes] = []
        pos = 0
        try:
            while len(self._buf) - pos >= 4:
                (length,) = jute.INT.unpack_from(self._buf, pos)
                if length < 0 or length > self.max_frame:
                    reason = f"length prefix {length} is outside 0..{self.max_frame}"
                    raise CodecError(self.what, self._consumed + pos, reason)
                if len(self._buf) - pos - 4 < length:
                    break
                bodies.append(bytes(self._buf[pos + 4 : pos + 4 + length]))
                pos += 4 + length
        except CodecError as e:
            self._error = e
            raise
        finally:
            del self._buf[:pos]
            self._consumed += pos
        return bodies

    def close(self) -> None:
        """The stream has ended: raise `CodecError` if it stopped inside a frame."""
        if self._error is not None:
            raise self._error
        if self._buf:
            if len(self._buf) < 4:
                reason = f"stream ended after {len(self._buf)} of 4 length-prefix bytes"
            else:
                (length,) = jute.INT.unpack_from(self._buf, 0)
                reason = f"stream ended after {len(self._buf) - 4} of {length} body bytes"
            self._error = CodecError(self.what, self._consumed, reason)
            raise self._error


# ---------------------------------------------------------------------------------------------------------- handshake


def encode_handshake(sid: int, cid: int) -> bytes:
    """The first frame's body on every connection between servers: the connecting server's sid and a connection id
    (two int64 >= 0). The dialer picks the id at random; both ends log it with every packet of the connection, so
    that `zabref validate` tells a new connection's packets from an old one's."""
    if sid < 0 or cid < 0:
        raise ValueError(f"sid = {sid} and connection id = {cid} must not be negative")
    return jute.LONG.pack(jute.check_long("sid", sid)) + jute.LONG.pack(jute.check_long("connection id", cid))


def decode_handshake(body: bytes) -> tuple[int, int]:
    """(sid, connection id) of a handshake body."""
    r = jute.Reader(jute.bytes_like(body, "handshake"), "handshake")
    start = r.pos
    sid = r.i64("sid")
    if sid < 0:
        raise r.fail(f"sid is negative ({sid})", start)
    start = r.pos
    cid = r.i64("connection id")
    if cid < 0:
        raise r.fail(f"connection id is negative ({cid})", start)
    r.end()
    return sid, cid


# ----------------------------------------------------------------------------------------------------------
# QuorumPacket


def encode_quorum_packet(p: QuorumPacket) -> bytes:
    """``int type, long zxid, buffer data, vector<Id> authinfo`` (jute's order for seed 000's QuorumPacket)."""
    parts = [jute.INT.pack(int(p.type)), jute.LONG.pack(jute.check_long("zxid", p.zxid)), jute.buffer("data", p.data)]
    if not p.authinfo:
        parts.append(jute.INT.pack(-1))
    else:
        parts.append(jute.INT.pack(jute.check_int("authinfo count", len(p.authinfo))))
        for a in p.authinfo:
            parts += (jute.ustring("authinfo scheme", a.scheme), jute.ustring("authinfo id", a.id))
    return b"".join(parts)


#: ``int type, long zxid, int data length``: a QuorumPacket's fixed head, read in one call on the common path.
_PACKET_HEAD = struct.Struct(">iqi")
_PACKET_TYPES = {int(t): t for t in PacketType}


def decode_quorum_packet(body: bytes) -> QuorumPacket:
    # The common packet (a known type, a data buffer that fits, no authinfo, nothing after) in a few calls; anything
    # else -- every malformed body among it -- is read field by field below, which names what is wrong and where.
    if type(body) is bytes and len(body) >= 20:
        number, zxid, n = _PACKET_HEAD.unpack_from(body)
        ptype = _PACKET_TYPES.get(number)
        end = 16 + (n if n > 0 else 0)
        if ptype is not None and n >= -1 and len(body) == end + 4 and body[end:] in _NO_AUTHINFO:
            return QuorumPacket(ptype, zxid, None if n == -1 else body[16:end])
    r = jute.Reader(jute.bytes_like(body, "QuorumPacket"), "QuorumPacket")
    start = r.pos
    type_number = r.i32("type")
    try:
        ptype = PacketType(type_number)
    except ValueError:
        raise r.fail(f"unknown packet type {type_number}", start) from None
    r.what = f"QuorumPacket {ptype.name}"
    zxid = r.i64("zxid")
    data = r.buffer("data")
    ids = []
    for i in range(r.count("authinfo count", 8, nullable=True)):
        ids.append(AuthId(r.ustring(f"authinfo[{i}].scheme"), r.ustring(f"authinfo[{i}].id")))
    r.end()
    return QuorumPacket(ptype, zxid, data, tuple(ids))


#: The authinfo count of a packet without it: -1 (a null vector, as ZooKeeper writes it) or 0 (the same, empty).
_NO_AUTHINFO = (jute.INT.pack(-1), jute.INT.pack(0))


# ----------------------------------------------------------------------------------------------------------
# Notification


def encode_notification(n: Notification, config: str | None = None) -> bytes:
    """A notification's body as ZooKeeper writes it (FastLeaderElection.buildMsg, `zabref.net.zkwire`): ``int state,
    long leader, long zxid, long electionEpoch, long peerEpoch, int version``, then, with a ``config`` (the
    configuration text, `zkwire.config_text`), ``int len`` and that text with version 2, as 3.8 sends; without one,
    version 1 and nothing more (40 bytes, the form 3.4 sent and 3.8 still reads)."""
    if n.state not in _STATES:
        raise ValueError(f"state {n.state!r} is not a ServerState")
    zk = zkwire.ZkNotification(int(n.state), n.leader, n.zxid, n.election_epoch, n.peer_epoch,
                               1 if config is None else 2, config)
    return zkwire.encode_notification(zk)[4:]  # the frame's prefix is the notification's own ``int len``


_STATES = {int(s): s for s in ServerState}


def decode_notification(body: bytes) -> Notification:
    """Any form ZooKeeper reads (`zkwire.decode_notification_body`: 28, 40 or at least 44 bytes). A 28-byte one has no
    peerEpoch: its zxid's epoch stands in, as FastLeaderElection does. The configuration text a version above 1
    carries is read (it must be UTF-8) and not used: zabref's membership is its own configuration's."""
    zk = zkwire.decode_notification_body(jute.bytes_like(body, "Notification"))
    state = _STATES.get(zk.state)
    if state is None:
        raise CodecError("notification", 0, f"unknown server state {zk.state}")
    peer_epoch = zk.zxid >> 32 if zk.peer_epoch is None else zk.peer_epoch
    return Notification(state, zk.leader, zk.zxid, zk.election_epoch, peer_epoch)
