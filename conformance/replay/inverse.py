"""Theory of operation -- the inverse of conformance/replay/mapping.py: a spec state of spec/Zab.tla as one `ZabCore`
per server, the channels as in-memory FIFO queues of QuorumPackets, and each server's disk; and back.

`World.from_spec(state)` builds, for every server s of 1..N, ``ZabCore(s, 1..N, Persistent(...))`` from s's
persistent variables (what a restart reads from disk), then sets each volatile variable with the function below
named after it (`SETTERS`: one per spec variable, reading s's entry of the spec's function over ``Server``). The
spec's ``msgs[a][b]`` becomes the deque ``channels[(a, b)]`` of `zabref.core.packets.QuorumPacket`, each packet encoded
as the sender's core encodes it (`packet`: FOLLOWERINFO carries a LearnerInfo, LEADERINFO the protocol version, ACKEPOCH
an int, PROPOSAL the value as a ZooKeeper transaction (`zabref.core.zktxn`), SNAP a serialized history; the rest no
data). A transaction's value, a number in the spec, is its decimal text in bytes, as the conformance driver submits
it. The variables in
`conformance.replay.mapping.NOT_MAPPED` are held by no server and are skipped; any other variable this module cannot set
is an `InverseError` naming it.

`World.apply(s, output)` does what the runtime does with a core's `Output`: the storage operations to s's disk
(`Disk`), the packets appended to the channels, the deliveries and the role noted, and for each closed peer p both
channels between s and p emptied and ``connection_closed(s)`` given to p's core (the spec's GoLooking(s) as every
other server sees it). `World.crash(s)` is the spec's Crash: a fresh core from s's disk, then every other server's
connection to s closes. `World.to_spec()` maps every core back with conformance/replay/mapping.py, from the snapshot the
control socket gives (`zabref.runtime.control.snapshot_variables`, `zabref.runtime.actionlog.describe_packet`), so the round
trip
``World.from_spec(x).to_spec() == x`` (minus NOT_MAPPED) tests both directions against each other.
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
from zabref.core.zab import (
    AppendTxns,
    LearnerPhase,
    Output,
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


def packet(p: Mapping[str, Any]) -> QuorumPacket:
    """The spec's Packet(type, zxid, data) as the QuorumPacket its sender's core sends."""
    try:
        kind = PacketType[p["type"]]
    except KeyError:
        raise InverseError(f"unknown packet type {p.get('type')!r}") from None
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
    unknown = sorted(names - set(SETTERS) - set(PERSISTENT) - {"msgs"} - set(mapping.NOT_MAPPED))
    if unknown:
        raise InverseError(f"spec variable(s) {', '.join(unknown)}: no server holds them here and "
                           "conformance/replay/mapping.py's NOT_MAPPED does not list them")


class World:
    """N cores, the channels between them, their disks, and what each step delivered and which role it reported."""

    def __init__(self, cores: dict[int, ZabCore], channels: dict[tuple[int, int], deque[QuorumPacket]]) -> None:
        self.cores = cores
        self.sids = tuple(sorted(cores))
        self.channels = channels
        self.disks = {s: Disk(c.persistent()) for s, c in cores.items()}
        self.delivered: dict[int, list[Txn]] = {s: [] for s in self.sids}
        self.roles: dict[int, ServerState | None] = {s: None for s in self.sids}

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> World:
        """The cores and channels of spec state ``spec`` (module docstring); InverseError on what it cannot hold."""
        _check_variables(frozenset(spec))
        try:
            n = len(spec["state"])
            sids = tuple(range(1, n + 1))
            cores = {}
            for s in sids:
                p = Persistent(tuple(txn(t) for t in spec["history"][s - 1]), int(spec["acceptedEpoch"][s - 1]),
                               int(spec["currentEpoch"][s - 1]))
                core = ZabCore(s, sids, p)
                for name, setter in SETTERS.items():
                    setter(core, spec[name][s - 1])
                cores[s] = core
            channels = {(a, b): deque(packet(p) for p in spec["msgs"][a - 1][b - 1]) for a in sids for b in sids}
        except InverseError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, ZabError) as e:
            raise InverseError(f"not a state of spec/Zab.tla: {type(e).__name__}: {e}") from None
        return cls(cores, channels)

    # ---- the runtime's part ----------------------------------------------------------------------------------

    def apply(self, s: int, out: Output) -> None:
        """Carry out server s's Output: persist, send, deliver, close (each closed peer sees connection_closed)."""
        self.disks[s].apply(out.persist)
        for peer, p in out.send:
            self.channels[(s, peer)].append(p)
        self.delivered[s].extend(out.deliver)
        for peer in out.close:
            self.channels[(s, peer)].clear()
            self.channels[(peer, s)].clear()
            self.apply(peer, self.cores[peer].connection_closed(s))
        if out.role is not None:
            self.roles[s] = out.role

    def crash(self, s: int) -> None:
        """Crash(s): a new process from what s's disk holds; every other server's connection to s closes."""
        self.cores[s] = ZabCore(s, self.sids, self.disks[s].persistent())
        for peer in self.sids:
            if peer != s:
                self.channels[(s, peer)].clear()
                self.channels[(peer, s)].clear()
                self.apply(peer, self.cores[peer].connection_closed(s))

    # ---- back to the spec ------------------------------------------------------------------------------------

    def snapshots(self) -> list[dict[str, Any]]:
        """What the control socket would report of each server: its core's variables and the packets it holds."""
        return [{"sid": s, "variables": snapshot_variables(self.cores[s].variables()),
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
