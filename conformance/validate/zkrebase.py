"""A ZooKeeper run's window started from a small state: the rebasing of conformance/validate/chain.py, for `VZk`.

Theory of operation
-------------------
A window of a recorded ZooKeeper run starts from the state the window before ended in (conformance/validate/
zkcheck.py). Carried whole, that state grows with the run: every server's history, and Zab's ``proposed``, hold
every transaction so far, and TLC copies and fingerprints them at every step (a window of 400 observations took 12 s
at 100 transactions and 25 s at 400). So the window's TLC state is written in coordinates that leave out what the
window cannot read, the same map as chain.py's `Coords` for zabref's action logs (docs/validation.md, "Windows"):

* every server's history (and staged history, unless it is what NEWLEADER deferred in BROADCAST: `Coords.staged`;
  and the history a SNAP in flight carries) loses its first ``d`` transactions, a prefix all of them share; the
  next one stays as the anchor, and every index (lastCommitted, ackIndex, the ``point`` a waiting sync of ZabSync's
  ``pendingSyncs`` waits for) is lowered by ``d`` (0 stays 0);
* zxid counters of the anchor's epoch are lowered by how many dropped transactions are of that epoch (so
  ClientRequest, which counts its epoch's transactions, proposes the same zxid, written lowered);
* values are lowered by how many were proposed before the window, and ``proposed`` starts empty (ClientRequest
  numbers a value by its size, so it numbers the same value, written lowered); ``committed`` starts empty (no
  action reads it, and the VIEW leaves it out).

The observations stay as they are: module VZk maps each one as it compares it (``Z``, ``OV``, ``ST`` of the window's
``epoch``, ``shift`` and ``values``). `plan` picks ``d`` from the state and the window's observations so that every
zxid the window's sends name (every send of the window must be one of them) and every zxid and index the state holds
is the anchor's or later; TLC checks chain.py's `Rebased` conditions on every state the window reaches, and a
window that breaks them (``zkinexact``) is checked again with ``d`` = 0. `restore` maps the end state TLC printed
back, prepending the dropped prefix, for the next window's `plan`.
"""

from __future__ import annotations

from typing import Any

from conformance.validate.chain import Coords
from conformance.zk.observe import Observation

__all__ = ["Rebase", "plan", "rebase", "restore"]

#: Packet types whose zxid names a transaction (counter 0: none), as `PacketRebased` reads them.
_NAMING = ("ACK", "COMMIT", "UPTODATE", "DIFF", "PROPOSAL", "ACKEPOCH", "TRUNC")


class Rebase:
    """A window's coordinates: ``coords`` (chain.py's map, every server dropping ``d``) and the dropped prefix."""

    def __init__(self, servers: int, prefix: list[dict[str, Any]], epoch: int, shift: int, values: int) -> None:
        self.prefix = prefix  # the dropped transactions, in the run's coordinates
        self.d = len(prefix)
        self.coords = Coords({s: self.d for s in range(1, servers + 1)} if self.d else {}, {}, epoch, shift, values)
        self.servers = servers

    def window_fields(self, anchor: dict[str, Any] | None) -> dict[str, Any]:
        """What module VZk's ``Win`` record says of the map (``anchors[s]``: <<the anchor, as the window writes it>>,
        or <<>> with no drop)."""
        a = [[self.coords.txn(anchor)] if anchor is not None and self.d else [] for _ in range(self.servers)]
        return {"anchors": a, "epoch": self.coords.epoch, "shift": self.coords.shift, "values": self.coords.values}

    def unzx(self, z: list[int]) -> list[int]:
        e, c = int(z[0]), int(z[1])
        if e != self.coords.epoch or c == 0:
            return [e, c]
        return [e, c + self.coords.shift] if c > 0 else [e, c + self.coords.shift + 1]

    def untxn(self, t: dict[str, Any]) -> dict[str, Any]:
        return {"value": t["value"] + self.coords.values, "zxid": self.unzx(t["zxid"])}

    def unseq(self, h: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*self.prefix, *map(self.untxn, h)] if h else []

    def unpacket(self, p: dict[str, Any]) -> dict[str, Any]:
        data = p["data"]
        if p["type"] == "PROPOSAL":
            data = data + self.coords.values
        elif p["type"] == "SNAP":
            data = self.unseq(data)
        return {"data": data, "type": p["type"], "zxid": self.unzx(p["zxid"])}


def _key(z: list[int]) -> tuple[int, int]:
    return int(z[0]), int(z[1])


def _named(state: dict[str, Any], observation: Observation, lo: int, hi: int) -> list[list[int]]:
    """Every zxid naming a transaction that the state holds outside histories, or that the sends the window may make
    carry: observations lo+1 .. hi, and later ones placed at hi or before (`zkmodule.reach`)."""
    out = []
    n = len(state["state"])
    for l in range(n):
        for f in range(n):
            if state["learnerPhase"][l][f] == "ACKEPOCH":
                out.append(state["learnerLastZxid"][l][f])
    for row in state["msgs"]:
        for ch in row:
            out += [p["zxid"] for p in ch if p["type"] in _NAMING]
    for o in observation.obs[lo:]:
        if o.g > hi and o.early > hi:
            continue
        if o.cz and o.type in _NAMING:
            out.append(o.zxid)
        if o.sync is not None:
            out.append(o.sync["zxid"])
            out += [t["zxid"] for t in o.sync["txns"][:1]]
    return [z for z in out if int(z[1]) != 0]


def _common(seqs: list[list[dict[str, Any]]]) -> int:
    k = min(map(len, seqs)) if seqs else 0
    first = seqs[0] if seqs else []
    for i in range(k):
        if any(s[i] != first[i] for s in seqs[1:]):
            return i
    return k


def plan(state: dict[str, Any], observation: Observation, lo: int, hi: int, values: int) -> tuple[Rebase, Any]:
    """The coordinates of a window starting in ``state`` (the run's coordinates) whose sends may be observations
    lo+1 .. hi, ``values`` transactions proposed before it; and the anchor (None: nothing dropped)."""
    n = len(state["state"])
    # a staged history in BROADCAST is a deferred suffix (`Coords.staged`): it shares no prefix with the others
    seqs = [h for h in state["history"]] + [h for h, z in zip(state["stagedHistory"], state["zabState"])
                                             if h and z != "BROADCAST"]
    seqs += [p["data"] for row in state["msgs"] for ch in row for p in ch if p["type"] == "SNAP"]
    b = _common(seqs)
    indexes = [k for k in state["lastCommitted"] if k > 0]
    indexes += [k for row in state["ackIndex"] for k in row if k > 0]
    indexes += [p["point"] for row in state.get("pendingSyncs", []) for p in row if p["point"] > 0]
    b = min([b, *indexes])
    # the anchor's zxid may be no later than any zxid named, its epoch no later than any server's currentEpoch
    oldest = min((_key(z) for z in _named(state, observation, lo, hi)), default=None)
    epoch_cap = min(int(e) for e in state["currentEpoch"]) if n else 0
    history = state["history"][0] if n else []
    while b > 0 and ((oldest is not None and _key(history[b - 1]["zxid"]) > oldest)
                     or int(history[b - 1]["zxid"][0]) > epoch_cap):
        b -= 1
    if b < 2:
        return Rebase(n, [], -1, 0, values), None
    anchor = history[b - 1]
    prefix = history[:b - 1]
    epoch = int(anchor["zxid"][0])
    shift = sum(1 for t in prefix if int(t["zxid"][0]) == epoch)
    return Rebase(n, prefix, epoch, shift, values), anchor


def rebase(state: dict[str, Any], r: Rebase) -> dict[str, Any]:
    """``state`` (the run's coordinates) in the window's."""
    c = r.coords
    n = len(state["state"])
    out = dict(state)
    out["history"] = [c.seq(h, s + 1) for s, h in enumerate(state["history"])]
    out["stagedHistory"] = [c.staged(h, s + 1, state["zabState"][s]) if h else []
                            for s, h in enumerate(state["stagedHistory"])]
    out["lastCommitted"] = [c.idx(k, s + 1) for s, k in enumerate(state["lastCommitted"])]
    out["ackIndex"] = [[c.idx(k, s + 1) for k in row] for s, row in enumerate(state["ackIndex"])]
    out["learnerLastZxid"] = [[c.zx(z) for z in row] for row in state["learnerLastZxid"]]
    out["msgs"] = [[[c.packet(p, b + 1) for p in state["msgs"][a][b]] for b in range(n)] for a in range(n)]
    if "pendingSyncs" in state:
        out["pendingSyncs"] = [[{**p, "point": c.idx(p["point"], s + 1),
                                 "ghost": {**p["ghost"], "seen": c.zx(p["ghost"]["seen"])}} for p in row]
                               for s, row in enumerate(state["pendingSyncs"])]
    out["proposed"] = {"$set": []}
    out["committed"] = []
    return out


def restore(state: dict[str, Any], r: Rebase) -> dict[str, Any]:
    """The inverse of `rebase` for a state the window reached (``proposed`` and ``committed`` left empty: the next
    window starts them empty); of a part of one (the fields a report prints), the fields it has."""
    d = r.d
    out = dict(state)
    if "history" in state:
        out["history"] = [r.unseq(h) for h in state["history"]]
    if "stagedHistory" in state:
        out["stagedHistory"] = [[*map(r.untxn, h)] if z == "BROADCAST" else r.unseq(h)
                                for h, z in zip(state["stagedHistory"], state["zabState"])]
    if "lastCommitted" in state:
        out["lastCommitted"] = [k + d if k > 0 else k for k in state["lastCommitted"]]
    if "ackIndex" in state:
        out["ackIndex"] = [[k + d if k > 0 else k for k in row] for row in state["ackIndex"]]
    if "learnerLastZxid" in state:
        out["learnerLastZxid"] = [[r.unzx(z) for z in row] for row in state["learnerLastZxid"]]
    if "msgs" in state:
        out["msgs"] = [[[r.unpacket(p) for p in ch] for ch in row] for row in state["msgs"]]
    if "pendingSyncs" in state:
        out["pendingSyncs"] = [[{**p, "point": p["point"] + d if p["point"] > 0 else 0,
                                 "ghost": {**p["ghost"], "seen": r.unzx(p["ghost"]["seen"])}} for p in row]
                               for row in state["pendingSyncs"]]
    out["proposed"] = {"$set": []}
    out["committed"] = []
    return out
