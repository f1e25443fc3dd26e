"""From implementation state to spec state: one function per spec variable of spec/Zab.tla.

Theory of operation: the replay driver reads every server's state through the control socket
(zabref/runtime/control.py): the core's variables (`ZabCore` fields under their snake_case names, zxids as 64-bit ints,
values as text) and the packets each server holds, per sending peer, not yet given to its core. This module turns those
snapshots into the spec's variables in the canonical value form (docs/values.md), so that comparing with a trace state
is plain equality. An auditor reads it beside the spec: each function below names the spec variable it produces and says
how the implementation holds it.

Functions over `Server` (1..N) print, in TLC, exactly like sequences: the canonical form of `[s \\in Server |-> x]`
is the list ``[x(1), ..., x(N)]``, and so it is here.

The spec variables with no implementation counterpart are in `NOT_MAPPED`, each with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from conformance.tla.values import Value, canonical_json
from zabref.core import packets

__all__ = ["MAPPED", "NOT_MAPPED", "ServerSnapshot", "spec_state", "zxid_pair", "txn", "packet"]

#: What the driver reads from one server: {"sid": int, "variables": {...core variables...},
#: "held": {peer sid: [packet, ...]}} where a packet is {"type": name, "zxid": int, "data": decoded data}.
ServerSnapshot = Mapping[str, Any]

NO_DATA = "n/a"  # the spec's NoData

NOT_MAPPED = {
    "proposed": "checking only: the set of every transaction ever broadcast, kept by the spec to state Integrity; "
                "no server holds it",
    "committed": "checking only: the order of first deliveries across all servers and crashes, kept by the spec to "
                 "state TotalOrder and Fig. 3/4; no server holds it",
    "established": "checking only: every <<epoch, leader>> that ever ended discovery, kept by the spec to state "
                   "LeaderUniqueness over the whole run; no server holds it",
    "faults": "a model bound (crashes and partitions so far, at most MaxFaults); the implementation has no such "
              "counter (`zabref edges` checks whether a LeaderTimeout counts as one: conformance/replay/edges.py)",
}


def zxid_pair(zxid: int) -> list[int]:
    """A 64-bit zxid as the spec's <<epoch, counter>> (`packets.zxid_pair`'s split, built as the list the spec's
    values use in one step: the validation merge calls this for every transaction a packet carries)."""
    return [zxid >> 32, zxid & packets.MAX_COUNTER]


def _value(text: Any) -> Value:
    """A transaction's value: the spec numbers broadcasts 1, 2, ...; the driver submits them as decimal text."""
    if isinstance(text, str) and text.lstrip("-").isdigit():
        return int(text)
    return text  # not a spec value: left as it is so that the comparison shows it


def txn(entry: Sequence[Any]) -> Value:
    """A history entry (zxid, value) as the spec's record [zxid |-> <<e, c>>, value |-> v]."""
    zxid, value = entry
    return {"value": _value(value), "zxid": zxid_pair(int(zxid))}


def packet(p: Mapping[str, Any]) -> Value:
    """A held QuorumPacket as the spec's Packet(type, zxid, data), with data as the spec models it."""
    kind = p["type"]
    data = p.get("data")
    if kind in ("FOLLOWERINFO", "ACKEPOCH"):
        spec_data: Value = int(data)  # FOLLOWERINFO: LearnerInfo.serverid; ACKEPOCH: currentEpoch or -1
    elif kind == "PROPOSAL":
        spec_data = _value(data)
    elif kind == "SNAP":
        spec_data = [txn(entry) for entry in data]  # the state transfer: the leader's whole history
    else:
        spec_data = NO_DATA  # LEADERINFO's protocol version is not modelled; the rest carry no data
    return {"data": spec_data, "type": kind, "zxid": zxid_pair(int(p["zxid"]))}


def _per_server(snaps: Sequence[ServerSnapshot], key: str, convert: Callable[[Any], Value] = lambda v: v) -> Value:
    return [convert(s["variables"][key]) for s in snaps]


def _per_pair(snaps: Sequence[ServerSnapshot], key: str, default: Value, convert: Callable[[Any], Value]) -> Value:
    """A function Server -> Server -> x held by each server as a map keyed by peer sid (keys may be text in JSON)."""
    sids = [s["sid"] for s in snaps]
    rows = []
    for s in snaps:
        held = {int(k): v for k, v in s["variables"][key].items()}
        rows.append([convert(held[f]) if f in held else default for f in sids])
    return rows


# ---- every server, persistent ---------------------------------------------------------------------------------

def history(snaps):
    """history[s]: the server's transaction log (zabref/storage), as the core holds it after fsync."""
    return _per_server(snaps, "history", lambda h: [txn(e) for e in h])


def acceptedEpoch(snaps):
    """acceptedEpoch[s]: the core's accepted_epoch (the acceptedEpoch file)."""
    return _per_server(snaps, "accepted_epoch", int)


def currentEpoch(snaps):
    """currentEpoch[s]: the core's current_epoch (the currentEpoch file)."""
    return _per_server(snaps, "current_epoch", int)


# ---- every server, volatile -----------------------------------------------------------------------------------

def state(snaps):
    """state[s]: LOOKING / FOLLOWING / LEADING (ServerState names)."""
    return _per_server(snaps, "state", str)


def zabState(snaps):
    """zabState[s]: ELECTION / DISCOVERY / SYNCHRONIZATION / BROADCAST."""
    return _per_server(snaps, "zab_state", str)


def leader(snaps):
    """leader[s]: the sid followed (itself when leading), 0 (NoServer) when looking."""
    return _per_server(snaps, "leader", int)


def lastCommitted(snaps):
    """lastCommitted[s]: how many transactions of the history the server has delivered."""
    return _per_server(snaps, "last_committed", int)


# ---- follower -------------------------------------------------------------------------------------------------

def stagedHistory(snaps):
    """stagedHistory[s]: the history a syncing follower builds in memory until NEWLEADER."""
    return _per_server(snaps, "staged_history", lambda h: [txn(e) for e in h])


# ---- leader ---------------------------------------------------------------------------------------------------

def newEpoch(snaps):
    """newEpoch[s]: the epoch a leader proposes; 0 when not leading."""
    return _per_server(snaps, "new_epoch", int)


def learnerPhase(snaps):
    """learnerPhase[l][f]: what leader l knows of learner f's connection; NONE when there is none."""
    return _per_pair(snaps, "learner_phase", "NONE", str)


def learnerLastZxid(snaps):
    """learnerLastZxid[l][f]: the lastZxid f reported in ACKEPOCH; <<0, 0>> when none."""
    return _per_pair(snaps, "learner_last_zxid", [0, 0], lambda z: zxid_pair(int(z)))


def ackIndex(snaps):
    """ackIndex[l][f]: the longest prefix of l's history f has ACKed."""
    return _per_pair(snaps, "ack_index", 0, int)


# ---- network --------------------------------------------------------------------------------------------------

def msgs(snaps):
    """msgs[a][b]: packets a sent to b that b has not processed. In control mode every packet is received over TCP
    and held, per sending peer, until the driver releases it; so msgs[a][b] is what server b holds from a (the
    driver first waits until every packet sent has arrived)."""
    sids = [s["sid"] for s in snaps]
    held = {s["sid"]: {int(k): v for k, v in s.get("held", {}).items()} for s in snaps}
    return [[[packet(p) for p in held[b].get(a, [])] for b in sids] for a in sids]


MAPPED: dict[str, Callable[[Sequence[ServerSnapshot]], Value]] = {
    f.__name__: f
    for f in (history, acceptedEpoch, currentEpoch, state, zabState, leader, lastCommitted, stagedHistory,
              newEpoch, learnerPhase, learnerLastZxid, ackIndex, msgs)
}


def spec_state(snaps: Sequence[ServerSnapshot]) -> dict[str, Value]:
    """Every mapped spec variable, from the servers' snapshots (any order; sorted by sid here)."""
    ordered = sorted(snaps, key=lambda s: int(s["sid"]))
    return {name: f(ordered) for name, f in MAPPED.items()}


def differences(expected: Mapping[str, Value], actual: Mapping[str, Value],
                names: Iterable[str] | None = None) -> dict[str, tuple[Value, Value]]:
    """The variables (`names`, default: this module's MAPPED) whose canonical forms differ: {name: (expected,
    actual)}. A name missing on either side counts as a difference (None), never as agreement."""
    return {
        name: (expected.get(name), actual.get(name))
        for name in (MAPPED if names is None else names)
        if name not in expected or name not in actual
        or canonical_json(expected[name]) != canonical_json(actual[name])
    }
