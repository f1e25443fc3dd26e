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
from zabref.core import packets, payloads

__all__ = ["MAPPED", "NOT_MAPPED", "ServerSnapshot", "spec_state", "zxid_pair", "txn", "packet", "checked"]

#: What the driver reads from one server: {"sid": int, "variables": {...core variables...},
#: "held": {peer sid: [packet, ...]}} where a packet is {"type": name, "zxid": int, "data": decoded data}.
ServerSnapshot = Mapping[str, Any]

NO_DATA = "n/a"  # the spec's NoData
#: The zxid each of a sync's packets carries in zabref (and ZooKeeper), where the spec's carries <<0, 0>>.
SYNC_ZXID = {"REQUEST": -1, "PING": payloads.PING_STEP, "SYNC": 0}

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
    """A held QuorumPacket as the spec's Packet(type, zxid, data), with data as the spec models it. A sync's packets
    (spec/ZabSync.tla) carry no zxid there: REQUEST's -1 (ZooKeeper's Learner.request) and a step PING's
    `payloads.PING_STEP` are <<0, 0>> (any other value shows as it is); their data is the spec's ghost (`checked`)."""
    kind = p["type"]
    data = p.get("data")
    zxid = int(p["zxid"])
    if kind in SYNC_ZXID:
        pair = [0, 0] if zxid == SYNC_ZXID[kind] else zxid_pair(zxid)
        return {"data": 0 if kind == "PING" else NO_DATA, "type": kind, "zxid": pair}
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


# ---- a sync (spec/ZabSync.tla) ---------------------------------------------------------------------------------

def pendingSyncs(snaps):
    """pendingSyncs[l]: leader l's learners' syncs not answered yet, oldest first, as the node reads them out
    (`zabref.core.clients.ClientRequests.pending_sync_variables`): the learner, the point (how many transactions of
    l's history it waits to see committed) and awaits (per server, the answers to step PINGs still to come before it
    confirms; 0 once it has; -1 for a server that was not l's learner when it arrived). Its ghost is the spec's
    (`checked`)."""
    sids = [s["sid"] for s in snaps]
    out = []
    for s in snaps:
        rows = []
        for p in s.get("syncs", []):
            awaits = {int(f): int(n) for f, n in p["awaits"].items()}
            rows.append({"awaits": [awaits.get(f, -1) for f in sids], "learner": int(p["learner"]),
                         "point": int(p["point"])})
        out.append(rows)
    return out


def checked(state: Mapping[str, Value]) -> dict[str, Value]:
    """A spec state as a server can show it: the ghost a sync carries for the read checks only -- REQUEST's and
    SYNC's data in msgs, each waiting sync's ``ghost`` in pendingSyncs, which no action reads -- set aside (REQUEST
    and SYNC with NoData, a sync without its ghost). A state of spec/Zab.tla is returned as it is."""
    if "pendingSyncs" not in state:
        return dict(state)
    out = dict(state)
    out["msgs"] = [[[{**m, "data": NO_DATA} if m["type"] in ("REQUEST", "SYNC") else m for m in ch] for ch in row]
                   for row in state["msgs"]]
    out["pendingSyncs"] = [[{k: v for k, v in p.items() if k != "ghost"} for p in syncs]
                           for syncs in state["pendingSyncs"]]
    return out


#: The variables spec/ZabSync.tla adds to spec/Zab.tla's.
SYNC_VARIABLES = ("pendingSyncs",)

MAPPED: dict[str, Callable[[Sequence[ServerSnapshot]], Value]] = {
    f.__name__: f
    for f in (history, acceptedEpoch, currentEpoch, state, zabState, leader, lastCommitted, stagedHistory,
              newEpoch, learnerPhase, learnerLastZxid, ackIndex, msgs, pendingSyncs)
}


def spec_state(snaps: Sequence[ServerSnapshot]) -> dict[str, Value]:
    """Every mapped spec variable, from the servers' snapshots (any order; sorted by sid here)."""
    ordered = sorted(snaps, key=lambda s: int(s["sid"]))
    return {name: f(ordered) for name, f in MAPPED.items()}


def differences(expected: Mapping[str, Value], actual: Mapping[str, Value],
                names: Iterable[str] | None = None) -> dict[str, tuple[Value, Value]]:
    """The variables (`names`, default: this module's MAPPED, those of spec/ZabSync.tla only when ``expected`` has
    them) whose canonical forms differ: {name: (expected, actual)}. A name missing on either side counts as a
    difference (None), never as agreement."""
    if names is None:
        names = [name for name in MAPPED if name not in SYNC_VARIABLES or name in expected]
    return {
        name: (expected.get(name), actual.get(name))
        for name in names
        if name not in expected or name not in actual
        or canonical_json(expected[name]) != canonical_json(actual[name])
    }
