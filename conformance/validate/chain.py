"""Zabref's action logs checked as a chain of windows (conformance/validate/windows.py), each window's state kept small.

Theory of operation (the argument in full: docs/validation.md, "Windows")
-------------------------------------------------------------------------
The merge (`conformance.validate.merge`) hands each step to `Cutter` with the view of the state just after it
(`SpecView`). Every ``size`` steps the cutter closes a window: its start state is the view at its first step, its
end state the view after its last, both taken as `Snapshot`s (O(servers^2), histories by reference), and its
records the steps in between. Nothing else of the behaviour is kept, so memory is one window's.

Every action of spec/Zab.tla with its parameters is a function of the state (IF/CASE/CHOOSE, no disjunction over
primed variables), so from a known state a record has at most one successor: the whole check's search is ONE chain
of states, and the state after step k is determined by the start and the first k records. A window started from that
state accepts exactly what the whole check accepts of its records; its ``EndOK`` invariant checks that the state TLC
reaches at its end is the view's, i.e. the next window's start. If it is not (the view and the spec may part on a
variable no record constrains), the two windows are checked again as one (`resolve`): boundaries stay only where
TLC confirmed the state.

Rebasing (what a window does not need is not carried). Before rendering a window, `coordinates` picks for each
server s a ``b``: the longest prefix P[1..b] of s's history that its histories keep through the window (and every
SNAP it takes), such that every index of s the window holds or computes (lastCommitted, the row ackIndex[s], the
histories' lengths) is 0 or >= b, every zxid s reads (packets it takes, learnerLastZxid of learners in phase ACKEPOCH)
is 0-counter or >= P[b]'s, and s's currentEpoch is >= P[b]'s epoch. s's histories then drop P[1..b-1], keep P[b] as
the anchor, and s's indexes shift by b-1 (0 stays 0). A server's history and indexes are read by its own actions
only (others read them only to count faults), so each server has its own b, except that servers linked by a SNAP (the
follower takes the leader's history) and the servers taking ClientRequest share one. The counters of one epoch (the
ClientRequest servers' anchor's) are lowered by the number of dropped transactions of that epoch, so ClientRequest's
count of its epoch's transactions gives the same zxid, and values by the number proposed before the window
(``proposed`` starts empty, so ClientRequest numbers the same value). ``committed``, ``established`` and ``faults``
start empty/0: no protocol action reads the first two, and ``faults`` only in ``faults < MaxFaults`` with MaxFaults =
10^9. Every use of an index, Len, SNAP, DIFF, TRUNC and IndexOf in Zab.tla commutes with this map under those
conditions (docs/validation.md goes through each); TLC checks them on every state of the window (``Exact``), and a
window where they fail is checked again without rebasing.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.tla.values import format_value
from conformance.validate.merge import SpecStep
from conformance.validate.specview import RawHistory, Snapshot, SpecView
from conformance.validate.windows import Window

__all__ = ["Coords", "Cutter", "Plan", "VARIABLES", "PER_SERVER", "PLACE", "REBASING", "STEP", "record", "render_state", "config"]

#: The acting server's variables a record constrains (history apart).
PER_SERVER = ("acceptedEpoch", "currentEpoch", "state", "zabState", "leader", "lastCommitted", "newEpoch",
              "learnerPhase", "learnerLastZxid", "ackIndex")
VARIABLES = ("history", "acceptedEpoch", "currentEpoch", "state", "zabState", "leader", "lastCommitted",
             "stagedHistory", "newEpoch", "learnerPhase", "learnerLastZxid", "ackIndex", "msgs", "proposed",
             "committed", "established", "faults")
#: The variables a window's end is compared on: every one a protocol action reads. ``proposed`` is read only by
#: ClientRequest, through its size: the end compares that (END_PROPOSED).
COMPARED = tuple(v for v in VARIABLES if v not in ("committed", "established", "faults", "proposed"))
END_PROPOSED = "Cardinality(proposed) = {}"
BIG = 1_000_000_000
MASK = (1 << 32) - 1


def _z(zxid: int) -> tuple[int, int]:
    return zxid >> 32, zxid & MASK


def _zint(pair: Any) -> int:
    return (int(pair[0]) << 32) | int(pair[1])


@dataclass(frozen=True)
class Coords:
    """How a window's values are written: ``drops[s]`` transactions dropped from the front of server s's history
    (and staged history; its anchor, the next one, kept as ``anchors[s]``), s's indexes lowered by as many; zxid
    counters of epoch ``epoch`` lowered by ``shift``; values lowered by ``values``. Missing servers: nothing
    dropped."""

    drops: dict[int, int] = field(default_factory=dict)
    anchors: dict[int, Any] = field(default_factory=dict)  # server -> its anchor transaction as the window writes it
    epoch: int = -1
    shift: int = 0
    values: int = 0

    def drop(self, s: int) -> int:
        return self.drops.get(s, 0)

    def zx(self, z: Any) -> list[int]:
        """Counters of the anchor's epoch lowered by ``shift``; those of dropped transactions (c <= shift: no action
        reads them, Rebased checks it, but a stale learnerLastZxid or a server's own older anchor may still name
        one) go below 0, so that the map stays one-to-one and ordered on counters >= 1."""
        e, c = int(z[0]), int(z[1])
        if e != self.epoch or c <= 0:
            return [e, c]
        return [e, c - self.shift] if c > self.shift else [e, c - self.shift - 1]

    def val(self, v: Any) -> Any:
        return v - self.values if isinstance(v, int) and not isinstance(v, bool) else v

    def txn(self, t: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.val(t["value"]), "zxid": self.zx(t["zxid"])}

    def idx(self, k: int, s: int) -> int:
        return 0 if k == 0 else k - self.drop(s)

    def seq(self, h: Any, s: int) -> list[dict[str, Any]]:
        d = self.drop(s)
        if isinstance(h, RawHistory):
            return [self.txn(t) for t in h.canonical(d)]
        return [self.txn(t) for t in h[d:]]

    def staged(self, h: list[dict[str, Any]], s: int, zab_state: str) -> list[dict[str, Any]]:
        """Server s's staged history: in SYNCHRONIZATION a whole history (DIFF, TRUNC and SNAP start it as one),
        dropped as its history is; in BROADCAST what NEWLEADER deferred (NewLeaderDefers), transactions after its
        history, each mapped and none dropped (`RebasedHere`)."""
        return [self.txn(t) for t in h] if zab_state == "BROADCAST" else self.seq(h, s)

    def packet(self, p: dict[str, Any], to: int) -> dict[str, Any]:
        """A packet on its way to server ``to`` (a SNAP's history is written in the receiver's coordinates, which
        `coordinates` makes the sender's)."""
        data = p["data"]
        if p["type"] == "PROPOSAL":
            data = self.val(data)
        elif p["type"] == "SNAP":
            data = self.seq(data, to)
        return {"data": data, "type": p["type"], "zxid": self.zx(p["zxid"])}


#: The acting server's variables that change seldom (a record holds them as one tuple), the others (lastCommitted,
#: ackIndex) one by one.
STATIC = ("acceptedEpoch", "currentEpoch", "state", "zabState", "leader", "newEpoch", "learnerPhase", "learnerLastZxid")


def _tx(t: dict[str, Any]) -> str:
    return f"[value |-> {format_value(t['value'])}, zxid |-> <<{t['zxid'][0]}, {t['zxid'][1]}>>]"


def _pk(p: dict[str, Any]) -> str:
    data = p["data"]
    text = "<<" + ", ".join(_tx(t) for t in data) + ">>" if p["type"] == "SNAP" else format_value(data)
    return f'[data |-> {text}, type |-> "{p["type"]}", zxid |-> <<{p["zxid"][0]}, {p["zxid"][1]}>>]'


def _seq(h: list[dict[str, Any]]) -> str:
    return "<<" + ", ".join(_tx(t) for t in h) + ">>"


def record(step: SpecStep, n: int, co: Coords = Coords()) -> str:
    """One step as a TLA+ tuple value in the window's coordinates, one line of the window's data file (TLC reads it
    with ZabrefData's Datum, conformance/tla/datafile.py, not with its parser). Positions: 1 action, 2 i, 3 j, 4 the
    server, 5 GoLooking (what it sent is not compared), 6 the server's variables were logged (then: 7 its STATIC
    variables as one tuple, 8 lastCommitted, 9 ackIndex, 10-11 history length and last transaction, 12-13 the same
    of the staged history, 14 both compared whole (after NEWLEADER, DIFF, TRUNC, SNAP, a restart; then 15-16
    them)), 17 a packet was taken (then 18 it), 19 the packets sent, per receiver (<<>>: none). TLC compares only
    values of one kind, so a part that does not apply holds 0 and its flag (or length) keeps TLC from reading it."""
    e = step.expected
    sid = step.sid
    parts = [f'"{step.action}"', str(step.params.get("i", sid)), str(step.params.get("j", 0)), str(sid),
             "TRUE" if step.go_looking else "FALSE"]
    if e is None:
        parts += ["FALSE", "0", "0", "0", "0", "0", "0", "0", "FALSE", "0", "0"]
    else:
        static = format_value(
            [[co.zx(z) for z in e["learnerLastZxid"]] if name == "learnerLastZxid" else e[name] for name in STATIC])
        parts += ["TRUE", static,
                  str(co.idx(e["lastCommitted"], sid)), format_value([co.idx(k, sid) for k in e["ackIndex"]]),
                  str(co.idx(e["hl"], sid)), _tx(co.txn(e["hlast"])) if e["hlast"] is not None else "0",
                  str(co.idx(e["sl"], sid)), _tx(co.txn(e["slast"])) if e["slast"] is not None else "0"]
        if e["history"] is not None:
            parts += ["TRUE", _seq(co.seq(e["history"], sid)), _seq(co.seq(e["stagedHistory"], sid))]
        else:
            parts += ["FALSE", "0", "0"]
    if step.recv is not None:
        parts += ["TRUE", _pk(co.packet(step.recv, sid))]
    else:
        parts += ["FALSE", "0"]
    if step.sends and not step.go_looking:
        out: dict[int, list[str]] = {k: [] for k in range(1, n + 1)}
        for to, p in step.sends:
            out[to].append(_pk(co.packet(p, to)))
        parts.append("<<" + ", ".join("<<" + ", ".join(out[k]) + ">>" for k in range(1, n + 1)) + ">>")
    else:
        parts.append("<<>>")
    return "<<" + ", ".join(parts) + ">>"


def _actions_helpers(actions: list[tuple[str, tuple[str, ...]]]) -> str:
    if any(p not in ("i", "j") for _, params in actions for p in params):
        raise ValueError(f"an action of Next takes a parameter other than i and j: {actions}")  # record's fields
    static = ", ".join(f"{v}'[e[4]]" for v in STATIC)
    fields = {"i": "e[2]", "j": "e[3]"}
    arms = [f'    \\/ e[1] = "{name}" /\\ {name}({", ".join(fields[p] for p in params)})' if params
            else f'    \\/ e[1] = "{name}" /\\ {name}' for name, params in actions]
    act = "Act(e) ==\n" + "\n".join([*arms, '    \\/ e[1] = "Check" /\\ UNCHANGED vars'])
    return f"""{act}

Logged(e) ==
    /\\ <<{static}>> = e[7]
    /\\ lastCommitted'[e[4]] = e[8]
    /\\ ackIndex'[e[4]] = e[9]
    /\\ Len(history'[e[4]]) = e[10]
    /\\ IF e[10] = 0 THEN TRUE ELSE history'[e[4]][e[10]] = e[11]
    /\\ Len(stagedHistory'[e[4]]) = e[12]
    /\\ IF e[12] = 0 THEN TRUE ELSE stagedHistory'[e[4]][e[12]] = e[13]
    /\\ IF e[14] THEN history'[e[4]] = e[15] /\\ stagedHistory'[e[4]] = e[16] ELSE TRUE

\\* IF, not \\/: TLC takes every disjunct of an action as a possible successor, so it would evaluate both sides.
Post(e) == IF e[6] THEN Logged(e) ELSE TRUE

Took(e) == IF e[17] THEN msgs[e[3]][e[4]] /= <<>> /\\ Head(msgs[e[3]][e[4]]) = e[18] ELSE TRUE

Sent(e) == IF e[5] THEN TRUE
           ELSE IF e[19] = <<>> THEN \\A k \\in Server \\ {{e[4]}} : msgs'[e[4]][k] = msgs[e[4]][k]
           ELSE \\A k \\in Server \\ {{e[4]}} : msgs'[e[4]][k] = msgs[e[4]][k] \\o e[19][k]

{REBASING}
\\* A sequence as the fingerprints by place see it (PLACE).
Ends(q) == IF q = <<>> THEN <<0>> ELSE <<Len(q), q[1], q[Len(q)]>>

\\* Rebased in the state after step e, given Rebased before it, checking each packet once: when it is sent. Zab.tla
\\* adds packets only to the acting server's channels (Send, SendSeq, SendAll from i) and Sent pins those additions to
\\* the record's e[19]; every other channel only loses packets at its head (Discard) or is emptied (a crash or
\\* GoLooking). Both are checked here (IsSuffix, of module ZabrefSeq, compares by identity first), so a spec that
\\* added packets another way would make the step inexact (the window is checked again without rebasing), never a
\\* packet unchecked. A GoLooking's sends are not compared (e[5]): its whole state is checked.
RebasedStep(e, a) ==
    /\\ \\A s \\in Server : a[s] /= <<>> => RebasedHere(s, a[s][1])'
    /\\ IF e[5] THEN Rebased(a)'
       ELSE /\\ \\A y \\in Server : \\A z \\in Server : y /= e[4] \\/ z = e[4] => IsSuffix(msgs'[y][z], msgs[y][z])
            /\\ e[19] /= <<>> => \\A z \\in Server \\ {{e[4]}} : a[z] /= <<>> =>
                   \\A k \\in 1 .. Len(e[19][z]) : PacketRebased(a[z][1], e[19][z][k])"""


#: The rebasing's conditions in TLA+ (docs/validation.md, "Windows"), over Zab.tla's variables: this module's windows
#: and conformance/validate/zkmodule.py's check them.
REBASING = """\\* The rebasing's conditions (conformance/validate/chain.py, docs/validation.md): server s's anchor is a[s] (a
\\* sequence, empty for a server whose history is whole).
ZRef(t, z) == z[2] = 0 \\/ ZxidLE(t.zxid, z)
\\* what server s holds itself, and a packet p on its way to s; a staged history in BROADCAST is what NEWLEADER
\\* deferred (NewLeaderDefers: transactions after the history, none dropped, `Coords.staged`; a zabref server never
\\* defers, so its own is empty there), in SYNCHRONIZATION a whole history
RebasedHere(s, t) ==
    /\\ history[s] /= <<>> /\\ history[s][1] = t
    /\\ \\/ stagedHistory[s] = <<>> \\/ zabState[s] = BROADCAST
       \\/ stagedHistory[s][1] = t
    /\\ currentEpoch[s] >= t.zxid[1]
    /\\ \\A f \\in Server : learnerPhase[s][f] = "ACKEPOCH" =>
           learnerLastZxid[s][f] = <<0, 0>> \\/ ZxidLE(t.zxid, learnerLastZxid[s][f])
\\* An ACK's counter keeps its sign: LeaderProcessACK tells a proposal's ACK from NEWLEADER's by zxid[2] > 0, and a
\\* dropped transaction's counter goes below 0 in the window (Coords.zx): the 1,000-fault run's ACK of 492:74 read
\\* as 492:-3 was refused by that guard until this condition sent its window back to be checked without rebasing.
PacketRebased(t, p) ==
    /\\ p.type = "SNAP" => p.data /= <<>> /\\ p.data[1] = t
    /\\ p.type = "ACK" => p.zxid[2] >= 0
    /\\ p.type = "ACKEPOCH" => p.zxid = <<0, 0>> \\/ ZxidLE(t.zxid, p.zxid)
    /\\ p.type = "TRUNC" => ZxidLE(t.zxid, p.zxid)
    /\\ p.type \\in {"ACK", "COMMIT", "UPTODATE", "DIFF", "PROPOSAL"} => ZRef(t, p.zxid)
RebasedAt(s, t) ==
    /\\ RebasedHere(s, t)
    /\\ \\A x \\in Server : \\A k \\in 1 .. Len(msgs[x][s]) : PacketRebased(t, msgs[x][s][k])
Rebased(a) == \\A s \\in Server : a[s] /= <<>> => RebasedAt(s, a[s][1])
"""


STEP = "Took(e) /\\ Act(e) /\\ Post(e) /\\ Sent(e)"
#: What the fingerprints by place hold of a state (conformance/validate/windows.py): every variable but the
#: sequences whole, and each sequence (history, stagedHistory, a channel, committed) by its length and its first
#: and last elements. Zab.tla changes a sequence only at its ends (Append, SendSeq, Tail, a prefix by SubSeq) or
#: replaces it by the value of another variable or packet, so two successors of one step that differ, differ here.
PLACE = ("acceptedEpoch, currentEpoch, state, zabState, leader, lastCommitted, newEpoch, learnerPhase, "
         "learnerLastZxid, ackIndex, Cardinality(proposed), established, faults, Ends(committed), "
         "[s \\in Server |-> <<Ends(history[s]), Ends(stagedHistory[s])>>], "
         "[a \\in Server |-> [b \\in Server |-> Ends(msgs[a][b])]]")


#: What a run of servers with ``[cluster] leader_logs_late`` is checked with: the spec's LeaderLogsLate overridden
#: by this definition (`config` with ``late``), which every validation module carries (`helpers`).
LATE_DEFINITION = "ZabrefLeaderLogsLate == TRUE"


def helpers(actions: list[tuple[str, tuple[str, ...]]]) -> str:
    return _actions_helpers(actions) + "\n\n" + LATE_DEFINITION + "\n"


def config(n: int, late: bool = False) -> str:
    """The CONSTANTS of a validation model of n servers; ``late``: its leaders log late (the run's restart lines
    say so: `conformance.validate.actionlogs.Logs.late`)."""
    override = "    LeaderLogsLate <- ZabrefLeaderLogsLate\n" if late else ""
    return f"CONSTANTS\n    N = {n}\n    MaxEpoch = {BIG}\n    MaxTxns = {BIG}\n    MaxFaults = {BIG}\n{override}"


# ---- a state in a window's coordinates


def render_state(snap: Snapshot, co: Coords) -> dict[str, str]:
    """Every variable of the spec in the snapshot's state, as TLA+ value text in the coordinates ``co``.
    ``proposed`` is written empty: a window starts it empty (module docstring), and its end is compared by size
    (`END_PROPOSED`)."""
    n = snap.view.n
    servers = range(1, n + 1)
    per = snap.per
    txn = snap.view.txn

    def hist(s: int) -> list[dict[str, Any]]:
        h, length = snap.hist[s]
        return [co.txn(txn(z, t)) for z, t in h[co.drop(s):length]]

    def staged(s: int) -> list[dict[str, Any]]:
        st = snap.staged[s]
        return [co.txn(txn(z, t)) for z, t in st[co.drop(s):]] if st else []

    def tup(items: list[str]) -> str:
        return "<<" + ", ".join(items) + ">>"

    out = {
        "history": tup([_seq(hist(s)) for s in servers]),
        "stagedHistory": tup([_seq(staged(s)) for s in servers]),
        "lastCommitted": format_value([co.idx(per[s]["lastCommitted"], s) for s in servers]),
        "ackIndex": format_value([[co.idx(k, s) for k in per[s]["ackIndex"]] for s in servers]),
        "learnerLastZxid": format_value([[co.zx(z) for z in per[s]["learnerLastZxid"]] for s in servers]),
        "msgs": tup([tup([tup([_pk(co.packet(p, b)) for p in snap.msgs[a, b]]) for b in servers]) for a in servers]),
        "proposed": "{}",
        "committed": "<<>>", "established": "{}", "faults": "0",
    }
    for name in ("acceptedEpoch", "currentEpoch", "state", "zabState", "leader", "newEpoch", "learnerPhase"):
        out[name] = format_value([per[s][name] for s in servers])
    return out


# ---- choosing a window's coordinates


class _Increasing:
    """How long a prefix of a history list has strictly increasing zxids with counters >= 1, cached per list (the
    view only appends to a list in place, so a checked prefix stays checked)."""

    def __init__(self) -> None:
        self.done: dict[int, tuple[list, int]] = {}

    def upto(self, h: list[tuple[int, str]], n: int) -> int:
        held = self.done.get(id(h))
        k = held[1] if held is not None and held[0] is h else 0
        if k >= n:
            return n
        prev = h[k - 1][0] if k else 0
        while k < n:
            z = h[k][0]
            if z <= prev or (z & MASK) == 0:
                break
            prev = z
            k += 1
        if len(self.done) > 64:
            self.done.clear()
        self.done[id(h)] = (h, k)
        return k


def _lcp(a: list, b: list, hi: int) -> int:
    """The longest common prefix of a and b, at most hi (binary search on slices: compared in C)."""
    hi = min(hi, len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    lo = 0  # a[:lo] == b[:lo]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


_BIG = 1 << 62


class _Server:
    """What a window's start, steps and end allow of one server's ``b`` (its dropped prefix is b - 1 long)."""

    def __init__(self) -> None:
        self.b = _BIG  # b <= every length of its histories, every positive index of its own
        self.zmin = _BIG  # the smallest zxid it reads (0-counter ones apart)
        self.epoch = _BIG  # its smallest currentEpoch
        self.whole: list[list[tuple[int, str]]] = []  # its histories a record compares whole (raw)
        self.snaps: list[list[dict[str, Any]]] = []  # SNAP data sent to it (canonical)

    def zref(self, z: Any, zero_ok: bool = True) -> None:
        if int(z[1]) == 0 and (zero_ok or int(z[0]) == 0):
            return
        self.zmin = min(self.zmin, _zint(z))


class _Bounds:
    """Per server (module docstring): the bounds on its ``b``; and which servers must share coordinates (a SNAP
    between them; the servers that take ClientRequest, whose count of their epoch's transactions sets ``shift``)."""

    def __init__(self, n: int) -> None:
        self.s = {k: _Server() for k in range(1, n + 1)}
        self.links: list[tuple[int, int]] = []
        self.clients: set[int] = set()

    def packet(self, p: dict[str, Any], frm: int, to: int) -> None:
        srv = self.s[to]
        kind = p["type"]
        if kind == "SNAP":
            srv.snaps.append(p["data"])
            srv.b = min(srv.b, len(p["data"]))
            self.links.append((frm, to))
        elif kind == "ACKEPOCH":
            srv.zref(p["zxid"], zero_ok=False)
        elif kind == "TRUNC":
            srv.zmin = min(srv.zmin, _zint(p["zxid"]))
        elif kind in ("ACK", "COMMIT", "UPTODATE", "DIFF", "PROPOSAL"):
            srv.zref(p["zxid"])

    def server(self, sid: int, e: dict[str, Any]) -> None:
        srv = self.s[sid]
        srv.b = min(srv.b, e["hl"])
        if e["sl"]:
            srv.b = min(srv.b, e["sl"])
        for k in (e["lastCommitted"], *e["ackIndex"]):
            if k > 0:
                srv.b = min(srv.b, k)
        for z, phase in zip(e["learnerLastZxid"], e["learnerPhase"]):
            if phase == "ACKEPOCH":  # the only phase in which LeaderProcessACKEPOCH reads it
                srv.zref(z, zero_ok=False)
        srv.epoch = min(srv.epoch, e["currentEpoch"])
        if e["history"] is not None:
            srv.whole.append(e["history"].items)
            if len(e["stagedHistory"]):
                srv.whole.append(e["stagedHistory"].items)

    def step(self, step: SpecStep) -> None:
        if step.expected is not None:
            self.server(step.sid, step.expected)
        if step.action == "ClientRequest":
            self.clients.add(step.sid)
        if step.recv is not None:
            self.packet(step.recv, step.params.get("j", 0), step.sid)
        for to, p in step.sends:
            self.packet(p, step.sid, to)

    def start(self, snap: Snapshot) -> None:
        for sid, e in snap.per.items():
            self.server(sid, e)
        for (a, b), q in snap.msgs.items():
            for p in q:
                self.packet(p, a, b)


def _groups(n: int, bounds: _Bounds) -> list[list[int]]:
    """Servers that must share coordinates: linked by a SNAP, or all taking ClientRequest (union-find)."""
    parent = {k: k for k in range(1, n + 1)}

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    pairs = list(bounds.links)
    clients = sorted(bounds.clients)
    pairs += [(clients[0], c) for c in clients[1:]]
    for a, b in pairs:
        if a in parent and b in parent:
            parent[find(a)] = find(b)
    out: dict[int, list[int]] = {}
    for k in range(1, n + 1):
        out.setdefault(find(k), []).append(k)
    return list(out.values())


def coordinates(snap: Snapshot, bounds: _Bounds, inc: _Increasing, *, rebase: bool = True) -> Coords:
    """The window's coordinates (module docstring): for each group of servers that must share them, the largest b
    its start, steps and end allow."""
    values = snap.proposed
    if not rebase:
        return Coords(values=values)
    drops: dict[int, int] = {}
    prefix: dict[int, list[tuple[int, str]]] = {}
    for group in _groups(snap.view.n, bounds):
        p, plen = snap.hist[group[0]]
        b = min(plen, *(bounds.s[k].b for k in group))
        for k in group:
            h, length = snap.hist[k]
            if k != group[0] and b > 1:
                b = _lcp(p, h, min(b, length))
            st = snap.staged[k]
            if st and b > 1:
                b = _lcp(p, st, b)
        b = min(b, inc.upto(p, b))
        if b > 1:
            keys = _ZxidKeys(p)
            zmin = min(bounds.s[k].zmin for k in group)
            epoch = min(bounds.s[k].epoch for k in group)
            b = min(b, bisect.bisect_right(keys, zmin, 0, b))  # every zxid read >= the anchor
            b = min(b, bisect.bisect_left(keys, (epoch + 1) << 32, 0, b))  # every currentEpoch >= the anchor's
            for k in group:
                for h in bounds.s[k].whole:
                    if b > 1:
                        b = _lcp(p, h, b)
            snaps = [d for k in group for d in bounds.s[k].snaps]
            if snaps and b > 1:
                canon = [snap.view.txn(z, t) for z, t in p[:b]]
                for data in snaps:
                    b = _lcp(canon, data, b)
        if b > 1:
            for k in group:
                drops[k] = b - 1
                prefix[k] = p
    if not drops:
        return Coords(values=values)
    epoch, shift = -1, 0
    if bounds.clients:
        c = next(iter(bounds.clients))
        if c in drops:  # the ClientRequest group: its dropped transactions of the anchor's epoch set the shift
            p, d = prefix[c], drops[c]
            epoch = p[d][0] >> 32
            shift = d - bisect.bisect_left(_ZxidKeys(p), epoch << 32, 0, d)
    co = Coords(drops, {}, epoch, shift, values)
    anchors = {k: co.txn(snap.view.txn(*prefix[k][drops[k]])) for k in drops}
    return Coords(drops, anchors, epoch, shift, values)


class _ZxidKeys:
    """The zxids of a history list, as a sequence bisect can search without copying."""

    def __init__(self, h: list[tuple[int, str]]) -> None:
        self.h = h

    def __len__(self) -> int:
        return len(self.h)

    def __getitem__(self, k: int) -> int:
        return self.h[k][0]


# ---- cutting the merged behaviour


@dataclass
class Plan:
    """Where windows start: every ``size`` steps except the boundaries ``joined`` removed; ``plain``: windows (by
    first step) checked without rebasing; ``only``: render only these windows (None: all)."""

    size: int
    joined: set[int] = field(default_factory=set)
    plain: set[int] = field(default_factory=set)
    only: set[int] | None = None

    def cut(self, k: int) -> bool:
        return k % self.size == 0 and k not in self.joined


class Cutter:
    """The merge's sink (module docstring): closes a window where the plan cuts and hands it to ``emit``."""

    def __init__(self, n: int, plan: Plan, emit: Callable[[Window], None]) -> None:
        self.n = n
        self.plan = plan
        self.emit = emit
        self.count = 0  # steps so far
        self.unlogged = 0
        self.first = 0  # the open window's first step
        self.start: Snapshot | None = None
        self.steps: list[SpecStep] = []
        self.bounds = _Bounds(n)
        self.inc = _Increasing()
        self.view: SpecView | None = None
        self.firsts: list[int] = []  # every window's first step, in order

    def _wanted(self) -> bool:
        return self.plan.only is None or self.first in self.plan.only

    def __call__(self, step: SpecStep | None, view: SpecView) -> None:
        if step is None:
            self.view = view
            self._open(view)
            return
        self.count += 1
        self.unlogged += step.unlogged
        if self._wanted():
            self.steps.append(step)
            self.bounds.step(step)
        if self.plan.cut(self.count):
            self._close(view, last=False)
            self._open(view)

    def finish(self) -> None:
        """Close the last window (if it has steps)."""
        if self.count > self.first and self.view is not None:
            self._close(self.view, last=True)
        elif self.firsts and self.firsts[-1] == self.count:
            self.firsts.pop()  # the run ended at a boundary: no window after it

    def _open(self, view: SpecView) -> None:
        self.first = self.count
        self.firsts.append(self.first)
        self.steps = []
        self.start = Snapshot(view) if self._wanted() else None
        self.bounds = _Bounds(self.n)
        if self.start is not None:
            self.bounds.start(self.start)

    def _close(self, view: SpecView, last: bool) -> None:
        if self.start is None:
            return
        end = Snapshot(view)
        self.bounds.start(end)  # the end state is written in this window's coordinates too
        co = coordinates(self.start, self.bounds, self.inc, rebase=self.first not in self.plan.plain)
        records = [record(s, self.n, co) for s in self.steps]
        anchors = format_value([[co.anchors[k]] if k in co.anchors else [] for k in range(1, self.n + 1)])
        exact, exact_step = (None, None) if not co.anchors else (f"Rebased({anchors})", f"RebasedStep(e, {anchors})")
        self.emit(Window(self.first, self.first, records,
                         render_state(self.start, co),
                         None if last else {k: v for k, v in render_state(end, co).items() if k in COMPARED},
                         exact, exact_step, meta={"drop": max(co.drops.values(), default=0), "drops": co.drops},
                         end_also=END_PROPOSED.format(end.proposed - self.start.proposed)))
        self.start = None


def spec_files(spec_dir: Path) -> list[Path]:
    """The spec modules a window's module extends."""
    return [spec_dir / "Zab.tla"]
