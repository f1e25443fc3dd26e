"""Theory of operation -- the inverse of conformance/replay/mapping.py: a spec state of spec/Zab.tla (or of
spec/ZabSync.tla) as one `zabref.core.node.Node` per server -- the object a running server's every decision is made
by -- the channels as in-memory FIFO queues of QuorumPackets, and each server's disk; and back.

`World.from_spec(state)` builds, for every server s of 1..N, ``Node(s, 1..N, Persistent(...), TIMING)`` from s's
persistent variables (what a restart reads from disk), then sets each volatile variable of its Zab core with the
function below named after it (`SETTERS`: one per spec variable, reading s's entry of the spec's function over
``Server``). What the runtime's connections would have told each node follows from the state (`_connections`): a
leader accepted the connections of its learners (learnerPhase not NONE, or a follower's packets on their way to
it), and a follower whose leader holds no connection from it has lost it (the spec's ~LeaderConnected: its next tick
gives up). A state of spec/ZabSync.tla gives each leader its waiting learner syncs and PING counts, and each
follower the clients waiting for its syncs (`_syncs`). The spec's ``msgs[a][b]`` becomes the deque
``channels[(a, b)]`` of `zabref.core.packets.QuorumPacket`, each packet encoded as the sender's node encodes it
(`packet`: FOLLOWERINFO carries a LearnerInfo, LEADERINFO the protocol version, ACKEPOCH an int, PROPOSAL the value as
a ZooKeeper transaction (`zabref.core.zktxn`), SNAP a serialized history, a sync's REQUEST, PING and SYNC their
ZooKeeper forms; the rest no data). A transaction's value, a number in the spec, is its decimal text in bytes, as
the conformance driver submits it. The variables in `conformance.replay.mapping.NOT_MAPPED` are held by no server
and are skipped; any other variable this module cannot set is an `InverseError` naming it.

`World.apply(s, effects)` does what the runtime does with a node's `Effects`: the storage operations to s's disk
(`Disk`), a dialled connection accepted by the peer, the packets appended to the channels, the deliveries and the
role noted, and for each closed peer p both channels between s and p emptied and ``connection_closed(s)`` given to
p's node (the spec's GoLooking(s) as every other server sees it). `World.crash(s)` is the spec's Crash: a fresh node
from s's disk, then every other server's connection to s closes. `World.to_spec()` maps every node back with
conformance/replay/mapping.py, from the snapshot the control socket gives (`zabref.runtime.control.snapshot_variables`,
`zabref.runtime.actionlog.describe_packet`, the node's ``pending_sync_variables``), so the round trip
``World.from_spec(x).to_spec() == x`` (minus NOT_MAPPED, and a sync's ghost: `mapping.checked`) tests both
directions against each other.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from conformance.errors import ConformanceError
from conformance.replay import mapping
from zabref.core import payloads
from zabref.core.packets import PROTOCOL_VERSION, LearnerInfo, PacketType, QuorumPacket, ServerState, make_zxid
from zabref.core.effects import Effects, Timing
from zabref.core.node import Node
from zabref.core.zab import (
    AppendTxns,
    LearnerPhase,
    Persistent,
    ReplaceHistory,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    TruncateHistory,
    Txn,
    ZabCore,
    ZabState,
)
from zabref.errors import ZabError
from zabref.runtime.actionlog import describe_packet
from zabref.runtime.control import snapshot_variables  # the control socket's snapshot of a core: what the driver maps

__all__ = ["InverseError", "World", "Disk", "SETTERS", "PERSISTENT", "txn", "packet", "zxid"]

#: The spec's persistent variables: a core is built from them (Crash keeps exactly these).
PERSISTENT = ("history", "acceptedEpoch", "currentEpoch")

#: The variables of spec/ZabSync.tla that the nodes hold (`_syncs`); a state of spec/Zab.tla has none.
SYNC_SET = frozenset(mapping.SYNC_VARIABLES)

#: Every node's timers (`World.NOW`, `World.TIMEOUT`: the steps choose the time, not the limits).
TIMING = Timing()


class InverseError(ConformanceError):
    """A spec state this module cannot turn into cores: an unknown variable, a malformed value."""


def zxid(pair: Any) -> int:
    """The spec's <<epoch, counter>> as the 64-bit zxid."""
    return make_zxid(int(pair[0]), int(pair[1]))


def _value(v: Any) -> bytes:
    """A transaction value: the spec's number as decimal text (mapping.txn reads it back as the number)."""
    return str(v).encode("utf-8")


def txn(t: Mapping[str, Any]) -> Txn:
    """[zxid |-> <<e, c>>, value |-> v] as a `Txn`."""
    return Txn(zxid(t["zxid"]), _value(t["value"]))


def _no_data(kind: PacketType, data: Any) -> None:
    if data != mapping.NO_DATA:
        raise InverseError(f"a {kind.name} packet carries no data in the spec, this one {data!r}")
    return None


def _leaderinfo(data: Any) -> bytes:
    """LEADERINFO: no data in the spec; the core sends its protocol version."""
    _no_data(PacketType.LEADERINFO, data)
    return payloads.encode_leaderinfo_data(PROTOCOL_VERSION)


#: Packet type -> the data its sender's core puts in it, from the spec's data (the inverse of mapping.packet).
_DATA: dict[PacketType, Callable[[int, Any], bytes | None]] = {
    PacketType.FOLLOWERINFO: lambda z, d: payloads.encode_followerinfo_data(LearnerInfo(int(d), PROTOCOL_VERSION)),
    PacketType.LEADERINFO: lambda z, d: _leaderinfo(d),
    PacketType.ACKEPOCH: lambda z, d: payloads.encode_ackepoch_data(int(d)),
    PacketType.PROPOSAL: lambda z, d: payloads.encode_proposal_data(z, _value(d)),
    PacketType.SNAP: lambda z, d: payloads.encode_snap_data([txn(t) for t in d]),
}


#: A sync's packets (spec/ZabSync.tla) as its sender's node sends them: REQUEST of op sync (ZooKeeper's form, zxid
#: -1), a step PING of the round (zxid `payloads.PING_STEP`; a learner's answer echoes it), SYNC (zxid 0). Their
#: data in the spec is the read checks' ghost or 0, which no server holds.
_SYNC_PACKETS = {
    PacketType.REQUEST: QuorumPacket(PacketType.REQUEST, -1, payloads.encode_request_data(0, 0, payloads.OP_SYNC, "/")),
    PacketType.PING: QuorumPacket(PacketType.PING, payloads.PING_STEP),
    PacketType.SYNC: QuorumPacket(PacketType.SYNC, 0),
}


def packet(p: Mapping[str, Any]) -> QuorumPacket:
    """The spec's Packet(type, zxid, data) as the QuorumPacket its sender's node sends."""
    try:
        kind = PacketType[p["type"]]
    except KeyError:
        raise InverseError(f"unknown packet type {p.get('type')!r}") from None
    if kind in _SYNC_PACKETS:
        if list(p["zxid"]) != [0, 0]:
            raise InverseError(f"a {kind.name} packet carries zxid <<0, 0>> in the spec, this one {p['zxid']!r}")
        return _SYNC_PACKETS[kind]
    encode = _DATA.get(kind)
    z = zxid(p["zxid"])
    data = encode(z, p["data"]) if encode is not None else _no_data(kind, p["data"])
    return QuorumPacket(kind, z, data)


# ---- one function per volatile spec variable: set server core.sid's part of it -----------------------------------

def state(core: ZabCore, v: Any) -> None:
    """state[s]: the ServerState of that name."""
    core.state = ServerState[v]


def zabState(core: ZabCore, v: Any) -> None:
    """zabState[s]."""
    core.zab_state = ZabState(v)


def leader(core: ZabCore, v: Any) -> None:
    """leader[s]: a sid, 0 for NoServer."""
    core.leader = int(v)


def lastCommitted(core: ZabCore, v: Any) -> None:
    """lastCommitted[s]."""
    core.last_committed = int(v)


def stagedHistory(core: ZabCore, v: Any) -> None:
    """stagedHistory[s]."""
    core.staged_history = [txn(t) for t in v]


def newEpoch(core: ZabCore, v: Any) -> None:
    """newEpoch[s]."""
    core.new_epoch = int(v)


def learnerPhase(core: ZabCore, row: Any) -> None:
    """learnerPhase[s][f] for every f."""
    core.learner_phase = {f: LearnerPhase(p) for f, p in zip(core.servers, row, strict=True)}


def learnerLastZxid(core: ZabCore, row: Any) -> None:
    """learnerLastZxid[s][f] for every f."""
    core.learner_last_zxid = {f: zxid(z) for f, z in zip(core.servers, row, strict=True)}


def ackIndex(core: ZabCore, row: Any) -> None:
    """ackIndex[s][f] for every f."""
    core.ack_index = {f: int(k) for f, k in zip(core.servers, row, strict=True)}


SETTERS: dict[str, Callable[[ZabCore, Any], None]] = {
    f.__name__: f for f in (state, zabState, leader, lastCommitted, stagedHistory, newEpoch, learnerPhase,
                            learnerLastZxid, ackIndex)
}


class Disk:
    """A server's storage as the runtime keeps it: `Output.persist` applied in order (zabref.storage's semantics)."""

    def __init__(self, p: Persistent) -> None:
        self.history, self.accepted_epoch, self.current_epoch = list(p.history), p.accepted_epoch, p.current_epoch

    def apply(self, ops: Any) -> None:
        for op in ops:
            if isinstance(op, AppendTxns):
                self.history.extend(op.txns)
            elif isinstance(op, TruncateHistory):
                self.history = [t for t in self.history if t.zxid <= op.zxid]
            elif isinstance(op, ReplaceHistory):
                self.history = list(op.history)
            elif isinstance(op, SetAcceptedEpoch):
                self.accepted_epoch = op.epoch
            elif isinstance(op, SetCurrentEpoch):
                self.current_epoch = op.epoch
            else:
                raise TypeError(f"not a storage operation: {op!r}")

    def persistent(self) -> Persistent:
        return Persistent(tuple(self.history), self.accepted_epoch, self.current_epoch)

    def holds(self, core: ZabCore) -> bool:
        """Whether this disk holds the core's persistent variables (the core's own view of its disk)."""
        return (self.accepted_epoch == core.accepted_epoch and self.current_epoch == core.current_epoch
                and self.history == core.history)


@functools.lru_cache(maxsize=16)
def _check_variables(names: frozenset[str]) -> None:
    """InverseError naming the variables of a state that this module cannot set and NOT_MAPPED does not list
    (cached: every state of a graph has the same variables)."""
    unknown = sorted(names - set(SETTERS) - set(PERSISTENT) - {"msgs"} - SYNC_SET - set(mapping.NOT_MAPPED))
    if unknown:
        raise InverseError(f"spec variable(s) {', '.join(unknown)}: no server holds them here and "
                           "conformance/replay/mapping.py's NOT_MAPPED does not list them")


def _learners(spec: Mapping[str, Any], l: int, sids: tuple[int, ...]) -> set[int]:
    """The servers whose quorum connection to l is open at l (the learners l accepted): a learner l has taken
    FOLLOWERINFO from (learnerPhase not NONE), or a follower of l whose packets are on their way to l. A follower
    of l with neither had its connection closed (GoLooking of l, or l's crash): the spec's ~LeaderConnected."""
    return {f for f in sids if f != l and (spec["learnerPhase"][l - 1][f - 1] != "NONE" or (
        spec["state"][f - 1] == "FOLLOWING" and spec["leader"][f - 1] == l and spec["msgs"][f - 1][l - 1]))}


def _count(channel: Any, kind: str) -> int:
    return sum(1 for m in channel if m["type"] == kind)


def _connections(node: Node, spec: Mapping[str, Any], sids: tuple[int, ...],
                 learners: dict[int, set[int]]) -> None:
    """What the runtime's connections tell node s: the learners it accepted (their PINGs owed, every one a step
    PING of ZabSync's round: `payloads.PING_STEP`), the packet it holds at the head of each, and, following, its
    connection to its leader (open, or closed: it gives up at its next tick)."""
    s = node.sid
    for f in sorted(learners[s]):
        node.connection_opened(f, inbound=True)
        owed = _count(spec["msgs"][s - 1][f - 1], "PING") + _count(spec["msgs"][f - 1][s - 1], "PING")
        node.pings[f] = [owed, 0]
        node.step_pings[f] = [owed, 0]
    for f in sids:
        channel = spec["msgs"][f - 1][s - 1]
        if channel:
            head = packet(channel[0])
            if node.core.held(f, head):
                node.held[f] = head
    if node.core.state == ServerState.FOLLOWING:
        lead = node.core.leader
        if s in learners.get(lead, ()):
            node.outbound.add(lead)
        else:
            node.leader_lost = True


def _syncs(node: Node, spec: Mapping[str, Any]) -> None:
    """pendingSyncs[s] as node s's waiting learner syncs (the inverse of ``pending_sync_variables``: a sync's point,
    an index of s's history, as the zxid there; awaits as the step PINGs it must have answered, every one owed, none
    answered yet: `_connections`), and as follower s the clients waiting for its syncs: one per sync of s under way
    (its REQUEST on the way to its leader, waiting there, or its SYNC on the way back)."""
    if "pendingSyncs" not in spec:
        return
    s, core = node.sid, node.core
    for p in spec["pendingSyncs"][s - 1]:
        point = int(p["point"])
        marks = {f: int(a) for f, a in zip(core.servers, p["awaits"], strict=True) if int(a) >= 0}
        node.pending_syncs.append((int(p["learner"]), core.history[point - 1].zxid if point else 0, marks))
    lead = core.leader
    if core.state == ServerState.FOLLOWING:
        waiting = (_count(spec["msgs"][s - 1][lead - 1], "REQUEST") + _count(spec["msgs"][lead - 1][s - 1], "SYNC")
                   + sum(1 for p in spec["pendingSyncs"][lead - 1] if int(p["learner"]) == s))
        node.follower_syncs.extend((-k, float("inf")) for k in range(1, waiting + 1))


class World:
    """N nodes, the channels between them, their disks, and what each step delivered and which role it reported.
    Every input is given at time 0 (`NOW`), the time each node was made at, so no timer of a node is due unless a
    step asks for one (`TIMEOUT`)."""

    #: The time of every input but a timeout.
    NOW = 0.0
    #: A time at which every peer of a node has been silent past any limit: a tick then is FollowerTimeout or
    #: LeaderTimeout.
    TIMEOUT = 1e9

    def __init__(self, nodes: dict[int, Node], channels: dict[tuple[int, int], deque[QuorumPacket]]) -> None:
        self.nodes = nodes
        self.sids = tuple(sorted(nodes))
        self.channels = channels
        self.disks = {s: Disk(n.core.persistent()) for s, n in nodes.items()}
        self.delivered: dict[int, list[Txn]] = {s: [] for s in self.sids}
        self.roles: dict[int, ServerState | None] = {s: None for s in self.sids}
        #: the spec actions each node reported, in order, with their parameters
        self.steps: dict[int, list[tuple[str, tuple[tuple[str, int], ...]]]] = {s: [] for s in self.sids}
        self.answers: dict[int, list[tuple[int, dict[str, Any]]]] = {s: [] for s in self.sids}  # to its clients

    @property
    def cores(self) -> dict[int, ZabCore]:
        """Each node's Zab core."""
        return {s: n.core for s, n in self.nodes.items()}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> World:
        """The nodes and channels of spec state ``spec`` (module docstring); InverseError on what it cannot hold."""
        _check_variables(frozenset(spec))
        try:
            n = len(spec["state"])
            sids = tuple(range(1, n + 1))
            nodes = {}
            for s in sids:
                p = Persistent(tuple(txn(t) for t in spec["history"][s - 1]), int(spec["acceptedEpoch"][s - 1]),
                               int(spec["currentEpoch"][s - 1]))
                node = Node(s, sids, p, TIMING)
                for name, setter in SETTERS.items():
                    setter(node.core, spec[name][s - 1])
                nodes[s] = node
            learners = {s: _learners(spec, s, sids) for s in sids}
            for node in nodes.values():
                _connections(node, spec, sids, learners)
                _syncs(node, spec)
            channels = {(a, b): deque(packet(p) for p in spec["msgs"][a - 1][b - 1]) for a in sids for b in sids}
        except InverseError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, ZabError) as e:
            raise InverseError(f"not a state of spec/Zab.tla: {type(e).__name__}: {e}") from None
        return cls(nodes, channels)

    # ---- the runtime's part ----------------------------------------------------------------------------------

    def apply(self, s: int, out: Effects) -> None:
        """Carry out server s's Effects as a running server does: persist, connect (the leader accepts the
        learner's connection), send, deliver, close (each closed peer sees connection_closed)."""
        self.disks[s].apply(out.persist)
        for peer in out.dial:
            self.nodes[peer].connection_opened(s, inbound=True)
        for peer, p in out.send:
            self.channels[(s, peer)].append(p)
        self.delivered[s].extend(out.deliver)
        taken = [a for a in out.actions if a.module != "FLE" and a.name != "ConnectionClosed"]
        self.steps[s] += [(a.name, a.params) for a in taken]
        self.answers[s] += out.answers
        for peer in out.close:
            self.channels[(s, peer)].clear()
            self.channels[(peer, s)].clear()
            self._closed(peer, s)
        if out.role is not None:
            self.roles[s] = out.role

    def _closed(self, s: int, peer: int) -> None:
        """Server s's connection with ``peer`` ended: s's node is told, if it had one."""
        node = self.nodes[s]
        if peer in node.learner_conns or peer in node.outbound or peer in node.pings:
            self.apply(s, node.connection_closed(peer, self.NOW, inbound=peer not in node.outbound))

    def crash(self, s: int) -> None:
        """Crash(s): a new process from what s's disk holds; every other server's connection to s closes."""
        self.nodes[s] = Node(s, self.sids, self.disks[s].persistent(), TIMING)
        for peer in self.sids:
            if peer != s:
                self.channels[(s, peer)].clear()
                self.channels[(peer, s)].clear()
                self._closed(peer, s)

    # ---- back to the spec ------------------------------------------------------------------------------------

    def snapshots(self) -> list[dict[str, Any]]:
        """What the control socket would report of each server: its core's variables, its waiting learner syncs
        and the packets it holds."""
        return [{"sid": s, "variables": snapshot_variables(self.nodes[s].core.variables()),
                 "syncs": self.nodes[s].pending_sync_variables(),
                 "held": {a: [describe_packet(p) for p in self.channels[(a, s)]] for a in self.sids}}
                for s in self.sids]

    def to_spec(self) -> dict[str, Any]:
        """Every mapped spec variable, by conformance/replay/mapping.py."""
        return mapping.spec_state(self.snapshots())

    def durable(self) -> dict[str, Any]:
        """The persistent variables as the disks hold them, in spec form, under "<name> (durable)"."""
        snaps = [{"sid": s, "variables": snapshot_variables({
            "history": [(t.zxid, t.value) for t in d.history], "accepted_epoch": d.accepted_epoch,
            "current_epoch": d.current_epoch})} for s, d in self.disks.items()]
        return {f"{name} (durable)": mapping.MAPPED[name](snaps) for name in PERSISTENT}
