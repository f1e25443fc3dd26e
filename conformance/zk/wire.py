"""What ZooKeeper servers said to each other, decoded from the proxy's recording.

Theory of operation
-------------------
Each proxied connection has two byte streams; `decode_recording` joins each one's DATA records back into a stream and
decodes it by its port kind and direction:

* **Quorum port** (learner -> leader is c2s: the learner connects): no length prefix, one jute ``QuorumPacket {int
  type; long zxid; buffer data; vector<Id> authinfo}`` after another (`decode_quorum`); the packet types and what
  their data hold are in `conformance.zk.payloads`. On the leader's stream a SNAP packet is followed by the data
  tree, the sessions and the "BenWasHere" signature (`conformance.zk.snapshot`), then packets again.
* **Election port** (`decode_election`): the connecting server first writes ``long protocolVersion`` (-65536, or
  -65535 with several addresses; a value >= 0 is the pre-3.5 form and is itself the sid), ``long sid``, ``int len``
  and its election address(es) as text (``QuorumCnxManager.InitialMessage``; at most 2048 bytes); then each side
  writes ``int len`` (1..512 KiB, ``PACKETMAXSIZE``) + a notification: ``int state; long leader; long zxid; long
  electionEpoch`` (28 bytes, before 3.4), ``+ long peerEpoch`` (40), ``+ int version`` and, when version > 1, ``int
  len + config text`` (``FastLeaderElection.buildMsg``; 3.8 sends version 2; the 40-byte form ends with version 1).

Every message becomes a `Message` (connection, sender, receiver, byte offset in its stream, the time the proxy read
its last byte, name, zxid, fields). A stream that ends inside a message -- a killed server, a connection the proxy
closed -- gives a final `Message` named ``TRUNCATED`` (its offset and how many bytes of it there are). Bytes that are
wrong where they are (an unknown packet type, a negative or impossible length, data a packet cannot carry, a snapshot
without its signature) raise `WireError` naming the recording, the connection, the direction and the byte offset:
nothing is skipped. `decode_quorum` and `decode_election` work on plain bytes and are what the tests feed by hand.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from conformance.zk import WireError
from conformance.zk.payloads import PACKET_TYPES, decode_data
from conformance.zk.recording import Kind, Recording, read_records
from conformance.zk.snapshot import read_snapshot
from conformance.zk.stream import Cursor, Short
from zabref.core.jute import Reader
from zabref.errors import CodecError

__all__ = ["Decoded", "Message", "STATES", "decode_election", "decode_quorum", "decode_recording", "format_message"]

PROTOCOL_V1, PROTOCOL_V2 = -65536, -65535
INITIAL_MAX = 2048
FRAME_MAX = 512 * 1024
AUTHINFO_MAX = 1024
STATES = {0: "LOOKING", 1: "FOLLOWING", 2: "LEADING", 3: "OBSERVING"}


@dataclass(frozen=True, slots=True)
class Item:
    """One thing decoded from a stream: where it starts and ends, its name, zxid and fields."""

    offset: int
    end: int
    name: str
    zxid: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)


def _truncated(buf: bytes, at: int, what: str) -> Item:
    return Item(at, len(buf), "TRUNCATED", None, {"incomplete": what, "bytes": len(buf) - at})


def _payload(cur: Cursor, ptype: int, data: bytes | None, data_at: int, from_leader: bool) -> dict[str, Any]:
    try:
        return decode_data(ptype, data, from_leader, PACKET_TYPES[ptype])
    except CodecError as e:
        raise WireError(cur.where, data_at + e.offset, f"{PACKET_TYPES[ptype]} data: {e.reason}") from None


def decode_quorum(buf: bytes, where: str, *, from_leader: bool) -> list[Item]:
    """The QuorumPackets of one direction of a quorum connection (``from_leader``: the leader's side, where a
    snapshot may follow a SNAP)."""
    out: list[Item] = []
    cur = Cursor(buf, where)
    snapshot_next = False
    while cur.remaining:
        at = cur.pos
        try:
            if snapshot_next:
                fields = read_snapshot(cur)
                out.append(Item(at, cur.pos, "SNAPSHOT", None, fields))
                snapshot_next = False
                continue
            ptype = cur.i32()
            if ptype not in PACKET_TYPES:
                raise cur.fail(f"unknown quorum packet type {ptype}", at)
            zxid = cur.i64()
            data_at = cur.pos + 4
            data = cur.buffer("data")
            auth = cur.length("authinfo count", AUTHINFO_MAX, nullable=True) or 0
            ids = [f"{cur.ustring('authinfo scheme')}:{cur.ustring('authinfo id')}" for _ in range(auth)]
        except Short:
            out.append(_truncated(buf, at, "snapshot" if snapshot_next else "QuorumPacket"))
            break
        fields = _payload(cur, ptype, data, data_at, from_leader)
        if ids:
            fields["authinfo"] = ids
        out.append(Item(at, cur.pos, PACKET_TYPES[ptype], zxid, fields))
        snapshot_next = from_leader and ptype == 15
    return out


def _notification(body: bytes, where: str, at: int) -> dict[str, Any]:
    r = Reader(body, "notification")
    n = len(body)
    try:
        if n < 28 or 28 < n < 40 or 40 < n < 44:
            raise r.fail(f"a notification is 28, 40 or at least 44 bytes, not {n}")
        state = r.i32("state")
        out: dict[str, Any] = {"state": STATES.get(state, str(state)), "leader": r.i64("leader"),
                               "zxid": r.i64("zxid"), "electionEpoch": r.i64("electionEpoch")}
        if n >= 40:
            out["peerEpoch"] = r.i64("peerEpoch")
            out["version"] = r.i32("version")  # 40 bytes: version 1, which ZooKeeper writes and does not read
        if n >= 44 and out["version"] > 1:
            out["config"] = r.ustring("config")
        r.end()
    except CodecError as e:
        raise WireError(where, at + e.offset, f"notification: {e.reason}") from None
    return out


def decode_election(buf: bytes, where: str, *, initiator: bool) -> list[Item]:
    """One direction of an election connection: the initial message first when ``initiator`` (the side that
    connected), then length-framed notifications."""
    out: list[Item] = []
    cur = Cursor(buf, where)
    hello = initiator
    while cur.remaining:
        at = cur.pos
        try:
            if hello:
                version = cur.i64()
                if version >= 0:
                    out.append(Item(at, cur.pos, "INITIAL", None, {"protocolVersion": None, "sid": version}))
                elif version in (PROTOCOL_V1, PROTOCOL_V2):
                    sid = cur.i64()
                    n = cur.length("address length", INITIAL_MAX, nullable=False) or 0
                    if n == 0:
                        raise cur.fail("address length is 0", cur.pos - 4)
                    text = cur.take(n)
                    try:
                        addr = text.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise cur.fail(f"address is not UTF-8 ({e.reason})", cur.pos - n + e.start) from None
                    out.append(Item(at, cur.pos, "INITIAL", None,
                                    {"protocolVersion": version, "sid": sid, "address": addr}))
                else:
                    raise cur.fail(f"unknown election protocol version {version}", at)
                hello = False
                continue
            n = cur.length("notification length", FRAME_MAX, nullable=False) or 0
            if n == 0:
                raise cur.fail("notification length is 0", at)
            body = cur.take(n)
        except Short:
            out.append(_truncated(buf, at, "initial message" if hello else "notification"))
            break
        fields = _notification(body, where, at + 4)
        out.append(Item(at, cur.pos, "NOTIFICATION", fields.pop("zxid"), fields))
    return out


# --- a whole recording ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """One message one server sent another, as the proxy saw it."""

    t_ns: int
    conn: int
    kind: str  # quorum | election | event (OPEN, CLOSE, FAULT, ...)
    sender: int | None
    receiver: int | None
    direction: str  # c2s | s2c | ""
    offset: int
    name: str
    zxid: int | None
    fields: dict[str, Any]


@dataclass
class Decoded:
    recording: Recording
    messages: list[Message]

    def names(self, kind: str | None = None) -> set[str]:
        return {m.name for m in self.messages if kind is None or m.kind == kind}

    def count(self, name: str) -> int:
        return sum(1 for m in self.messages if m.name == name)

    def truncated(self) -> list[Message]:
        return [m for m in self.messages if m.name == "TRUNCATED"]


class _Stream:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ends: list[int] = []
        self.times: list[int] = []
        self.size = 0

    def add(self, data: bytes, t_ns: int) -> None:
        self.chunks.append(data)
        self.size += len(data)
        self.ends.append(self.size)
        self.times.append(t_ns)

    def time_of(self, end: int) -> int:
        """When the proxy read the byte just before ``end`` (the last byte of a message)."""
        i = bisect.bisect_left(self.ends, max(end, 1))
        return self.times[min(i, len(self.times) - 1)]


def decode_recording(path: str | Path) -> Decoded:
    rec = read_records(path)
    links: dict[int, dict[str, Any]] = {}
    streams: dict[tuple[int, str], _Stream] = {}
    events: list[Message] = []
    for r in rec.records:
        if r.kind is Kind.OPEN:
            links[r.conn] = r.json()
        if r.kind in (Kind.DATA_C2S, Kind.DATA_S2C):
            if r.conn not in links:
                raise WireError(str(path), r.offset, f"data on connection {r.conn}, which was never opened")
            streams.setdefault((r.conn, "c2s" if r.kind is Kind.DATA_C2S else "s2c"), _Stream()).add(r.body, r.t_ns)
        elif r.kind is not Kind.META:
            link = links.get(r.conn, {})
            events.append(Message(r.t_ns, r.conn, "event", link.get("src"), link.get("dst"), "", r.offset,
                                  r.kind.name, None, r.json()))
    messages = list(events)
    for (conn, direction), stream in streams.items():
        messages += _decode_stream(str(path), conn, links[conn], direction, stream)
    messages.sort(key=lambda m: (m.t_ns, m.conn, m.offset))
    if rec.torn_tail is not None:  # the file itself ends inside a record: last, whatever its time
        at, have = rec.torn_tail
        messages.append(Message(messages[-1].t_ns if messages else 0, 0, "event", None, None, "", at,
                                "TRUNCATED", None, {"incomplete": "recording record", "bytes": have}))
    return Decoded(rec, messages)


def _decode_stream(path: str, conn: int, link: dict[str, Any], direction: str, stream: _Stream) -> Iterator[Message]:
    src, dst, kind = link["src"], link["dst"], link["kind"]
    sender, receiver = (src, dst) if direction == "c2s" else (dst, src)
    where = f"{path}: connection {conn} ({kind} {src}->{dst}), {direction} ({sender} to {receiver})"
    buf = b"".join(stream.chunks)
    if kind == "quorum":
        items = decode_quorum(buf, where, from_leader=direction == "s2c")
    elif kind == "election":
        items = decode_election(buf, where, initiator=direction == "c2s")
    else:
        raise WireError(path, 0, f"connection {conn} has an unknown port kind {kind!r}")
    for it in items:
        yield Message(stream.time_of(it.end), conn, kind, sender, receiver, direction, it.offset, it.name, it.zxid,
                      it.fields)


def format_message(m: Message, t0_ns: int = 0) -> str:
    """One line: time since ``t0_ns``, connection, who to whom, what, zxid, fields."""
    t = (m.t_ns - t0_ns) / 1e9
    who = f"{m.sender}->{m.receiver}" if m.sender is not None else "-"
    head = f"{t:10.6f} c{m.conn:<4} {m.kind[:8]:<8} {who:<5} {m.name:<17}"
    zxid = f" zxid=0x{m.zxid & (1 << 64) - 1:x}" if m.zxid is not None else ""
    fields = " ".join(f"{k}={_short(v)}" for k, v in m.fields.items())
    return f"{head}{zxid} {fields}".rstrip()


def _short(v: Any) -> str:
    if isinstance(v, str):
        s = v.replace("\n", "\\n")
        return repr(s if len(s) <= 80 else s[:77] + "...")
    if isinstance(v, list) and len(v) > 6:
        return f"[{', '.join(map(str, v[:6]))}, ... ({len(v)})]"
    return str(v)
