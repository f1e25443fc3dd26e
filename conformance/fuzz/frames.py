"""What a fuzz input is (`Input`, `Kind`, `Target`, the outcomes it may demand) and the bytes inputs are built from.

Theory of operation: a `Kind` names a port, a weight and a function from a seeded random source and a `Target`
(what the fuzzer knows of one server) to an `Input`: the bytes to send and what the server must do with them --
``close`` the connection (within `CLOSE_WAIT` seconds), stay ``silent``, ``answer`` each request (an error for the
bad ones) or just survive (``send``). The helpers build frames, handshakes and packets that are wrong in one way
each: a bad length, a stranger's sid, a packet out of phase, a mutated field, half a frame. `conformance.fuzz.inputs`
holds the kinds themselves.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from zabref.core import payloads
from zabref.core.packets import PROTOCOL_VERSION, PacketType, QuorumPacket
from zabref.net import wire, zkwire

__all__ = ["OUTCOMES", "CLOSE", "SILENCE", "ANSWER", "SEND", "CLOSE_WAIT", "ROLES", "I32", "Target", "Input", "Kind",
           "handshake_frame", "packet_frame", "not_handshake", "bad_length", "some_zxid", "stranger_sid",
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


def handshake_frame(sid: int) -> bytes:
    return wire.frame(wire.encode_handshake(sid, 1))


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


def packet_frame(ptype: PacketType, zxid: int = 0, data: bytes | None = None) -> bytes:
    return wire.frame(wire.encode_quorum_packet(QuorumPacket(ptype, zxid, data)))


def not_handshake(rng: random.Random) -> bytes:
    """Random bytes whose first four are not the handshake's length prefix (8): rejected as soon as they arrive."""
    data = rng.randbytes(rng.randint(4, 512))
    return data if data[:4] != I32.pack(8) else b"\xff" + data[1:]


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
        lambda: packet_frame(PacketType.COMMIT, z),
        lambda: packet_frame(PacketType.PROPOSAL, z, rng.randbytes(rng.randint(0, 64))),
        lambda: packet_frame(PacketType.ACK, z),
        lambda: packet_frame(PacketType.LEADERINFO, (z >> 32) << 32, payloads.encode_leaderinfo_data(PROTOCOL_VERSION)),
        lambda: packet_frame(PacketType.NEWLEADER, (z >> 32) << 32),
        lambda: packet_frame(PacketType.UPTODATE, z),
        lambda: packet_frame(PacketType.DIFF, z),
        lambda: packet_frame(PacketType.TRUNC, z),
        lambda: packet_frame(PacketType.SNAP, z, rng.choice([rng.randbytes(16), payloads.encode_snap_data([(z, b"x")])])),
        lambda: packet_frame(PacketType.ACKEPOCH, z, payloads.encode_ackepoch_data(rng.randint(-1, 5))),
        lambda: packet_frame(PacketType.INFORM, z, rng.randbytes(8)),
        lambda: packet_frame(PacketType.COMMIT, z) + packet_frame(PacketType.PROPOSAL, z, b"late"),
        # a negative zxid, written by hand (the encoder refuses nothing here, but QuorumPacket keeps it)
        lambda: wire.frame(struct.pack(">iqii", int(rng.choice([2, 3, 4])), -rng.randint(1, 1 << 62), -1, -1)),
    ]
    return rng.choice(choices)()


def mutated_packet(rng: random.Random, t: Target) -> bytes:
    body = bytearray(wire.encode_quorum_packet(QuorumPacket(
        rng.choice([PacketType.COMMIT, PacketType.PROPOSAL, PacketType.ACK, PacketType.SNAP]), some_zxid(rng, t),
        rng.choice([None, rng.randbytes(rng.randint(0, 24))]))))
    for _ in range(rng.randint(1, 3)):
        body[rng.randrange(len(body))] = rng.randrange(256)
    try:  # a mutation that made an accepted packet (PING, a hello) would not be refused: make it unknown instead
        if wire.decode_quorum_packet(bytes(body)).type in (PacketType.PING, PacketType.OBSERVERINFO,
                                                           PacketType.FOLLOWERINFO):
            body[:4] = I32.pack(99)
    except wire.CodecError:
        pass
    return wire.frame(bytes(body))


def bad_sid(rng: random.Random, t: Target) -> bytes:
    sid = rng.choice([t.sid, 0, rng.randint(t.ghost + 1, (1 << 63) - 1), -rng.randint(1, 1 << 63)])
    return wire.frame(struct.pack(">q", sid))


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
