"""What a fuzz input is (`Input`, `Kind`, `Target`, the outcomes it may demand) and the bytes inputs are built from.

Theory of operation: a `Kind` names a port, a weight and a function from a seeded random source and a `Target`
(what the fuzzer knows of one server) to an `Input`: the bytes to send and what the server must do with them --
``close`` the connection (within `CLOSE_WAIT` seconds), stay ``silent``, ``answer`` each request (an error for the
bad ones) or just survive (``send``). The helpers build first bytes (a quorum port's FOLLOWERINFO, an election
port's initial message), packets and frames that are wrong in one way each: a bad length, a stranger's sid, a packet
out of phase, a mutated field, half a frame. `conformance.fuzz.inputs`
holds the kinds themselves.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from zabref.core import payloads, zktxn
from zabref.core.packets import PROTOCOL_VERSION, LearnerInfo, PacketType, QuorumPacket
from zabref.net import wire, zkwire

__all__ = ["OUTCOMES", "CLOSE", "SILENCE", "ANSWER", "SEND", "CLOSE_WAIT", "ROLES", "I32", "Target", "Input", "Kind",
           "hello", "packet_bytes", "not_hello", "bad_length", "bad_data_length", "some_zxid", "stranger_sid",
           "out_of_phase_packet", "mutated_packet", "bad_sid", "half", "wild_long", "initial_message", "not_initial",
           "bad_initial"]


#: What a server must do with an input: close the connection, stay silent, answer each request, or just survive.
OUTCOMES = CLOSE, SILENCE, ANSWER, SEND = "close", "silence", "answer", "send"


#: Seconds a server has to close a connection that an input of kind CLOSE demands it close.
CLOSE_WAIT = 10.0


ROLES = frozenset({"LOOKING", "FOLLOWING", "LEADING"})


I32 = struct.Struct(">i")


@dataclass(frozen=True)
class Target:
    """What the fuzzer knows of one server when it builds an input."""

    sid: int
    role: str
    leader: int
    last_zxid: int
    ghost: int
    participants: tuple[int, ...]


@dataclass(frozen=True)
class Input:
    payload: bytes
    expect: str
    bad: tuple[bool, ...] = ()  # answer: one entry per request, True when it must get an "error" answer
    wait: float = CLOSE_WAIT  # close, silence: seconds the server has to close the connection
    exclusive: bool = False  # holds the target's quorum lock (it carries a handshake of a configured sid)
    #: with TLS on the port: "member" (the harness connects with a member's certificate), "none" (plain bytes on the
    #: TLS port), "stranger" (a certificate of another CA)
    tls: str = "member"
    #: close: the server logs why it closed (a four-letter word's answer ends the connection as ZooKeeper's does,
    #: with nothing to log)
    reason: bool = True


@dataclass(frozen=True)
class Kind:
    name: str
    port: str
    weight: float
    make: Callable[[random.Random, Target], Input]
    roles: frozenset[str] = ROLES
    known_issue: str | None = None
    #: control port: the harness sends the auth line with the server's token first (the kinds that test the gate
    #: itself say False)
    authenticate: bool = True
    #: the gate a kind tests on a secured cluster ("tls", "auth"; None: none): the harness passes every other gate
    #: for the input (a member's certificate, the quorum secret's proof) and leaves that one to the input's bytes.
    #: Gate kinds are in the table only when their gate is on (`kind_table`).
    gate: str | None = None


def hello(sid: int, zxid: int = 0, cid: int = 1) -> bytes:
    """A quorum connection's first bytes as a zabref learner writes them: its FOLLOWERINFO, whose LearnerInfo names
    ``sid``, with connection id ``cid``."""
    info = payloads.encode_followerinfo_data(LearnerInfo(sid, PROTOCOL_VERSION))
    return wire.encode_quorum_packet(wire.with_connection_id(QuorumPacket(PacketType.FOLLOWERINFO, zxid, info), cid))


def initial_message(sid: int) -> bytes:
    """An election connection's first bytes (ZooKeeper's initial message, `zabref.net.zkwire`) naming ``sid``."""
    return zkwire.encode_initial(zkwire.Initial(sid, zkwire.PROTOCOL_V1, ("127.0.0.1:1",)))


def not_initial(rng: random.Random) -> bytes:
    """Random bytes that are no initial message: a negative protocol version that is not ZooKeeper's, or a sid (the
    form before 3.5) far above any server's; at least its 8 bytes, so the server reads it whole at once."""
    data = bytearray(rng.randbytes(rng.randint(8, 512)))
    if int.from_bytes(data[:8], "big", signed=True) in (zkwire.PROTOCOL_V1, zkwire.PROTOCOL_V2):
        data[7] ^= 0x10
    elif 0 <= int.from_bytes(data[:8], "big", signed=True) < 1 << 32:
        data[0] = 0x7F
    return bytes(data)


def packet_bytes(ptype: PacketType, zxid: int = 0, data: bytes | None = None) -> bytes:
    """One QuorumPacket as it goes on a quorum connection (no frame)."""
    return wire.encode_quorum_packet(QuorumPacket(ptype, zxid, data))


def not_hello(rng: random.Random) -> bytes:
    """Random bytes (at least a packet's 16-byte head) whose first four are not FOLLOWERINFO's type (11): refused as
    soon as the head arrives."""
    data = rng.randbytes(rng.randint(16, 512))
    return data if data[:4] != I32.pack(int(PacketType.FOLLOWERINFO)) else b"\xff" + data[1:]


def bad_data_length(rng: random.Random, ptype: int, cap: int) -> bytes:
    """A packet head of type ``ptype`` whose data length is outside -1..``cap``: refused before any data is read."""
    return struct.pack(">iqi", ptype, 0, rng.choice([cap + 1, (1 << 31) - 1, -2, -(1 << 31),
                                                    rng.randint(cap + 1, (1 << 31) - 1), rng.randint(-(1 << 31), -2)]))


def bad_length(rng: random.Random, cap: int) -> bytes:
    return I32.pack(rng.choice([cap + 1, (1 << 31) - 1, -1, -(1 << 31), rng.randint(cap + 1, (1 << 31) - 1),
                                 rng.randint(-(1 << 31), -1)]))


def some_zxid(rng: random.Random, t: Target) -> int:
    e, c = t.last_zxid >> 32, t.last_zxid & 0xFFFFFFFF
    return rng.choice([0, t.last_zxid, ((e + rng.randint(0, 3)) << 32) | (c + rng.randint(0, 5)),
                       rng.randint(0, (1 << 63) - 1)])


def stranger_sid(rng: random.Random, t: Target) -> int:
    """A sid whose packets the target must refuse without any real connection being replaced."""
    others = [s for s in t.participants if s not in (t.sid, t.leader)] if t.role == "FOLLOWING" else []
    return rng.choice([t.ghost, *others])


def out_of_phase_packet(rng: random.Random, t: Target) -> bytes:
    z = some_zxid(rng, t)
    choices = [
        lambda: packet_bytes(PacketType.COMMIT, z),
        lambda: packet_bytes(PacketType.PROPOSAL, z, rng.randbytes(rng.randint(0, 64))),
        lambda: packet_bytes(PacketType.ACK, z),
        lambda: packet_bytes(PacketType.LEADERINFO, (z >> 32) << 32, payloads.encode_leaderinfo_data(PROTOCOL_VERSION)),
        lambda: packet_bytes(PacketType.NEWLEADER, (z >> 32) << 32),
        lambda: packet_bytes(PacketType.UPTODATE, z),
        lambda: packet_bytes(PacketType.DIFF, z),
        lambda: packet_bytes(PacketType.TRUNC, z),
        lambda: packet_bytes(PacketType.SNAP, z, rng.choice([rng.randbytes(16), payloads.encode_snap_data([(z, b"x")])])),
        lambda: packet_bytes(PacketType.INFORM, z, rng.randbytes(8)),
        lambda: packet_bytes(PacketType.COMMIT, z) + packet_bytes(PacketType.PROPOSAL, z, b"late"),
        # a negative zxid, written by hand (the encoder refuses nothing here, but QuorumPacket keeps it)
        lambda: struct.pack(">iqii", int(rng.choice([2, 3, 4])), -rng.randint(1, 1 << 62), -1, -1),
    ]
    return rng.choice(choices)()


def mutated_packet(rng: random.Random, t: Target) -> bytes:
    ptype = rng.choice([PacketType.COMMIT, PacketType.PROPOSAL, PacketType.ACK, PacketType.SNAP])
    zxid = some_zxid(rng, t)
    data = rng.choice([None, rng.randbytes(rng.randint(0, 24))])
    if ptype == PacketType.SNAP:  # its data is the snapshot stream after it, never null
        # zabref's own value (one that begins with a marker, zktxn.MARKERS, would be ZooKeeper's)
        data = payloads.encode_snap_data([(zxid, (data or b"").lstrip(b"".join(zktxn.MARKERS)))])
    body = bytearray(wire.encode_quorum_packet(QuorumPacket(ptype, zxid, data)))
    for _ in range(rng.randint(1, 3)):
        body[rng.randrange(len(body))] = rng.randrange(256)
    try:  # a mutation that made a packet a learner may send now (PING, ACKEPOCH after its FOLLOWERINFO) or a second
        # hello would not be refused: make it unknown instead
        if wire.decode_quorum_packet(bytes(body)).type in (PacketType.PING, PacketType.OBSERVERINFO,
                                                           PacketType.FOLLOWERINFO, PacketType.ACKEPOCH):
            body[:4] = I32.pack(99)
    except wire.CodecError:
        pass
    return bytes(body)


def bad_sid(rng: random.Random, t: Target) -> bytes:
    """A FOLLOWERINFO whose LearnerInfo names no other server of the cluster (the target, 0, an unknown or negative
    id)."""
    sid = rng.choice([t.sid, 0, rng.randint(t.ghost + 1, (1 << 63) - 1), -rng.randint(1, 1 << 63)])
    return hello(sid)


def bad_initial(rng: random.Random, t: Target) -> bytes:
    """An initial message naming a server that is not another of the cluster's (itself, 0, an unknown id, a negative
    one), or one whose address length is out of bounds."""
    sid = rng.choice([t.sid, 0, rng.randint(t.ghost + 1, (1 << 63) - 1), -rng.randint(1, (1 << 63) - 1)])
    if rng.random() < 0.25:
        length = rng.choice([0, -1, zkwire.INITIAL_MAX + 1, (1 << 31) - 1])
        return struct.pack(">qqi", zkwire.PROTOCOL_V1, t.ghost, length) + b"127.0.0.1:1"
    return zkwire.encode_initial(zkwire.Initial(sid, zkwire.PROTOCOL_V1, ("127.0.0.1:1",)))


def half(rng: random.Random, whole: bytes) -> bytes:
    return whole[: rng.randint(1, len(whole) - 1)]


def wild_long(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, 4, 99, (1 << 63) - 1, rng.randint(0, (1 << 63) - 1)])
