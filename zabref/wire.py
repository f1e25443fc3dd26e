"""The wire codec: QuorumPacket, LearnerInfo, election notifications and handshakes as bytes, and back. Sans-IO.

Theory of operation
-------------------
Every connection (quorum port and election port alike) carries a stream of *frames*: a big-endian ``int32`` length,
then that many bytes of body. The first frame on a connection is a *handshake* whose body is the connecting server's
sid (``int64``); every later frame is a QuorumPacket (quorum port) or a Notification (election port). Bodies use jute's
binary encoding, as ZooKeeper does:

* ``int`` = big-endian int32, ``long`` = big-endian int64;
* ``buffer`` = int32 length then the bytes, length -1 meaning null;
* ``ustring`` = int32 length then UTF-8 bytes;
* ``vector<T>`` = int32 count then the elements, count -1 meaning null.

This module holds no sockets, clocks or threads. ``frame(body)`` and the ``encode_*`` functions turn values into bytes;
a `FrameDecoder` takes bytes as they arrive (``feed``) and hands back complete frame bodies, whatever the chunking; the
``decode_*`` functions turn a body into a value. A QuorumPacket's ``data`` is an opaque buffer at this level; the
``*_data`` helpers give it structure for the packet types whose data has structure in this project (seed 000's table).

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
from collections.abc import Iterable, Sequence

from zabref.errors import CodecError
from zabref.packets import AuthId, LearnerInfo, Notification, PacketType, QuorumPacket, ServerState

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FrameDecoder",
    "frame",
    "encode_handshake",
    "decode_handshake",
    "encode_quorum_packet",
    "decode_quorum_packet",
    "encode_learner_info",
    "decode_learner_info",
    "encode_notification",
    "decode_notification",
    "encode_leaderinfo_data",
    "decode_leaderinfo_data",
    "encode_ackepoch_data",
    "decode_ackepoch_data",
    "encode_followerinfo_data",
    "decode_followerinfo_data",
    "encode_proposal_data",
    "decode_proposal_data",
    "encode_snap_data",
    "decode_snap_data",
    "ACKEPOCH_ALREADY_ACKNOWLEDGED",
]

#: Largest frame body a `FrameDecoder` accepts unless told otherwise (ZooKeeper's jute.maxbuffer is of this order).
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

#: ACKEPOCH's currentEpoch when the follower had already accepted the proposed epoch (seed 000's table: "it passes -1
#: as the currentEpoch to signal that the new epoch is not acknowledged").
ACKEPOCH_ALREADY_ACKNOWLEDGED = -1

_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_LEARNER_INFO = struct.Struct(">ii")
_NOTIFICATION = struct.Struct(">iqqqq")
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


# ---------------------------------------------------------------------------------------------------------- writing


def _check_int(name: str, value: int) -> int:
    if not _INT_MIN <= value <= _INT_MAX:
        raise ValueError(f"{name} = {value} does not fit in a signed 32-bit int")
    return value


def _check_long(name: str, value: int) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise ValueError(f"{name} = {value} does not fit in a signed 64-bit long")
    return value


def _buffer(name: str, value: bytes | None) -> bytes:
    if value is None:
        return _INT.pack(-1)
    if len(value) > _INT_MAX:
        raise ValueError(f"{name} is {len(value)} bytes, more than a jute buffer holds")
    return _INT.pack(len(value)) + bytes(value)


def _ustring(name: str, value: str) -> bytes:
    return _buffer(name, value.encode("utf-8"))


def frame(body: bytes) -> bytes:
    """One frame: the body's length as a big-endian int32, then the body."""
    if len(body) > _INT_MAX:
        raise ValueError(f"frame body is {len(body)} bytes, more than an int32 length prefix holds")
    return _INT.pack(len(body)) + bytes(body)


# ---------------------------------------------------------------------------------------------------------- reading


class _Reader:
    """A cursor over one body; every read checks the bytes present and names ``what`` and the offset on failure."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, data: bytes, what: str) -> None:
        self.buf = memoryview(data)
        self.pos = 0
        self.what = what

    def fail(self, reason: str, offset: int | None = None) -> CodecError:
        return CodecError(self.what, self.pos if offset is None else offset, reason)

    def _take(self, n: int, field: str) -> memoryview:
        if len(self.buf) - self.pos < n:
            raise self.fail(f"{field} needs {n} bytes, only {len(self.buf) - self.pos} remain")
        chunk = self.buf[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i32(self, field: str) -> int:
        return _INT.unpack(self._take(4, field))[0]

    def i64(self, field: str) -> int:
        return _LONG.unpack(self._take(8, field))[0]

    def count(self, field: str, min_element_size: int, *, nullable: bool) -> int:
        """A count; if nullable, -1 (a null vector) reads as 0. A count that cannot fit in the bytes left fails now."""
        start = self.pos
        n = self.i32(field)
        if n == -1 and nullable:
            return 0
        if n < 0:
            raise self.fail(f"{field} is negative ({n})", start)
        remaining = len(self.buf) - self.pos
        if n * min_element_size > remaining:
            raise self.fail(f"{field} is {n} but only {remaining} bytes remain", start)
        return n

    def buffer(self, field: str, *, nullable: bool = True) -> bytes | None:
        start = self.pos
        n = self.i32(f"{field} length")
        if n == -1 and nullable:
            return None
        if n < 0:
            raise self.fail(f"{field} length is {n}", start)
        if n > len(self.buf) - self.pos:
            raise self.fail(f"{field} length is {n} but only {len(self.buf) - self.pos} bytes remain", start)
        return bytes(self._take(n, field))

    def ustring(self, field: str) -> str:
        start = self.pos
        raw = self.buffer(field, nullable=False)
        assert raw is not None
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not valid UTF-8 ({e.reason})", start + 4 + e.start) from None

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} trailing bytes")


def _bytes_like(data: object, what: str) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise CodecError(what, 0, f"expected bytes, got {type(data).__name__}")
    return bytes(data)


# ---------------------------------------------------------------------------------------------------------- frames


class FrameDecoder:
    """Bytes in, complete frame bodies out, however the stream is cut into chunks.

    ``feed(data)`` returns the bodies of every frame completed by ``data`` (possibly none, possibly many). A negative
    length prefix, or one above ``max_frame``, raises `CodecError` as soon as its four bytes are present, before any
    body arrives. After an error the decoder is broken: every later ``feed`` raises the same error (the connection must
    be closed). ``close()`` checks that the stream ended on a frame boundary. Offsets in errors count bytes from the
    start of the stream.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, what: str = "frame") -> None:
        if not 0 <= max_frame <= _INT_MAX:
            raise ValueError(f"max_frame = {max_frame} must be in 0..{_INT_MAX}")
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
                (length,) = _INT.unpack_from(self._buf, pos)
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
                (length,) = _INT.unpack_from(self._buf, 0)
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
    return _LONG.pack(_check_long("sid", sid)) + _LONG.pack(_check_long("connection id", cid))


def decode_handshake(body: bytes) -> tuple[int, int]:
    """(sid, connection id) of a handshake body."""
    r = _Reader(_bytes_like(body, "handshake"), "handshake")
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


# ---------------------------------------------------------------------------------------------------------- QuorumPacket


def encode_quorum_packet(p: QuorumPacket) -> bytes:
    """``int type, long zxid, buffer data, vector<Id> authinfo`` (jute's order for seed 000's QuorumPacket)."""
    parts = [_INT.pack(int(p.type)), _LONG.pack(_check_long("zxid", p.zxid)), _buffer("data", p.data)]
    if not p.authinfo:
        parts.append(_INT.pack(-1))
    else:
        parts.append(_INT.pack(_check_int("authinfo count", len(p.authinfo))))
        for a in p.authinfo:
            parts += (_ustring("authinfo scheme", a.scheme), _ustring("authinfo id", a.id))
    return b"".join(parts)


def decode_quorum_packet(body: bytes) -> QuorumPacket:
    r = _Reader(_bytes_like(body, "QuorumPacket"), "QuorumPacket")
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


# ---------------------------------------------------------------------------------------------------------- LearnerInfo


def encode_learner_info(info: LearnerInfo) -> bytes:
    """``int protocolVersion, int serverid`` (seed 000 declares both as int)."""
    return _LEARNER_INFO.pack(
        _check_int("protocolVersion", info.protocol_version), _check_int("serverid", info.serverid)
    )


def decode_learner_info(body: bytes) -> LearnerInfo:
    r = _Reader(_bytes_like(body, "LearnerInfo"), "LearnerInfo")
    info = LearnerInfo(r.i32("protocolVersion"), r.i32("serverid"))
    r.end()
    return info


# ---------------------------------------------------------------------------------------------------------- Notification


def encode_notification(n: Notification) -> bytes:
    """``int state, long leader, long zxid, long electionEpoch, long peerEpoch`` (FastLeaderElection's order)."""
    return _NOTIFICATION.pack(
        int(n.state),
        _check_long("leader", n.leader),
        _check_long("zxid", n.zxid),
        _check_long("electionEpoch", n.election_epoch),
        _check_long("peerEpoch", n.peer_epoch),
    )


def decode_notification(body: bytes) -> Notification:
    r = _Reader(_bytes_like(body, "Notification"), "Notification")
    state_number = r.i32("state")
    try:
        state = ServerState(state_number)
    except ValueError:
        raise r.fail(f"unknown server state {state_number}", 0) from None
    n = Notification(state, r.i64("leader"), r.i64("zxid"), r.i64("electionEpoch"), r.i64("peerEpoch"))
    r.end()
    return n


# ---------------------------------------------------------------------------------------------------------- payloads


def _data_reader(data: bytes | None, what: str) -> _Reader:
    if data is None:
        raise CodecError(what, 0, "data is null")
    return _Reader(_bytes_like(data, what), what)


def encode_leaderinfo_data(protocol_version: int) -> bytes:
    """LEADERINFO's data: ``int protocolVersion`` (seed 000's table: data = "protocol")."""
    return _INT.pack(_check_int("protocolVersion", protocol_version))


def decode_leaderinfo_data(data: bytes | None) -> int:
    r = _data_reader(data, "LEADERINFO data")
    version = r.i32("protocolVersion")
    r.end()
    return version


def encode_ackepoch_data(current_epoch: int) -> bytes:
    """ACKEPOCH's data: ``int currentEpoch``, or -1 when the epoch was already acknowledged (seed 000's table)."""
    if current_epoch < ACKEPOCH_ALREADY_ACKNOWLEDGED:
        raise ValueError(f"currentEpoch = {current_epoch}: only -1 may be negative")
    return _INT.pack(_check_int("currentEpoch", current_epoch))


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
    r = _data_reader(data, "FOLLOWERINFO data")
    info = LearnerInfo(r.i32("protocolVersion"), r.i32("serverid"))
    r.end()
    return info


def encode_proposal_data(value: bytes) -> bytes:
    """PROPOSAL's data: the proposed value's bytes, as they are."""
    return bytes(value)


def decode_proposal_data(data: bytes | None) -> bytes:
    """The proposed value; a null buffer is an error (a proposal always carries a value, possibly empty)."""
    if data is None:
        raise CodecError("PROPOSAL data", 0, "data is null")
    return _bytes_like(data, "PROPOSAL data")


def encode_snap_data(history: Iterable[tuple[int, bytes]]) -> bytes:
    """SNAP's data: a whole history, ``int count`` then per transaction ``long zxid, buffer value``."""
    items: Sequence[tuple[int, bytes]] = list(history)
    parts = [_INT.pack(_check_int("history count", len(items)))]
    for i, (zxid, value) in enumerate(items):
        if value is None:
            raise ValueError(f"history[{i}] has no value")
        parts += (_LONG.pack(_check_long(f"history[{i}].zxid", zxid)), _buffer(f"history[{i}].value", value))
    return b"".join(parts)


def decode_snap_data(data: bytes | None) -> list[tuple[int, bytes]]:
    """The history SNAP carries. Structure only: ordering of zxids is checked by whoever installs it."""
    r = _data_reader(data, "SNAP data")
    history: list[tuple[int, bytes]] = []
    for i in range(r.count("history count", 12, nullable=False)):
        zxid = r.i64(f"history[{i}].zxid")
        value = r.buffer(f"history[{i}].value", nullable=False)
        assert value is not None
        history.append((zxid, value))
    r.end()
    return history
