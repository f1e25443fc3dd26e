"""The wire codec: QuorumPackets, LearnerInfo's connection id, election notifications and frames as bytes, and
back. Sans-IO.

Theory of operation
-------------------
The bytes are ZooKeeper 3.8's on both server ports, so that zabref and ZooKeeper servers talk to each other:

* **Quorum port**: one jute ``QuorumPacket {int type; long zxid; buffer data; vector<Id> authinfo}`` after another,
  with no frame around it (ZooKeeper's Learner and LearnerHandler write records straight onto the socket); a
  `PacketDecoder` takes bytes as they arrive (``feed``) and hands back the packets they complete, whatever the
  chunking. The learner's first packet, FOLLOWERINFO, says who it is: its data is a LearnerInfo (``long serverid,
  int protocolVersion, long configVersion``, `zabref.core.payloads`), after which a zabref learner writes the
  connection's id (``long``; `with_connection_id`, `connection_id`), so that both ends name the connection in their
  action logs and `zabref validate` tells a new connection's packets from an old one's. A ZooKeeper leader reads the
  first 20 bytes of that data and no more (LearnerHandler), so the id costs it nothing.
* **Election port**: ZooKeeper's initial message, then *frames* (a big-endian ``int32`` length, then that many bytes
  of body; `frame`, `FrameDecoder`) whose bodies are Notifications in ZooKeeper 3.8's form (`zabref.net.zkwire`
  reads and writes it). The client port frames its JSON the same way (`zabref.net.clientwire`).

Bodies use jute's binary encoding, as ZooKeeper does (`zabref.core.jute`):

* ``int`` = big-endian int32, ``long`` = big-endian int64;
* ``buffer`` = int32 length then the bytes, length -1 meaning null;
* ``ustring`` = int32 length then UTF-8 bytes;
* ``vector<T>`` = int32 count then the elements, count -1 meaning null.

This module holds no sockets, clocks or threads. A QuorumPacket's ``data`` is an opaque buffer at this level;
`zabref.core.payloads` gives it structure for the packet types whose data has structure.

Decoding is strict: an unknown type number, a short body, trailing bytes, a negative length, invalid UTF-8 or a count
larger than the bytes that remain raise `CodecError`, naming what was being decoded and the byte offset (from the
start of the stream, for a decoder). Nothing else escapes a decoder, and no length read from the wire is allocated
before it is checked against its bound (a frame's against the decoder's maximum frame size, a packet's data against
its maximum data size). Encoding a value whose fields do not fit their wire types raises `ValueError`: that is the
caller's bug, not the peer's.

Two equal values always encode to the same bytes. An empty ``authinfo`` is written as a null vector (count -1), as
ZooKeeper writes packets built with ``authinfo = null``; a count of 0 decodes to the same empty tuple.
"""

from __future__ import annotations

import struct
from typing import Generic, TypeVar

from zabref.core import jute, payloads, zksnap
from zabref.core.packets import AuthId, Notification, PacketType, QuorumPacket, ServerState
from zabref.errors import CodecError
from zabref.net import zkwire

__all__ = [
    "DEFAULT_MAX_FRAME",
    "FrameDecoder",
    "frame",
    "PacketDecoder",
    "with_connection_id",
    "connection_id",
    "encode_quorum_packet",
    "decode_quorum_packet",
    "encode_notification",
    "decode_notification",
]

T = TypeVar("T")

#: Largest frame body a `FrameDecoder` accepts unless told otherwise (ZooKeeper's jute.maxbuffer is of this order).
DEFAULT_MAX_FRAME = 64 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------------- frames


def frame(body: bytes) -> bytes:
    """One frame: the body's length as a big-endian int32, then the body."""
    if len(body) > jute.INT_MAX:
        raise ValueError(f"frame body is {len(body)} bytes, more than an int32 length prefix holds")
    return jute.INT.pack(len(body)) + bytes(body)




class _StreamDecoder(Generic[T]):
    """What both decoders share: the bytes received and not yet decoded, their offset in the stream, and the error
    that breaks the decoder for good. A subclass says where the item at a position ends (`_item_at`) and why a stream
    cut inside one is bad (`_cut_reason`)."""

    def __init__(self, bound: int, name: str, what: str) -> None:
        if not 0 <= bound <= jute.INT_MAX:
            raise ValueError(f"{name} = {bound} must be in 0..{jute.INT_MAX}")
        self.what = what
        self._buf = bytearray()
        self._consumed = 0  # stream offset of self._buf[0]
        self._error: CodecError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete item."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[T]:
        if self._error is not None:
            raise self._error
        self._buf += data
        items: list[T] = []
        pos = 0
        try:
            while (got := self._item_at(pos)) is not None:
                item, pos = got
                items.append(item)
        except CodecError as e:
            self._error = e
            raise
        finally:
            del self._buf[:pos]
            self._consumed += pos
        return items

    def close(self) -> None:
        """The stream has ended: raise `CodecError` if it stopped inside an item."""
        if self._error is not None:
            raise self._error
        if self._buf:
            self._error = CodecError(self.what, self._consumed, self._cut_reason())
            raise self._error

    def _item_at(self, pos: int) -> tuple[T, int] | None:  # pragma: no cover -- every subclass has its own
        raise NotImplementedError

    def _cut_reason(self) -> str:  # pragma: no cover -- every subclass has its own
        raise NotImplementedError


class FrameDecoder(_StreamDecoder[bytes]):
    """Bytes in, complete frame bodies out, however the stream is cut into chunks.

    ``feed(data)`` returns the bodies of every frame completed by ``data`` (possibly none, possibly many). A negative
    length prefix, or one above ``max_frame``, raises `CodecError` as soon as its four bytes are present, before any
    body arrives. After an error the decoder is broken: every later ``feed`` raises the same error (the connection must
    be closed). ``close()`` checks that the stream ended on a frame boundary. Offsets in errors count bytes from the
    start of the stream.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME, what: str = "frame") -> None:
        super().__init__(max_frame, "max_frame", what)
        self.max_frame = max_frame

    def _item_at(self, pos: int) -> tuple[bytes, int] | None:
        if len(self._buf) - pos < 4:
            return None
        (length,) = jute.INT.unpack_from(self._buf, pos)
        if length < 0 or length > self.max_frame:
            raise CodecError(self.what, self._consumed + pos, f"length prefix {length} is outside 0..{self.max_frame}")
        if len(self._buf) - pos - 4 < length:
            return None
        return bytes(self._buf[pos + 4: pos + 4 + length]), pos + 4 + length

    def _cut_reason(self) -> str:
        if len(self._buf) < 4:
            return f"stream ended after {len(self._buf)} of 4 length-prefix bytes"
        (length,) = jute.INT.unpack_from(self._buf, 0)
        return f"stream ended after {len(self._buf) - 4} of {length} body bytes"


# ----------------------------------------------------------------------------------------------------------
# QuorumPacket


def encode_quorum_packet(p: QuorumPacket) -> bytes:
    """``int type, long zxid, buffer data, vector<Id> authinfo`` (jute's order for seed 000's QuorumPacket); a SNAP's
    data (its snapshot stream, `zabref.core.zksnap`) after the packet, whose own data is null."""
    snap = p.type == PacketType.SNAP
    if snap and p.data is None:
        raise ValueError("a SNAP's data is its snapshot stream; it cannot be null")
    parts = [jute.INT.pack(int(p.type)), jute.LONG.pack(jute.check_long("zxid", p.zxid)),
             jute.buffer("data", None if snap else p.data)]
    if not p.authinfo:
        parts.append(jute.INT.pack(-1))
    else:
        parts.append(jute.INT.pack(jute.check_int("authinfo count", len(p.authinfo))))
        for a in p.authinfo:
            parts += (jute.ustring("authinfo scheme", a.scheme), jute.ustring("authinfo id", a.id))
    if snap:
        parts.append(bytes(p.data or b""))
    return b"".join(parts)


#: ``int type, long zxid, int data length``: a QuorumPacket's fixed head, read in one call on the common path.
_PACKET_HEAD = struct.Struct(">iqi")
_PACKET_TYPES = {int(t): t for t in PacketType}


def decode_quorum_packet(body: bytes | bytearray) -> QuorumPacket:
    """One whole packet, a SNAP's snapshot stream after it included (`PacketDecoder` reads a stream of them); a
    bytearray is read as bytes are (tests/test_wire.py holds the two to the same answer)."""
    # The common packet (a known type, a data buffer that fits, no authinfo, nothing after) in a few calls; anything
    # else -- every malformed body among it -- is read field by field below, which names what is wrong and where.
    if type(body) is bytes and len(body) >= 20:
        number, zxid, n = _PACKET_HEAD.unpack_from(body)
        ptype = _PACKET_TYPES.get(number)
        end = 16 + (n if n > 0 else 0)
        if ptype is not None and ptype != PacketType.SNAP and n >= -1 and len(body) == end + 4 \
                and body[end:] in _NO_AUTHINFO:
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
    if ptype == PacketType.SNAP:
        data, r.pos = _snapshot(body, r.pos, data, zksnap.TreeReader(), len(body), "QuorumPacket SNAP", 0)
        if data is None:
            raise r.fail("the snapshot stream after the SNAP ends before its signature", len(body))
    r.end()
    return QuorumPacket(ptype, zxid, data, tuple(ids))


def _snapshot(buf: bytes | bytearray, start: int, data: bytes | None, reader: zksnap.TreeReader, bound: int,
              what: str, offset: int) -> tuple[bytes | None, int]:
    """The snapshot stream (`zabref.core.zksnap`) a SNAP packet whose data was ``data`` has after it at ``start`` in
    ``buf`` -- ZooKeeper writes the packet with null data, then the stream -- and where it ends, read on by
    ``reader`` from where its last try stopped; while it is not all here, None and the length of ``buf`` it needs at
    least. `CodecError` (offsets plus ``offset``) for data in the packet, a stream longer than ``bound`` or bytes
    that are no snapshot."""
    if data is not None:
        raise CodecError(what, offset + start, f"a SNAP's data is {len(data)} bytes; ZooKeeper's is null, its "
                                                "snapshot stream follows the packet")
    cur = jute.Cursor(buf, what, start)  # a bytearray reads as bytes do, uncopied
    try:
        tree = reader.read(cur)
    except CodecError as e:
        raise CodecError(e.what, offset + e.offset, e.reason) from None
    stop = start + (reader.pos if tree is None else cur.pos - start)
    if (len(buf) if tree is None else stop) - start > bound:
        raise CodecError(what, offset + start, f"the snapshot stream is longer than {bound} bytes")
    if tree is None:
        return None, start + reader.need
    return bytes(buf[start:stop]), stop


#: The authinfo count of a packet without it: -1 (a null vector, as ZooKeeper writes it) or 0 (the same, empty).
_NO_AUTHINFO = (jute.INT.pack(-1), jute.INT.pack(0))


class PacketDecoder(_StreamDecoder[QuorumPacket]):
    """Bytes in, QuorumPackets out, on a quorum connection (no frames: one packet after another), however the stream
    is cut into chunks.

    ``feed(data)`` returns every packet completed by ``data`` (possibly none, possibly many). An unknown type raises
    `CodecError` as soon as its 4 bytes are present, a data length outside -1..``max_data`` as soon as the packet's
    first 16 bytes are, before its data arrives; authinfo (a count within `zkwire.AUTHINFO_MAX`, strings within
    `zkwire.JUTE_MAX`, never null) with a `zkwire.Cursor` once all of it is here (`_authinfo_end`). After an
    error the decoder is broken: every later ``feed`` raises the same error (the connection must be closed).
    ``close()`` checks that the stream ended between packets. Offsets in errors count bytes from the start of the
    stream. A SNAP's snapshot stream, which follows its packet and is a whole tree, has its own bound,
    ``max_snapshot`` bytes (by default ``max_data``), refused as soon as that many bytes of it are here.
    """

    def __init__(self, max_data: int = DEFAULT_MAX_FRAME, what: str = "quorum stream",
                 max_snapshot: int | None = None) -> None:
        super().__init__(max_data, "max_data", what)
        self.max_data = max_data
        self.max_snapshot = max_data if max_snapshot is None else max_snapshot
        self._snap_need = 0  # bytes from the start of a SNAP waiting for its snapshot stream that it needs at least
        self._snap: zksnap.TreeReader | None = None  # that stream's reader, which goes on where it stopped

    def _item_at(self, pos: int) -> tuple[QuorumPacket, int] | None:
        """The packet starting at ``pos`` and where the next one starts, or None if its bytes are not all here. A
        SNAP's snapshot stream (`zabref.core.zksnap`, within ``max_snapshot`` bytes) is its data: its reader goes on
        from the last whole element it read, once the bytes its last try stopped for are here."""
        if len(self._buf) - pos < self._snap_need:
            return None
        got = self._packet_at(pos)
        if got is None or got[0].type != PacketType.SNAP:
            return got
        packet, start = got
        if self._snap is None:
            self._snap = zksnap.TreeReader()
        what = f"{self.what}: QuorumPacket SNAP"
        data, stop = _snapshot(self._buf, start, packet.data, self._snap, self.max_snapshot, what, self._consumed)
        if data is None:
            self._snap_need = stop - pos
            return None
        self._snap_need, self._snap = 0, None
        return QuorumPacket(PacketType.SNAP, packet.zxid, data, packet.authinfo), stop

    def _packet_at(self, pos: int) -> tuple[QuorumPacket, int] | None:
        """The packet at ``pos`` and where it ends, as `_item_at` reads it, without a SNAP's snapshot stream."""
        buf = self._buf
        if len(buf) - pos < 4:
            return None
        (number,) = jute.INT.unpack_from(buf, pos)
        ptype = _PACKET_TYPES.get(number)
        if ptype is None:  # refused as soon as its 4 bytes are here
            raise CodecError(self.what, self._consumed + pos, f"unknown packet type {number}")
        if len(buf) - pos < 16:
            return None
        _, zxid, n = _PACKET_HEAD.unpack_from(buf, pos)
        if n < -1 or n > self.max_data:
            raise CodecError(f"{self.what}: QuorumPacket {ptype.name}", self._consumed + pos + 12,
                             f"data length {n} is outside -1..{self.max_data}")
        end = pos + 16 + (n if n > 0 else 0)
        if len(buf) < end + 4:
            return None
        data = None if n == -1 else bytes(buf[pos + 16:end])
        (count,) = jute.INT.unpack_from(buf, end)
        if count in (-1, 0):
            return QuorumPacket(ptype, zxid, data), end + 4
        stop = self._authinfo_end(end)
        if stop is None:
            return None
        cur = zkwire.Cursor(bytes(buf[end:stop]), f"{self.what}: QuorumPacket {ptype.name} authinfo")
        try:
            count = cur.length("authinfo count", zkwire.AUTHINFO_MAX, nullable=True) or 0
            ids = []
            for i in range(count):
                pair = []
                for field in (f"authinfo[{i}].scheme", f"authinfo[{i}].id"):
                    at = cur.pos
                    text = cur.ustring(field)
                    if text is None:
                        raise cur.fail(f"{field} is null", at)
                    pair.append(text)
                ids.append(AuthId(*pair))
        except zkwire.Short:  # pragma: no cover -- `_authinfo_end` waited for every byte the reads take
            return None
        except CodecError as e:
            raise CodecError(e.what, self._consumed + end + e.offset, e.reason) from None
        return QuorumPacket(ptype, zxid, data, tuple(ids)), end + cur.pos

    def _authinfo_end(self, start: int) -> int | None:
        """Where the authinfo that starts at ``start`` ends, read from its lengths alone (nothing is copied until all
        of it is here, so a peer that trickles a long one costs no copying per byte); None while some of it is
        missing. At a length out of bounds it stops there: the `zkwire.Cursor` that reads the authinfo names it."""
        buf = self._buf
        (count,) = jute.INT.unpack_from(buf, start)
        at = start + 4
        if not 0 <= count <= zkwire.AUTHINFO_MAX:
            return at
        for _ in range(2 * count):  # scheme and id of each Id
            if len(buf) < at + 4:
                return None
            (n,) = jute.INT.unpack_from(buf, at)
            at += 4
            if not 0 <= n <= zkwire.JUTE_MAX:
                return at
            at += n
            if len(buf) < at:
                return None
        return at

    def _cut_reason(self) -> str:
        return f"stream ended inside a QuorumPacket ({len(self._buf)} bytes of it received)"


def with_connection_id(packet: QuorumPacket, cid: int) -> QuorumPacket:
    """A learner's FOLLOWERINFO with the connection's id (``long``, >= 0) written after its LearnerInfo."""
    if packet.type != PacketType.FOLLOWERINFO or packet.data is None or len(packet.data) != payloads.LEARNER_INFO_SIZE:
        raise ValueError(f"only a FOLLOWERINFO with a {payloads.LEARNER_INFO_SIZE}-byte LearnerInfo takes a "
                         "connection id")
    if cid < 0:
        raise ValueError(f"connection id = {cid} must not be negative")
    return QuorumPacket(packet.type, packet.zxid, packet.data + jute.LONG.pack(jute.check_long("connection id", cid)))


def connection_id(packet: QuorumPacket) -> int | None:
    """The connection id a zabref learner wrote after the LearnerInfo of its FOLLOWERINFO (`with_connection_id`), or
    None when its data is the LearnerInfo alone, as a ZooKeeper learner sends it. `CodecError` for a negative id."""
    data = packet.data
    if packet.type != PacketType.FOLLOWERINFO or data is None or len(data) != payloads.LEARNER_INFO_SIZE + 8:
        return None
    (cid,) = jute.LONG.unpack_from(data, payloads.LEARNER_INFO_SIZE)
    if cid < 0:
        raise CodecError("FOLLOWERINFO data", payloads.LEARNER_INFO_SIZE, f"connection id is negative ({cid})")
    return cid


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
