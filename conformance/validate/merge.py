"""Merge servers' action logs into ONE behaviour of spec/Zab.tla: the order `zabref validate` hands to TLC.

Theory of operation
-------------------
Each server's log is in its own order; the spec needs one order of all steps. `merge` builds it by always taking,
among the servers' next lines, the ENABLED one with the smallest timestamp (``time.monotonic_ns``, one clock for
every process on the machine), while it keeps the spec's variables as the logs say they are (`SpecView`: each
server's variables from its own lines, and the channels ``msgs`` from the packets the steps sent and took). A line
is enabled when the spec could take it now:

* a step that takes a packet (``recv``): the packet is at the head of its channel, sent on the same connection
  (``conn``: the connection id both ends logged) -- its send is placed already, and nothing sent before it, on this
  connection or an older one, is still in the way;
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
* BecomeFollower(i, j) opens a NEW connection to j: it waits until j's GoLooking lines that came before it (in time)
  are taken, so that its FOLLOWERINFO is not dropped with j's old connections. (Why i followed j is the election's
  business, which the Zab logs do not show; that i's decision came after j's GoLooking is what the clock says.) It
  also waits for every GoLooking or restart of j that comes before the line where j takes that FOLLOWERINFO,
  whatever the clock says: the dial was under way while j went down, and j's next incarnation accepted it (the
  simulator met this: a dial logged before the leader's power cut, accepted after its restart).
* every other step: always.

Steps a power cut undid. The runtime writes a step's line BEFORE the step's storage is made durable (so that no
packet leaves whose step is not logged); a power cut during that sync loses the step -- and, since a batch's packets
leave only after its sync, nobody saw it. So before merging, `drop_lost` walks each server's log: at every restart
it finds the last step before it whose persistent state (history, acceptedEpoch, currentEpoch, applied from the
steps' logged storage operations) is what the restarted process read from its disk, and drops the steps after it
(reported in the notes). A restart whose disk matches no step -- a write that no logged step made, or a synced write
that was lost -- is a `MergeError`: a durability bug.

If the learner's log has ended (its process was stopped for good), its GoLooking is the spec's FollowerTimeout (or
LeaderTimeout), which the spec allows at any time: the merge adds it, marked ``unlogged`` -- the only steps the
validator supplies itself, and the report says so. When no line is enabled and some remain, the logs are not a
behaviour of the spec in any order the rules allow: `MergeError` names every server's next line and why it waits.

Values. The spec numbers the values of ClientRequest 1, 2, ... in the order of the broadcasts; the merge numbers
the logged values (text) the same way, in the order it places the ClientRequest steps, and writes every
transaction and packet with those numbers.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.errors import MergeError
from conformance.validate.actionlogs import Event, Logs
from conformance.validate.specview import INIT_VARS, SpecView

__all__ = ["SpecStep", "Behaviour", "merge", "state_before", "step_at"]

#: The steps whose record compares the history and the staged history whole (they set them whole).
WHOLE = frozenset({"FollowerProcessNEWLEADER", "FollowerProcessDIFF", "FollowerProcessTRUNC", "FollowerProcessSNAP"})
#: Lines of a server's log the merge looks ahead, at most, to see whether it takes a packet still in a channel.
LOOKAHEAD = 10_000


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
    """The merged behaviour: the initial state and the steps (`state_before` gives the state before any one)."""

    init: dict[str, Any]
    steps: list[SpecStep]
    n: int
    notes: list[str]


@dataclass
class Dial:
    """accepted_after's scan of the dialed server's queue for one BecomeFollower: the connections its FOLLOWERINFO
    went on, the GoLooking/restart lines met (place, line), the place the scan reached, and where the dialed server
    takes the FOLLOWERINFO (None: not found yet; -1: never)."""

    ev: Event
    conns: set[Any]
    scanned: int
    found: list[tuple[int, Event]] = field(default_factory=list)
    taken: int | None = None


def _looking_after(event: Event) -> bool:
    return event.kind == "step" and event.fields["vars"]["state"] == "LOOKING"


class _Stop(Exception):  # noqa: N818 -- the merge's early exit, carrying the state
    def __init__(self, state: dict[str, Any], step: SpecStep | None = None) -> None:
        self.state = state
        self.step = step


def state_before(logs: Logs, k: int) -> dict[str, Any]:
    """The spec state before merged step ``k`` (0-based): the merge again, stopped there."""
    if k == 0:
        return merge(logs).init
    try:
        merge(logs, stop_at=k)
    except _Stop as stop:
        return stop.state
    raise IndexError(f"the merged behaviour has fewer than {k} steps")


def step_at(logs: Logs, k: int) -> SpecStep:
    """Merged step ``k`` (0-based): the merge again, stopped after it (a windowed validation keeps no steps)."""
    try:
        merge(logs, stop_at=k + 1)
    except _Stop as stop:
        assert stop.step is not None
        return stop.step
    raise IndexError(f"the merged behaviour has fewer than {k + 1} steps")


def _replay(hist: list[tuple[int, str]], epochs: list[int], persist: list[list[Any]]) -> None:
    """Apply a step's logged storage operations to (hist, [acceptedEpoch, currentEpoch]), in place."""
    for kind, arg in persist:
        if kind == "append":
            hist.extend((int(z), v) for z, v in arg)
        elif kind == "truncate":
            while hist and hist[-1][0] > int(arg):
                hist.pop()
        elif kind == "replace":
            hist[:] = [(int(z), v) for z, v in arg]
        elif kind == "acceptedEpoch":
            epochs[0] = int(arg)
        elif kind == "currentEpoch":
            epochs[1] = int(arg)


def _late_tail(ev: Event, hist: list[tuple[int, str]], epochs: list[int],
               disk: tuple[list[tuple[int, str]], list[int]]) -> bool:
    """Whether ``disk`` is what a power cut right after step ``ev`` leaves of a leader that logs late: its epochs,
    and a prefix of its history ``hist`` that holds what it had logged (the spec's Kept(i): ackIndex[i][i] ..
    Len(history[i]) for a leader in BROADCAST)."""
    v = ev.fields["vars"]
    if v.get("state") != "LEADING" or v.get("zab_state") != "BROADCAST" or disk[1] != epochs:
        return False
    logged = int(v.get("ack_index", {}).get(str(ev.sid), 0))
    return logged <= len(disk[0]) <= len(hist) and hist[:len(disk[0])] == disk[0]


def drop_lost(events: list[Event], notes: list[str], late: bool = False) -> list[Event]:
    """The server's lines without the steps a power cut undid (module docstring); MergeError for a restart whose
    disk no prefix of the logged steps explains. ``late``: the servers log late (LeaderLogsLate), so a leader's
    steps after its own log writes left their packets before those writes were durable: a restart whose disk holds
    a prefix of what a later step of it had in memory, no shorter than what it had logged, keeps every step up to
    that one (the spec's Crash keeps that prefix), and drops only those after it."""
    out: list[Event] = []
    since = 0  # index in `out` of the current process's first line (its restart)
    signs: list[tuple[int, int, int, int]] = []  # (history length, last zxid, epochs) after out[since + k]
    start: tuple[list[tuple[int, str]], list[int]] = ([], [0, 0])

    def state_after(k: int) -> tuple[list[tuple[int, str]], list[int]]:
        hist, epochs = list(start[0]), list(start[1])
        for ev in out[since + 1: since + k + 1]:
            if ev.kind == "step":
                _replay(hist, epochs, ev.fields["persist"])
        return hist, epochs

    hist: list[tuple[int, str]] = []
    epochs = [0, 0]
    for ev in events:
        if ev.kind == "restart":
            v = ev.fields["vars"]
            disk = ([(int(z), t) for z, t in v.get("history", [])], [v["accepted_epoch"], v["current_epoch"]])
            if out:
                sign = (len(disk[0]), disk[0][-1][0] if disk[0] else 0, *disk[1])
                keep = next((k for k in range(len(signs) - 1, -1, -1)
                             if signs[k] == sign and state_after(k) == disk), None)
                if late:  # the last step of this process after which a power cut leaves this disk, if later
                    lhist, lepochs = list(start[0]), list(start[1])
                    for k, e in enumerate(out[since + 1:], start=1):
                        if e.kind == "step" and e.fields["persist"]:
                            _replay(lhist, lepochs, e.fields["persist"])
                        if (keep is None or k > keep) and _late_tail(e, lhist, lepochs, disk):
                            keep = k
                if keep is None:
                    raise MergeError(f"{ev.where}: server {ev.sid} restarted with {len(disk[0])} transactions and "
                                     f"epochs {tuple(disk[1])} on disk, which no prefix of its logged steps leaves: a "
                                     f"write no step made reached the disk, or a synced write was lost")
                lost = len(out) - (since + keep + 1)
                if lost:
                    notes.append(f"{ev.where}: {lost} step(s) of server {ev.sid} before this restart dropped: their "
                                 f"storage was not durable when the power was cut, so nothing of them was seen")
                    del out[since + keep + 1:]
            since = len(out)
            start = disk
            hist, epochs = list(disk[0]), list(disk[1])
            signs = []
        elif ev.kind == "step" and ev.fields["persist"]:
            _replay(hist, epochs, ev.fields["persist"])
        out.append(ev)
        signs.append((len(hist), hist[-1][0] if hist else 0, *epochs))
    return out


def merge(logs: Logs, *, stop_at: int | None = None,
          sink: Callable[[SpecStep, SpecView], None] | None = None) -> Behaviour:
    """The merged behaviour of ``logs`` (module docstring); MergeError when there is none. With ``sink``, each step
    is handed to it with the view just after the step, and not kept (``Behaviour.steps`` stays empty): a windowed
    validation (conformance/validate/chain.py) cuts the behaviour as it comes, in memory bounded by a window.
    ``sink(None, view)`` is called once first, with the view of the initial state."""
    n = max(logs.events)
    view = SpecView(n)
    notes = list(logs.notes)
    queues = {s: deque(drop_lost(evs, notes, logs.late)) for s, evs in logs.events.items()}
    for s in range(1, n + 1):  # every server's first line is its first start: the initial state
        q = queues.get(s)
        if not q:
            raise MergeError(f"no action log for server {s} (servers 1..{n} must each have one)")
        first = q.popleft()
        view.learns(s, first.fields["vars"], None)
    for s, q in queues.items():  # number the values of histories that predate the logs, in history order
        for z, t in view.hist[s]:
            view.values.setdefault((z, t), len(view.values) + 1)
    init = view.state() if sink is None else {}
    if sink is not None:
        sink(None, view)
    steps: list[SpecStep] = []
    count = [0]

    popped = {s: 0 for s in queues}  # lines taken from each queue so far: a line's place is popped[s] + its index
    dials: dict[int, Dial] = {}  # accepted_after's scans, by id of the dial

    def head(s: int) -> Event | None:
        return queues[s][0] if queues.get(s) else None

    def emit(step: SpecStep) -> None:
        count[0] += 1
        if sink is not None:
            sink(step, view)
        else:
            steps.append(step)
        if stop_at is not None and count[0] == stop_at:
            raise _Stop(view.state(), step)

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
            if y != x and hy is not None and hy.kind == "closed" and hy.fields["peer"] == x \
                    and hy.fields.get("conn") == view.learner_conn.get((y, x)):
                queues[y].popleft()
                popped[y] += 1
                view.learns(y, hy.fields["vars"], None)
                emit(SpecStep("Check", {}, y, hy.where, view.expected(y, history=False)))

    def take(ev: Event) -> None:
        queues[ev.sid].popleft()
        popped[ev.sid] += 1
        s = ev.sid
        if ev.kind == "restart":
            crashes = view.vars[s]["state"] != "LOOKING" or view.vars[s]["last_committed"] > 0
            view.go_looking(s)
            view.learns(s, ev.fields["vars"], None)
            if crashes:
                emit(SpecStep("Crash", {"i": s}, s, ev.where, view.expected(s), go_looking=True))  # whole history
            return
        if ev.kind == "closed":
            view.learns(s, ev.fields["vars"], None)
            emit(SpecStep("Check", {}, s, ev.where, view.expected(s, history=False)))
            return
        f = ev.fields
        params = {k: int(v) for k, v in f["params"].items()}
        recv = None
        if "recv" in f:
            recv = view.packet(f["recv"])
            view.msgs[params["j"], s].popleft()
            if f["action"] == "LeaderProcessFOLLOWERINFO":
                view.learner_conn[s, params["j"]] = f["recv"].get("conn")
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
        for (to, p), (_, raw) in zip(sends, f["sends"]):
            view.msgs[s, to].append((p, raw.get("conn")))
        full = f["action"] in WHOLE  # the history or staged history set whole: compared whole
        emit(SpecStep(f["action"], params, s, ev.where, view.expected(s, history=full), recv, sends,
                      go_looking=looking))

    relevant: dict[tuple[int, int], tuple[int, Event | None]] = {}  # takes_from's scans (below)
    # How far takes_from and accepted_after look ahead before they assume. LOOKAHEAD keeps a step's cost bounded;
    # when every server waits on an assumption, the step is looked at again with no bound (an exact answer: a
    # server that follows another for more than LOOKAHEAD lines before it would have decided was such a deadlock)
    reach = [LOOKAHEAD]

    def takes_from(y: int, x: int) -> bool:
        """Will y take a packet of x before its connection with x ends (its close of x, its GoLooking or restart)?
        (A connection that never reached y -- refused, cut -- ends with no line at y: those packets are lost.)
        The first line of y's log that decides (a packet of x taken, a close of x, a GoLooking or restart) is kept
        with its place in y's log, and the scan goes on from where it stopped: y's queue only loses lines at its
        front, so a GoLooking waiting while y takes thousands of steps costs one scan, not one a merge step."""
        base = popped[y]
        held = relevant.get((y, x))
        if held is None or (held[1] is not None and held[0] < base):
            start = base
        elif held[1] is not None:
            return _decides(held[1], x, y) if held[0] - base <= reach[0] else True
        else:
            start = max(base, held[0])  # nothing decided before held[0]
        q = queues[y]
        for k, e in enumerate(itertools.islice(q, start - base, None), start):
            if k - base > reach[0]:
                relevant[(y, x)] = (k, None)
                return True  # far enough: assume it will (the order then waits, never drops a packet y takes)
            if (e.kind == "step" and "recv" in e.fields and int(e.fields["params"]["j"]) == x) \
                    or (e.kind == "closed" and e.fields["peer"] == x) or e.kind == "restart" or _looking_after(e):
                relevant[(y, x)] = (k, e)
                return _decides(e, x, y)
        relevant[(y, x)] = (base + len(q), None)
        return False

    def _decides(e: Event, x: int, y: int) -> bool:
        if e.kind == "step" and "recv" in e.fields and int(e.fields["params"]["j"]) == x:
            return e.fields["recv"].get("conn") in view.cids(x, y)  # a packet of these connections
        return False

    def accepted_after(j: int, ev: Event) -> Event | None:
        """BecomeFollower ``ev`` dials j; if j takes its FOLLOWERINFO only after a GoLooking or restart of its own
        (the dial was under way while j restarted, and j's next incarnation accepted it), that first GoLooking: the
        connection exists only after it, whatever the clock says of the dial. None also when j does not take it
        within LOOKAHEAD lines of its queue's front (asked again later). j's queue only loses lines at its front, so
        the scan is kept for the dial and continued where it stopped: a dial at a head for thousands of merge steps
        costs one scan of j's queue, not one a merge step (`Dial`)."""
        held = dials.get(id(ev))
        if held is None or held.ev is not ev:
            if len(dials) > 4096:
                dials.clear()
            held = dials[id(ev)] = Dial(ev, {p.get("conn") for to, p in ev.fields["sends"]
                                             if int(to) == j and p["type"] == "FOLLOWERINFO"}, popped[j])
        if held.taken is None:
            q, base = queues[j], popped[j]
            limit = base + reach[0] + 1  # the lines k - base <= reach, as far as the front allows
            start = max(held.scanned, base)
            for k, e in enumerate(itertools.islice(q, start - base, limit - base), start):
                if e.kind == "step" and "recv" in e.fields and e.fields["recv"].get("conn") in held.conns:
                    held.taken = k
                    break
                if e.kind == "restart" or _looking_after(e):
                    held.found.append((k, e))
            else:
                held.scanned = max(held.scanned, min(limit, base + len(q)))  # never below a further scan
                if held.scanned < base + len(q):
                    return None  # not taken within LOOKAHEAD lines: assume no GoLooking comes first, for now
                held.taken, held.found = -1, []  # j never takes it: no GoLooking to wait for
        for place, e in held.found:
            if place >= popped[j]:
                return e
        return None

    def closes_learner(ev: Event) -> bool:
        """Is this ``closed`` line a leader's end of the connection the spec knows its learner by?"""
        x = int(ev.fields["peer"])
        return view.learner_of(ev.sid, x) and ev.fields.get("conn") == view.learner_conn.get((ev.sid, x))

    def waits(ev: Event) -> str | None:
        """Why ``ev`` cannot be taken now (None: it can)."""
        s = ev.sid
        if ev.kind == "step" and ev.fields["action"] == "BecomeFollower":
            j = int(ev.fields["params"]["j"])
            hj = head(j)
            if hj is not None and hj.t < ev.t and (hj.kind == "restart" or (_looking_after(hj) and view.vars[j][
                    "state"] != "LOOKING")):
                return f"it connects to {j}, whose GoLooking at {hj.where} comes first"
            later = accepted_after(j, ev)
            if later is not None:
                return (f"it connects to {j}, whose GoLooking at {later.where} comes first: {j} takes this "
                        "connection's FOLLOWERINFO after it")
        if ev.kind == "step" and "recv" in ev.fields:
            j = int(ev.fields["params"]["j"])
            want = (view.packet(ev.fields["recv"]), ev.fields["recv"].get("conn"))
            channel = view.msgs[j, s]
            if not channel:
                return f"it takes {want[0]['type']} from {j}, which nothing sent yet"
            if channel[0] != want:
                p, c = channel[0]
                return (f"it takes {want[0]['type']}{want[0]['zxid']} of connection {want[1]} from {j}, but "
                        f"{p['type']}{p['zxid']} of connection {c} is at the head of that channel")
        if ev.kind == "restart" or (ev.kind == "step" and _looking_after(ev) and view.vars[s]["state"] != "LOOKING"):
            for y in range(1, n + 1):
                if y == s:
                    continue
                hy = head(y)
                known = view.learner_conn.get((y, s))
                at_close = hy is None or (hy.kind == "closed" and hy.fields["peer"] == s
                                          and (not view.learner_of(y, s) or hy.fields.get("conn") == known)) \
                    or hy.kind == "restart" or (hy.kind == "step" and _looking_after(hy))
                if view.learner_of(y, s) and not at_close:
                    return f"its GoLooking waits for leader {y} to reach the close of their connection"
                if view.msgs[s, y] and not at_close and takes_from(y, s):
                    return f"its GoLooking waits for server {y} to take what it sent before"
        if ev.kind == "closed":
            x = int(ev.fields["peer"])
            if closes_learner(ev):
                hx = head(x)
                if hx is not None and not (hx.kind == "restart" or _looking_after(hx)):
                    return f"it drops learner {x}, whose next line is not its GoLooking"
        return None

    retried = False
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
        if best is None and not retried:
            retried, reach[0] = True, sum(len(q) for q in queues.values()) + 1  # again, as far as the logs go
            continue
        retried, reach[0] = False, LOOKAHEAD
        if best is None:
            raise MergeError("no order of the logs is a behaviour of spec/Zab.tla from here; every server waits:\n  "
                             + "\n  ".join(blocked) + f"\n(after {len(steps)} merged steps)")
        if best.kind == "closed" and closes_learner(best):
            take_go_looking(int(best.fields["peer"]))  # the learner's GoLooking, and this close with it
            if head(best.sid) is best:
                take(best)
        elif best.kind == "restart" or (best.kind == "step" and _looking_after(best)
                                        and view.vars[best.sid]["state"] != "LOOKING"):
            take_go_looking(best.sid)
        else:
            take(best)
    return Behaviour(init, steps, n, notes)
