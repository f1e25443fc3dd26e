"""What ZooKeeper servers said to each other, decoded from the proxy's recording.

Theory of operation
-------------------
Each proxied connection has two byte streams; `decode_recording` joins each one's DATA records back into a stream and
decodes it by its port kind and direction:

* **Quorum port** (learner -> leader is c2s: the learner connects): no length prefix, one jute QuorumPacket after
  another (`decode_quorum`); what their data hold is in `conformance.zk.payloads`. On the leader's stream a SNAP
  packet is followed by the data tree, the sessions and the "BenWasHere" signature (`conformance.zk.snapshot`), then
  packets again.
* **Election port** (`decode_election`): the connecting side's initial message, then length-framed notifications.

The bytes of both are read by zabref's codec of ZooKeeper's wire, `zabref.net.zkwire` (its docstring has the
formats), the one a zabref server speaking ZooKeeper's wire uses; this module adds the recording's view.

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
from conformance.zk.payloads import decode_data
from conformance.zk.recording import Kind, Recording, read_records
from conformance.zk.snapshot import read_snapshot
from conformance.zk.stream import Cursor, Short
from zabref.errors import CodecError
from zabref.net import zkwire
from zabref.net.zkwire import PACKET_TYPES

__all__ = ["Decoded", "Message", "STATES", "decode_election", "decode_quorum", "decode_recording", "format_message"]

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
            p = zkwire.read_quorum_packet(cur)
        except Short:
            out.append(_truncated(buf, at, "snapshot" if snapshot_next else "QuorumPacket"))
            break
        fields = _payload(cur, p.type, p.data, p.data_at, from_leader)
        if p.authinfo:
            fields["authinfo"] = [f"{a.scheme}:{a.id}" for a in p.authinfo]
        out.append(Item(at, cur.pos, PACKET_TYPES[p.type], p.zxid, fields))
        snapshot_next = from_leader and p.type == 15
    return out


def _notification(n: zkwire.ZkNotification) -> dict[str, Any]:
    out: dict[str, Any] = {"state": STATES.get(n.state, str(n.state)), "leader": n.leader,
                           "electionEpoch": n.election_epoch}
    if n.peer_epoch is not None:
        out["peerEpoch"] = n.peer_epoch
        out["version"] = n.version
    if n.config is not None:
        out["config"] = n.config
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
                m = zkwire.read_initial(cur)
                fields: dict[str, Any] = {"protocolVersion": m.protocol_version, "sid": m.sid}
                if m.protocol_version is not None:
                    fields["address"] = "|".join(m.addresses)
                out.append(Item(at, cur.pos, "INITIAL", None, fields))
                hello = False
                continue
            n = zkwire.read_notification(cur)
        except Short:
            out.append(_truncated(buf, at, "initial message" if hello else "notification"))
            break
        out.append(Item(at, cur.pos, "NOTIFICATION", n.zxid, _notification(n)))
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
