"""Packets and identifiers of Zab, exactly as seed 000 names and numbers them.

Theory of operation: this module holds plain data only -- the QuorumPacket and LearnerInfo structures of seed 000
(LearnerInfo in ZooKeeper 3.5+'s form),
the packet-type numbers of its table, the FastLeaderElection notification, and zxid arithmetic. The wire codec
(`zabref.net.wire`) turns these into bytes and back; the protocol core (`zabref.core.zab`) consumes and produces them.
Nothing here does I/O.

A zxid is a 64-bit number ``epoch << 32 | counter`` (seed 004, section 3: "the high order 32 bits are the epoch ...
the low order 32 bits are a counter"). The spec writes it as the pair ``<<epoch, counter>>``; `zxid_pair` and
`make_zxid` convert between the two.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "PacketType",
    "ServerState",
    "QuorumPacket",
    "LearnerInfo",
    "Notification",
    "AuthId",
    "make_zxid",
    "zxid_epoch",
    "zxid_counter",
    "zxid_pair",
    "PROTOCOL_VERSION",
    "MAX_EPOCH",
    "MAX_COUNTER",
]

#: LearnerInfo.protocolVersion and LEADERINFO's data: the version of this implementation's protocol (ZooKeeper's
#: 0x10000 marks "Zab 1.0").
PROTOCOL_VERSION = 0x10000

#: The largest epoch: a zxid is a signed 64-bit long (jute's ``long``), never negative, so its high half -- the epoch
#: -- stays below 2^31. (With 2^32 - 1 here, a FOLLOWERINFO of epoch 2^31 - 1 made a leader build a LEADERINFO whose
#: zxid does not fit, after it had taken the new epoch: found by the mutation score of the core, docs/traces.md.)
MAX_EPOCH = (1 << 31) - 1
MAX_COUNTER = (1 << 32) - 1


class PacketType(enum.IntEnum):
    """QuorumPacket.type, numbered as in seed 000's table (and ZooKeeper's Leader.java for PING/REQUEST)."""

    REQUEST = 1
    PROPOSAL = 2
    ACK = 3
    COMMIT = 4
    PING = 5
    REVALIDATE = 6
    SYNC = 7
    INFORM = 8
    NEWLEADER = 10
    FOLLOWERINFO = 11
    UPTODATE = 12
    DIFF = 13
    TRUNC = 14
    SNAP = 15
    OBSERVERINFO = 16
    LEADERINFO = 17
    ACKEPOCH = 18


class ServerState(enum.IntEnum):
    """A server's role (seed 002: LOOKING, FOLLOWING, LEADING, OBSERVING), numbered as ZooKeeper's notifications."""

    LOOKING = 0
    FOLLOWING = 1
    LEADING = 2
    OBSERVING = 3


def make_zxid(epoch: int, counter: int) -> int:
    """``epoch << 32 | counter``: epoch in 0..MAX_EPOCH, counter in 0..MAX_COUNTER (a non-negative signed long)."""
    if not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch {epoch} is not in 0..{MAX_EPOCH} (a zxid is a non-negative signed 64-bit long)")
    if not 0 <= counter <= MAX_COUNTER:
        raise ValueError(f"counter {counter} does not fit in 32 bits")
    return (epoch << 32) | counter


def zxid_epoch(zxid: int) -> int:
    return zxid >> 32


def zxid_counter(zxid: int) -> int:
    return zxid & MAX_COUNTER


def zxid_pair(zxid: int) -> tuple[int, int]:
    """The spec's ``<<epoch, counter>>`` form of a zxid."""
    return (zxid >> 32, zxid & MAX_COUNTER)


@dataclass(frozen=True, slots=True, init=False)
class AuthId:
    """org.apache.zookeeper.data.Id: one element of QuorumPacket.authinfo (used only for requests)."""

    scheme: str
    id: str

    def __init__(self, scheme: str, id: str) -> None:
        object.__setattr__(self, "scheme", scheme)
        object.__setattr__(self, "id", id)


@dataclass(frozen=True, slots=True, init=False)
class QuorumPacket:
    """``class QuorumPacket { int type; long zxid; buffer data; vector<Id> authinfo; }`` (seed 000).

    ``data`` is None for a null buffer (jute writes length -1), distinct from an empty buffer.
    """

    type: PacketType
    zxid: int
    data: bytes | None
    authinfo: tuple[AuthId, ...]

    def __init__(self, type: PacketType | int, zxid: int = 0, data: bytes | None = None,
                 authinfo: tuple[AuthId, ...] = ()) -> None:
        # a number given: the member (ValueError if none)
        object.__setattr__(self, "type", type if type.__class__ is PacketType else PacketType(type))
        if not -(1 << 63) <= zxid < (1 << 63):
            raise ValueError(f"zxid {zxid} does not fit in a signed 64-bit long")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise TypeError("QuorumPacket.data must be bytes or None")
        object.__setattr__(self, "zxid", zxid)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "authinfo", authinfo)


@dataclass(frozen=True, slots=True, init=False)
class LearnerInfo:
    """``class LearnerInfo { long serverid; int protocolVersion; long configVersion; }``: the data of FOLLOWERINFO, as
    ZooKeeper 3.5+ writes it (seed 000 has ``int protocolVersion; int serverid``, the form before 3.5: a departure,
    spec/README.md). ``config_version`` is the version of the learner's configuration (zabref's is always 0: it has
    no dynamic reconfiguration)."""

    serverid: int
    protocol_version: int
    config_version: int

    def __init__(self, serverid: int, protocol_version: int, config_version: int = 0) -> None:
        object.__setattr__(self, "serverid", serverid)
        object.__setattr__(self, "protocol_version", protocol_version)
        object.__setattr__(self, "config_version", config_version)


@dataclass(frozen=True, slots=True, init=False)
class Notification:
    """A FastLeaderElection notification (seeds 002 and 003): the sender's state and its current vote.

    ``leader``/``zxid``/``peer_epoch`` are the proposed vote (the proposed leader's sid, its last zxid, its
    currentEpoch); ``election_epoch`` is the sender's logicalclock. The sender's sid is known from the connection's
    handshake and travels beside the notification, not inside it.
    """

    state: ServerState
    leader: int
    zxid: int
    election_epoch: int
    peer_epoch: int

    def __init__(self, state: ServerState | int, leader: int, zxid: int, election_epoch: int, peer_epoch: int) -> None:
        object.__setattr__(self, "state", ServerState(state))
        object.__setattr__(self, "leader", leader)
        object.__setattr__(self, "zxid", zxid)
        object.__setattr__(self, "election_epoch", election_epoch)
        object.__setattr__(self, "peer_epoch", peer_epoch)
