"""Merge servers' action logs into ONE behaviour of spec/Zab.tla: the order `zabref validate` hands to TLC.

Theory of operation
-------------------
Each server's log is in its own order; the spec needs one order of all steps. `merge` builds it by always taking,
among the servers' next lines, the ENABLED one with the smallest timestamp (``time.monotonic_ns``, one clock for
every process on the machine), while it keeps the spec's variables as the logs say they are (`SpecView`: each
server's variables from its own lines, and the channels ``msgs`` from the packets the steps sent and took). A line
is enabled when the spec could take it now:

* a step that takes a packet (``recv``): the packet is at the head of its channel (its send is placed already, and
  nothing sent before it is still in the way);
* a step after which the server is LOOKING (a timeout, a stale LEADERINFO, a follower ahead at ACKEPOCH) and a
  restart (the spec's Crash): these are the spec's GoLooking, which closes a connection at BOTH ends in one step --
  the leader forgets the learner, and what is in flight either way is lost. In a real network the two ends learn
  it at different times, and data sent before the close still arrives. So such a step waits for every peer that
  still reads from the server (packets of it in a channel) or that leads it (the peer's learner state of it): the
  peer must be at its own line saying the connection closed (``closed``), or at a GoLooking of its own, or at the
  end of its log; then the step is taken and the peer's ``closed`` with it. The peer reads everything sent before
  the close first, as TCP does;
* a ``closed`` line of a leader whose learner the spec still knows: the other way round -- the learner must be at
  its GoLooking (a leader that dropped a learner makes the learner give up: it times out at its next tick), and
  both are taken together; any other ``closed`` line changes nothing in the spec and is taken as it comes;
* every other step: always.

If the learner's log has ended (its process was stopped for good), its GoLooking is the spec's FollowerTimeout (or
LeaderTimeout), which the spec allows at any time: the merge adds it, marked ``unlogged`` -- the only steps the
validator supplies itself, and the report says so. When no line is enabled and some remain, the logs are not a
behaviour of the spec in any order the rules allow: `MergeError` names every server's next line and why it waits.

Values. The spec numbers the values of ClientRequest 1, 2, ... in the order of the broadcasts; the merge numbers
the logged values (text) the same way, in the order it places the ClientRequest steps, and writes every
transaction and packet with those numbers.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from conformance.actionlogs import Event, Logs
from conformance.errors import ConformanceError
from conformance.mapping import zxid_pair
from conformance.values import make_set

__all__ = ["SpecStep", "Behaviour", "MergeError", "merge", "INIT_VARS"]

NONE = "NONE"
#: Every server's variables in the spec's Init (for a server whose first line shows them).
INIT_VARS = {"accepted_epoch": 0, "current_epoch": 0, "state": "LOOKING", "zab_state": "ELECTION", "leader": 0,
             "last_committed": 0, "staged_history": [], "new_epoch": 0}


class MergeError(ConformanceError):
    """No order of the logs is a behaviour of the spec by the merge's rules; the message says where it stuck."""


@dataclass
class SpecStep:
    """One step of the merged behaviour: a spec action (``Check``: no action, the server's variables are compared;
    its line changed nothing in the spec), the server whose variables the line logged, and where it comes from."""

    action: str
    params: dict[str, int]
    sid: int
    where: str
    expected: dict[str, Any] | None  # the server's spec variables after the step (None: left to TLC)
    recv: dict[str, Any] | None = None  # the packet taken, as the spec writes it
    sends: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    unlogged: bool = False
    go_looking: bool = False


@dataclass
class Behaviour:
    """The merged behaviour: the initial state, the steps, and the state after each (for chunking)."""

    init: dict[str, Any]
    steps: list[SpecStep]
    states: list[dict[str, Any]]  # states[k] = the spec state after steps[:k] (states[0] = init)
    n: int
    notes: list[str]


class SpecView:
    """The spec's variables as the logs say them, kept while merging (canonical forms, docs/values.md)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.hist: dict[int, list[tuple[int, str]]] = {s: [] for s in range(1, n + 1)}
        self.vars: dict[int, dict[str, Any]] = {s: copy.deepcopy(INIT_VARS) for s in range(1, n + 1)}
        self.msgs: dict[tuple[int, int], deque[dict[str, Any]]] = {
            (a, b): deque() for a in range(1, n + 1) for b in range(1, n + 1)}
        self.values: dict[tuple[int, str], int] = {}  # (zxid, value text) -> the spec's number
        self.proposed: list[dict[str, Any]] = []
        self.committed: list[dict[str, Any]] = []

    # ---- values

    def number(self, zxid: int, text: str) -> Any:
        return self.values.get((zxid, text), text)

    def txn(self, zxid: int, text: str) -> dict[str, Any]:
        return {"value": self.number(zxid, text), "zxid": zxid_pair(zxid)}

    def packet(self, p: dict[str, Any]) -> dict[str, Any]:
        kind, zxid, data = p["type"], int(p["zxid"]), p.get("data")
        if kind in ("FOLLOWERINFO", "ACKEPOCH"):
            spec: Any = int(data)
        elif kind == "PROPOSAL":
            spec = self.number(zxid, data)
        elif kind == "SNAP":
            spec = [self.txn(int(z), v) for z, v in data]
        else:
            spec = "n/a"
        return {"data": spec, "type": kind, "zxid": zxid_pair(zxid)}

    # ---- one server's logged variables

    def learns(self, sid: int, line_vars: dict[str, Any], persist: list[list[Any]] | None) -> None:
        """Take a line's variables (and the history changes of its step) as server ``sid``'s."""
        if persist is not None:
            h = self.hist[sid]
            for op in persist:
                kind, arg = op
                if kind == "append":
                    h.extend((int(z), v) for z, v in arg)
                elif kind == "truncate":
                    self.hist[sid] = h = [t for t in h if t[0] <= int(arg)]
                elif kind == "replace":
                    self.hist[sid] = h = [(int(z), v) for z, v in arg]
        if "history" in line_vars:
            self.hist[sid] = [(int(z), v) for z, v in line_vars["history"]]
        self.vars[sid] = {k: v for k, v in line_vars.items() if k != "history"}

    def expected(self, sid: int) -> dict[str, Any]:
        """Server ``sid``'s spec variables (per-server slices, canonical)."""
        v, n = self.vars[sid], self.n

        def per_peer(key: str, default: Any, convert: Any) -> list[Any]:
            held = {int(k): x for k, x in v.get(key, {}).items()}
            return [convert(held[f]) if f in held else default for f in range(1, n + 1)]

        return {
            "history": [self.txn(z, t) for z, t in self.hist[sid]],
            "acceptedEpoch": v["accepted_epoch"], "currentEpoch": v["current_epoch"], "state": v["state"],
            "zabState": v["zab_state"], "leader": v["leader"], "lastCommitted": v["last_committed"],
            "stagedHistory": [self.txn(int(z), t) for z, t in v["staged_history"]],
            "newEpoch": v["new_epoch"],
            "learnerPhase": per_peer("learner_phase", NONE, str),
            "learnerLastZxid": per_peer("learner_last_zxid", [0, 0], lambda z: zxid_pair(int(z))),
            "ackIndex": per_peer("ack_index", 0, int),
        }

    def state(self) -> dict[str, Any]:
        """The whole spec state (faults is a bound: 0 at every chunk's start; validation models allow plenty)."""
        per = {s: self.expected(s) for s in range(1, self.n + 1)}
        out = {name: [per[s][name] for s in range(1, self.n + 1)] for name in per[1]}
        out["msgs"] = [[list(self.msgs[a, b]) for b in range(1, self.n + 1)] for a in range(1, self.n + 1)]
        out["proposed"] = make_set(self.proposed)
        out["committed"] = list(self.committed)
        out["faults"] = 0
        return out

    def learner_of(self, y: int, x: int) -> bool:
        """Does leader y know x as a learner (the spec's learnerPhase[y][x] /= "NONE")?"""
        return self.vars[y].get("learner_phase", {}).get(str(x), NONE) != NONE

    def go_looking(self, x: int) -> None:
        """The spec's GoLooking(x) at every OTHER server: channels to and from x emptied, x forgotten as a learner
        (x's own variables come from its line)."""
        for y in range(1, self.n + 1):
            self.msgs[x, y].clear()
            self.msgs[y, x].clear()
            if y != x:
                v = self.vars[y]
                for key, default in (("learner_phase", NONE), ("learner_last_zxid", 0), ("ack_index", 0)):
                    if str(x) in v.get(key, {}):
                        v[key] = {**v[key], str(x): default}

    def deliveries(self, sid: int) -> None:
        """The spec's checking variable ``committed``: the first delivery order over every server (Deliver)."""
        k = self.vars[sid]["last_committed"]
        delivered = [self.txn(z, t) for z, t in self.hist[sid][:k]]
        if len(delivered) > len(self.committed) and delivered[: len(self.committed)] == self.committed:
            self.committed = delivered


def _looking_after(event: Event) -> bool:
    return event.kind == "step" and event.fields["vars"]["state"] == "LOOKING"


def merge(logs: Logs) -> Behaviour:
    """The merged behaviour of ``logs`` (module docstring); MergeError when there is none."""
    n = max(logs.events)
    view = SpecView(n)
    queues = {s: deque(evs) for s, evs in logs.events.items()}
    notes = list(logs.notes)
    for s in range(1, n + 1):  # every server's first line is its first start: the initial state
        q = queues.get(s)
        if not q:
            raise MergeError(f"no action log for server {s} (servers 1..{n} must each have one)")
        first = q.popleft()
        view.learns(s, first.fields["vars"], None)
    for s, q in queues.items():  # number the values of histories that predate the logs, in history order
        for z, t in view.hist[s]:
            view.values.setdefault((z, t), len(view.values) + 1)
    init = view.state()
    steps: list[SpecStep] = []
    states: list[dict[str, Any]] = [init]

    def head(s: int) -> Event | None:
        return queues[s][0] if queues.get(s) else None

    def emit(step: SpecStep) -> None:
        steps.append(step)
        states.append(view.state())

    def take_go_looking(x: int) -> None:
        """x's head is its GoLooking (a LOOKING step or a restart), or x's log ended: take it, with the peers'
        `closed` lines of x at their heads."""
        ev = head(x)
        if ev is None:  # the log ended: the spec's timeout, supplied
            role = view.vars[x]["state"]
            action = "FollowerTimeout" if role == "FOLLOWING" else "LeaderTimeout"
            view.go_looking(x)
            view.vars[x] = {**view.vars[x], **{k: INIT_VARS[k] for k in ("state", "zab_state", "leader",
                                                                            "staged_history", "new_epoch")},
                            "learner_phase": {}, "learner_last_zxid": {}, "ack_index": {}}
            emit(SpecStep(action, {"i": x}, x, f"server {x}: after its log's end", None, unlogged=True,
                          go_looking=True))
            notes.append(f"unlogged {action}({x}) supplied: server {x}'s log ends while a leader still counts it")
        else:
            take(ev)
        for y in range(1, n + 1):
            hy = head(y)
            if y != x and hy is not None and hy.kind == "closed" and hy.fields["peer"] == x:
                queues[y].popleft()
                view.learns(y, hy.fields["vars"], None)
                emit(SpecStep("Check", {}, y, hy.where, view.expected(y)))

    def take(ev: Event) -> None:
        queues[ev.sid].popleft()
        s = ev.sid
        if ev.kind == "restart":
            crashes = view.vars[s]["state"] != "LOOKING" or view.vars[s]["last_committed"] > 0
            view.go_looking(s)
            view.learns(s, ev.fields["vars"], None)
            if crashes:
                emit(SpecStep("Crash", {"i": s}, s, ev.where, view.expected(s), go_looking=True))
            return
        if ev.kind == "closed":
            view.learns(s, ev.fields["vars"], None)
            emit(SpecStep("Check", {}, s, ev.where, view.expected(s)))
            return
        f = ev.fields
        params = {k: int(v) for k, v in f["params"].items()}
        recv = None
        if "recv" in f:
            recv = view.packet(f["recv"])
            view.msgs[params["j"], s].popleft()
        looking = _looking_after(ev) and view.vars[s]["state"] != "LOOKING"
        if looking:
            view.go_looking(s)
        if f["action"] == "ClientRequest":
            (kind, txns), = [op for op in f["persist"] if op[0] == "append"]
            (zxid, text), = txns
            view.values[(int(zxid), text)] = len(view.proposed) + 1
        view.learns(s, f["vars"], f["persist"])
        if f["action"] == "ClientRequest":
            view.proposed.append(view.txn(*view.hist[s][-1]))
        sends = [(int(to), view.packet(p)) for to, p in f["sends"]]
        for to, p in sends:
            view.msgs[s, to].append(p)
        view.deliveries(s)
        emit(SpecStep(f["action"], params, s, ev.where, view.expected(s), recv, sends, go_looking=looking))

    def waits(ev: Event) -> str | None:
        """Why ``ev`` cannot be taken now (None: it can)."""
        s = ev.sid
        if ev.kind == "step" and "recv" in ev.fields:
            j = int(ev.fields["params"]["j"])
            want = view.packet(ev.fields["recv"])
            channel = view.msgs[j, s]
            if not channel:
                return f"it takes {want['type']} from {j}, which nothing sent yet"
            if channel[0] != want:
                return f"it takes {want['type']}{want['zxid']} from {j}, but {channel[0]['type']}{channel[0]['zxid']} " \
                       f"is at the head of that channel"
        if ev.kind == "restart" or (ev.kind == "step" and _looking_after(ev) and view.vars[s]["state"] != "LOOKING"):
            for y in range(1, n + 1):
                if y == s or not (view.learner_of(y, s) or view.msgs[s, y]):
                    continue
                hy = head(y)
                ok = hy is None or (hy.kind == "closed" and hy.fields["peer"] == s) or hy.kind == "restart" \
                    or (hy.kind == "step" and _looking_after(hy))
                if not ok:
                    return f"its GoLooking waits for server {y} to reach the close of their connection"
        if ev.kind == "closed":
            x = int(ev.fields["peer"])
            if view.learner_of(s, x):
                hx = head(x)
                if hx is not None and not (hx.kind == "restart" or _looking_after(hx)):
                    return f"it drops learner {x}, whose next line is not its GoLooking"
        return None

    while any(queues.values()):
        best: Event | None = None
        blocked: list[str] = []
        for s in sorted(queues):
            ev = head(s)
            if ev is None:
                continue
            why = waits(ev)
            if why is None:
                if best is None or ev.t < best.t:
                    best = ev
            else:
                blocked.append(f"server {s} at {ev.where} ({ev.fields.get('action', ev.kind)}): {why}")
        if best is None:
            raise MergeError("no order of the logs is a behaviour of spec/Zab.tla from here; every server waits:\n  "
                             + "\n  ".join(blocked) + f"\n(after {len(steps)} merged steps)")
        if best.kind == "closed" and view.learner_of(best.sid, int(best.fields["peer"])):
            take_go_looking(int(best.fields["peer"]))  # the learner's GoLooking, and this close with it
            if head(best.sid) is best:
                take(best)
        elif best.kind == "restart" or (best.kind == "step" and _looking_after(best)
                                        and view.vars[best.sid]["state"] != "LOOKING"):
            take_go_looking(best.sid)
        else:
            take(best)
    return Behaviour(init, steps, states, n, notes)
