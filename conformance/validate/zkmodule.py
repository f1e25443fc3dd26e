"""The TLA+ module that asks TLC whether spec/Zab.tla can make the sends a ZooKeeper run made: ``VZk``.

Theory of operation
-------------------
Trace validation from outside, as etcd's raft (tla/Traceetcdraft.tla) does it, but with only sends observed. The
module EXTENDS ZabSync (Zab.tla with a client's sync: REQUEST and SYNC, and the leader's ``pendingSyncs``; each of
Zab's actions is taken with ZabSync's ``SyncsDropped``, as its ``ZabStep`` does, and ZabSync's own actions beside
them) and adds three variables:

* ``sent[a][b]``: how many observations of the directed pair a -> b the behaviour has made so far. Every step of
  ``ObsNext`` (ZabSync's SyncNext, with Crash restricted to a server that is not LOOKING) is kept only if, on every
  pair, the packets it appended to ``msgs[a][b]`` are the next observations of that pair (`Agree`; a sync -- DIFF,
  TRUNC or SNAP through NEWLEADER -- against one SYNCGROUP observation by what it leaves the follower with,
  `SyncAgree`). A step that sends nothing (a receive, an election decision, a timeout) is free, within the other two
  constraints.
* ``tags[a][b]``: beside each packet in flight, the observation it was matched to. When b takes the head of
  ``msgs[a][b]``, b must have made every send the proxy read before it read that packet (``need``: the one order
  across connections the recording proves).
* ``rc[x]``: how many of x's observed roles it has taken. A server leaves LOOKING only for its next role (leading, or
  following the server its FOLLOWERINFO went to), and goes back to LOOKING (a timeout, a crash) only when its
  current role ended before the run did.

The module is checked window by window (conformance/validate/zkcheck.py): the observations, channels and roles are in
a data file (`RUN_DATA`, read by ``Datum``: SANY parses only the module), the window in a second (`WINDOW_DATA`):
its start (Init, or a state the window before ended in, in the coordinates of conformance/validate/zkrebase.py,
which ``Z``, ``OV`` and ``ST`` apply to each observation compared, and ``Exact`` checks on every state), the sends it
must reach (``goal``) and may not pass (``cap``), the guide (``Guide``) and a state budget (``Bound``). The
constraint ``Stop`` prints the first state that is ``Done`` (the last window: ``Complete``, every observation made,
every role taken, each server whose last role ended LOOKING) and ends TLC: breadth-first, the end of a shortest
behaviour of the window. When no state gets there, TLC explores everything reachable and stops; the constraint
``Prog`` keeps, in TLC register 1, the longest prefix of the observations (in the proxy's order) any state has made,
and prints that state when the prefix grows: the observation after it is the first one the spec cannot take from
the window's start. ``CanLeave`` is asked before Crash and the timeouts (a role is left only after its sends), and
the ``VIEW`` leaves out Zab's checking variables no action reads.

Three mappings keep the search to what a run can show (docs/zookeeper.md, "What is observed, and what is left to
TLC"): a follower's receive that sends nothing (its sync's packets before NEWLEADER, a COMMIT) is taken as soon as it
can be (``Eager``: no behaviour that makes the run is lost); a spec ACK that repeats the last ACK observed on its pair
matches nothing (``Redundant``: ZooKeeper's learner never sends it, the spec's leader ignores it; a zabref server's
seat, in a mixed ensemble, sends it); and an ACK of a
follower whose role is over is lost (``Over``: a learner killed after it logged a PROPOSAL, before its ACK left), and
so is a leader's send to it once every send to it observed in that role is made (``Lost``: a COMMIT written after
the follower closed the connection).

Bounds come from the run: N servers, MaxTxns the distinct transactions observed, MaxEpoch the greatest epoch a
leader proposed (plus one per leading role that never proposed one), MaxFaults the number of roles (a fault is an
implausible election decision, a timeout of a live connection or a crash; each role begins or ends with at most one).
Zab.tla's switches are ZooKeeper's (spec/README.md, departures 11-13): a follower truncates at TRUNC
(``TruncAtOnce``) and a leader's crash may lose its uncommitted tail (``LeaderLogsLate``) in every version; from
3.9.3 (the recording's META) a follower may leave a sync's uncommitted proposals for UPTODATE (``NewLeaderDefers``).
"""

from __future__ import annotations

import bisect
from typing import Any

from conformance.tla.labels import ActionSignature
from conformance.tla.values import format_value
from conformance.validate.chain import REBASING, VARIABLES
from conformance.zk.observe import Observation
from conformance.zk.versions import defers

__all__ = ["RUN_DATA", "WINDOW_DATA", "config", "goal", "reach", "run_data", "trace_module", "window_data"]

#: The data files beside the module (conformance/tla/datafile.py): the run's observations, and the window's start.
RUN_DATA = "vzk.tlav"
WINDOW_DATA = "window.tlav"
#: What a window's end state holds: Zab's variables and the module's own.
STATE = (*VARIABLES, "pendingSyncs", "sent", "tags", "rc")
#: Zab's checking variables no action reads (ClientRequest reads the size of ``proposed``, which the VIEW keeps).
UNREAD = ("committed", "established")


def _record(o: Any, n: int) -> str:
    sync = o.sync or {"kind": "", "zxid": [0, 0], "txns": [], "newleader": [0, 0]}
    data = o.data if isinstance(o.data, int) else "n/a"
    fields = {"type": o.type, "zxid": o.zxid, "data": data, "cz": o.cz, "cd": o.cd, "ci": o.ci, "s": o.sender,
              "r": o.receiver, "need": o.need, "sk": sync["kind"], "sz": sync["zxid"], "sp": sync["txns"],
              "nl": sync["newleader"], "e": o.early, "up": o.up}
    return format_value(fields)


def _roles(observation: Observation) -> str:
    per = []
    for s in range(1, observation.servers + 1):
        rs = observation.roles.get(s, [])
        per.append("<<" + ", ".join(f'[k |-> "{r.kind}", j |-> {r.leader}, ended |-> {"TRUE" if r.ended else "FALSE"}]'
                                    for r in rs) + ">>")
    return "<<" + ", ".join(per) + ">>"


def _role_counts(observation: Observation, outgoing: bool) -> list[list[list[int]]]:
    """``[x][r][y]``: how many observations of the pair x -> y (``outgoing``) or y -> x the observation holds up to
    the last one on a connection of x's role r, counted on from x's roles before."""
    n = observation.servers
    out = []
    for x in range(1, n + 1):
        made = [0] * n
        per_role = []
        for r in observation.roles.get(x, []):
            conns = set(r.conns)
            for y in range(1, n + 1):
                last = [observation.obs[g - 1].ci for g in observation.channels.get((x, y) if outgoing else (y, x), [])
                        if observation.obs[g - 1].conn in conns]
                made[y - 1] = max([made[y - 1], *last])
            per_role.append(list(made))
        out.append(per_role)
    return out


def role_sends(observation: Observation) -> list[list[list[int]]]:
    """``[x][r][b]``: how many sends x -> b the observation holds up to the end of x's role r (0-based here, 1-based
    in the module): a send on one of a role's connections is made in that role, so the spec's server can leave the
    role only after making them."""
    return _role_counts(observation, outgoing=True)


def role_recvs(observation: Observation) -> list[list[list[int]]]:
    """``[x][r][a]``: how many sends a -> x the observation holds up to the last one on a connection of x's role r
    (0-based here, 1-based in the module): the spec's server takes no packet of a connection after it left the role
    (GoLooking empties its channels), so each was sent while x was still in it (`Due`)."""
    return _role_counts(observation, outgoing=False)


def role_firsts(observation: Observation) -> list[list[int]]:
    """``[x][r]``: the place (`Obs.early`) of x's first send in its role r (0-based here, 1-based in the module), 0
    when it sends nothing in it: a server that leaves LOOKING for that role does so, in the guided search, only when
    every observation placed before it is made (`Lazy`)."""
    out = []
    for x in range(1, observation.servers + 1):
        firsts = []
        for r in observation.roles.get(x, []):
            conns = set(r.conns)
            places = [o.early for o in observation.obs if o.sender == x and o.conn in conns]
            firsts.append(min(places, default=0))
        out.append(firsts)
    return out


def role_claims(observation: Observation) -> list[list[list[int]]]:
    """``[x][r]``: the last zxid of x's history when x begins the role after its role r (0-based here, 1-based in
    the module), as that role shows it, or [-1, -1] when it does not (its connection ended first; the last role has
    no next): what x's ACKEPOCH names when that role follows, and when it leads, the last transaction of its first
    sync (the sync's own zxid when it carries none). A server's history only grows until then (a follower's is
    truncated only by a sync, after its ACKEPOCH; a leader proposes nothing between its roles), so a follower whose
    role is over never logs past that zxid, a server goes LOOKING with it as its last (`Guide`, `Claimed`), and a
    leader whose next role syncs more than it sent first proposes the rest unseen, before its role is over (`Due`:
    3.9.5, a leader paused with writes it logged and never sent, which its DIFF carries when it leads again)."""
    # one pass over the observations: the first ACKEPOCH, and the first sync, each server sent on each connection
    firsts: dict[tuple[int, int, bool], int] = {}
    for k, o in enumerate(observation.obs):
        if o.type == "ACKEPOCH":
            firsts.setdefault((o.sender, o.conn, True), k)
        if o.sync is not None:
            firsts.setdefault((o.sender, o.conn, False), k)
    out = []
    for x in range(1, observation.servers + 1):
        roles = observation.roles.get(x, [])
        claims = []
        for nxt in roles[1:]:
            shown = [firsts[key] for c in nxt.conns if (key := (x, c, nxt.kind == "F")) in firsts]
            first = observation.obs[min(shown)] if shown else None
            if first is None:
                claims.append([-1, -1])
            elif first.sync is None:
                claims.append(list(first.zxid))
            else:
                claims.append(list(max([first.sync["zxid"], *(t["zxid"] for t in first.sync["txns"])])))
        out.append([*claims, [-1, -1]])  # the last role has no next
    return out


def _channels(observation: Observation) -> str:
    n = observation.servers
    return format_value([[observation.channels.get((a, b), []) for b in range(1, n + 1)] for a in range(1, n + 1)])


def sync_first(observation: Observation) -> list[int]:
    """The values whose first observation is in a sync (a DIFF's, TRUNC's or SNAP's proposals), not a PROPOSAL, and
    those never carried at all (`Observation.unseen`): the only transactions a leader can have proposed without
    sending them to anyone (module `ClientRequest` arm)."""
    seen: set[int] = set()
    first: list[int] = []
    for o in observation.obs:
        if o.type == "PROPOSAL" and isinstance(o.data, int):
            seen.add(o.data)
        elif o.sync is not None:
            for t in o.sync["txns"]:
                if t["value"] not in seen:
                    seen.add(t["value"])
                    first.append(t["value"])
    return sorted(first + observation.unseen)


def run_data(observation: Observation) -> list[str]:
    """The lines of `RUN_DATA`: the observations (line g: observation g), then Chan, Roles, RoleSends, the set of
    values first observed in a sync, RoleClaims, RoleRecvs and RoleFirsts."""
    n = observation.servers
    return [*(_record(o, n) for o in observation.obs), _channels(observation), _roles(observation),
            format_value(role_sends(observation)), format_value({"$set": sync_first(observation)}),
            format_value(role_claims(observation)), format_value(role_recvs(observation)),
            format_value(role_firsts(observation))]


def goal(observation: Observation, upto: int) -> list[list[int]]:
    """``[a][b]``: how many of the pair a -> b's observations are among the first ``upto`` (a window's end)."""
    n = observation.servers  # a channel lists its observations' global indexes in order
    return [[bisect.bisect_right(observation.channels.get((a, b), []), upto) for b in range(1, n + 1)]
            for a in range(1, n + 1)]


def reach(observation: Observation, hi: int) -> list[list[int]]:
    """``[a][b]``: how many of the pair a -> b's observations a window that ends at observation ``hi`` may make: those
    placed (`Obs.early`) at ``hi`` or before, every one read by then among them. One step of a leader sends on every
    learner's connection, and the proxy may read one copy far later than another (a cut holds the link; places are
    non-decreasing along a connection): a window capped where the proxy read them could not take that step at all,
    whatever its search, and a healthy run was rejected with a window smaller than the gap."""
    n = observation.servers
    out = [[0] * n for _ in range(n)]
    for (a, b), gs in observation.channels.items():
        k = 0
        while k < len(gs) and observation.obs[gs[k] - 1].early <= hi:
            k += 1
        out[a - 1][b - 1] = k
    return out


def window_data(start: str | None, goal_counts: list[list[int]], cap: list[list[int]], *, final: bool, lag: int = 0,
                slack: int = 0, exempt: int = 0, budget: int = 0, coords: dict[str, Any] | None = None) -> list[str]:
    """The lines of `WINDOW_DATA`: what the window is (from Init or from ``start``, a state TLC printed as the end of
    the window before, one line; the counts of sends it must reach, and those it may not pass; whether it is the
    last; the search's guide, lag observations, 0 for none, with packets of observations up to ``exempt`` exempt,
    and the slack of its order (`MakesFrontier`);
    the most distinct states it may explore, 0 for no limit; ``coords``, the window's coordinates, `Rebase`'s
    window_fields), then the start."""
    coords = coords or {"anchors": [[] for _ in goal_counts], "epoch": -1, "shift": 0, "values": 0}
    head = format_value({"init": start is None, "final": final, "goal": goal_counts, "cap": cap, "lag": lag,
                         "slack": slack, "exempt": exempt, "budget": budget, **coords})
    return [head, "[none |-> TRUE]" if start is None else start]


#: The actions of Zab.tla that always take their server i back to LOOKING (GoLooking(i)).
LEAVES = ("Crash", "FollowerTimeout", "LeaderTimeout")


def _obs_next(actions: list[ActionSignature]) -> str:
    arms = []
    for a in actions:
        name, params = a.name, a.param_names
        binder = f"\\E {', '.join(params)} \\in Server : " if params else ""
        call = f"{name}({', '.join(params)})" if params else name
        if name in LEAVES:  # CanLeave first: TLC then skips building a successor RolesNext would refuse
            call = "CanLeave(i) /\\ " + ("state[i] /= LOOKING /\\ " if name == "Crash" else "") + call
        if name == "ClientRequest":
            call = "Proposes(i) /\\ " + call
        if a.with_:  # ZabSync's ZabStep, one of Next's actions at a time: with SyncsDropped
            call += f" /\\ {a.with_}"
        arms.append(f"    \\/ {binder}{call}")
    return "ObsNext ==\n" + "\n".join(arms)


def trace_module(observation: Observation, actions: list[ActionSignature]) -> str:
    """The text of module VZk for ``observation`` (its values in `run_data`, the window's in `window_data`);
    ``actions``: ZabSync.tla's SyncNext's (`conformance.tla.labels.module_next`: Zab.tla's actions, each with
    SyncsDropped, and ZabSync's own)."""
    total = len(observation.obs)
    seats = ", ".join(map(str, sorted(observation.zabref)))
    start = "\n".join(f"       /\\ {v} = Start.{v}" for v in STATE)
    end = ", ".join(f"{v} |-> {v}" for v in STATE)
    place = ", ".join("Cardinality(proposed)" if v == "proposed" else v for v in STATE if v not in UNREAD)
    return f"""---------------------------- MODULE VZk ----------------------------
\\* Generated by conformance/validate/zkmodule.py from a ZooKeeper recording: {observation.recording}
\\* One record an observed send (conformance/zk/observe.py), read from {RUN_DATA}. Do not edit.
EXTENDS ZabSync, TLC, ZabrefData
VARIABLES sent, tags, rc

Total == {total}
O(g) == Datum("{RUN_DATA}", g)
\\* Chan[a][b]: the observations of the pair a -> b, in order (global indexes).
Chan == Datum("{RUN_DATA}", {total + 1})
\\* Roles[x]: x's observed roles, in order: leads (k = "L") or follows j (k = "F"); ended before the run did.
Roles == Datum("{RUN_DATA}", {total + 2})
\\* RoleSends[x][r][b]: the sends x -> b observed up to the end of x's role r.
RoleSends == Datum("{RUN_DATA}", {total + 3})
\\* The window: from Init or from Start; the counts of sends it must reach (goal); whether it is the run's last.
Win == Datum("{WINDOW_DATA}", 1)
Start == Datum("{WINDOW_DATA}", 2)
SyncHeads == {{"DIFF", "TRUNC", "SNAP"}}
\\* ZooKeeper's follower truncates its log when it takes TRUNC (Zab.tla, TruncAtOnce), and its leader proposes before it
\\* logs, so that a crash may lose its uncommitted tail (LeaderLogsLate): the cfg overrides both with these
ZooKeeperTruncAtOnce == TRUE
ZooKeeperLeaderLogsLate == TRUE
\\* ... and from 3.9.3 its follower may leave a sync's uncommitted proposals for UPTODATE (NewLeaderDefers): the cfg
\\* overrides it with this for a recording of such a version
ZooKeeperNewLeaderDefers == TRUE
\\* The seats zabref servers took (a mixed ensemble): a ZooKeeper leader's UPTODATE carries no commit point (zxid -1);
\\* a zabref follower takes the point its sync named (the sync head's zxid, then each COMMIT of the sync), which
\\* the observation of that UPTODATE holds (`up`), and ACKs each transaction of its epoch after it; a ZooKeeper
\\* learner takes its point from the sync's COMMITs too, which the spec's point stands for. The cfg overrides Zab.tla's
\\* UptodatePoint with this.
ZabrefSeats == {{{seats}}}
\\* ZabSync's bound on the syncs under way (a model checker's bound) is no bound here: each ClientSync sends a REQUEST
\\* that must be an observation, so the recording bounds them, and counting them in every state (a SelectSeq of every
\\* channel) was nine tenths of TLC's time on a five-server run; the cfg overrides SyncsUnderWay with this
ZooKeeperSyncsUnderWay == 0

\\* x may leave its role (a timeout, a crash, a packet that sends it back to LOOKING) only if the role ended before the
\\* run did, after every send observed in it.
CanLeave(x) == /\\ rc[x] >= 1 /\\ Roles[x][rc[x]].ended
               /\\ \\A b \\in Server : sent[x][b] >= RoleSends[x][rc[x]][b]

\\* SyncFirst: the values first observed in a sync, not in a PROPOSAL, or never carried (a zxid an ACKEPOCH names).
\\* A ClientRequest that sends to no learner is observed nowhere; it numbers its value before every later one, which
\\* an observation numbers before it unless the value first shows in a sync or nowhere: so it is taken only for such
\\* a value (else no behaviour with it makes the run).
SyncFirst == Datum("{RUN_DATA}", {total + 4})
\\* RoleClaims[x][r]: the last zxid of x's history as its role after its role r shows it (its ACKEPOCH, or as a
\\* leader its first sync); <<-1, -1>>: none (`Guide`, `role_claims`).
RoleClaims == Datum("{RUN_DATA}", {total + 5})
\\* RoleRecvs[x][r][a]: the sends a -> x observed up to the end of x's role r; RoleFirsts[x][r]: the place of x's first
\\* send in its role r, 0 for none (`Due`, `Lazy`).
RoleRecvs == Datum("{RUN_DATA}", {total + 6})
RoleFirsts == Datum("{RUN_DATA}", {total + 7})
Proposes(i) == \\/ \\E f \\in Server : learnerPhase[i][f] \\in ForwardingPhases
               \\/ Cardinality(proposed) + 1 + Win.values \\in SyncFirst

{_obs_next(actions)}

\\* The packets a step appended to msgs[a][b] (a step that empties a channel sends nothing on it).
NewSends(a, b) == IF Len(msgs'[a][b]) > Len(msgs[a][b])
                  THEN SubSeq(msgs'[a][b], Len(msgs[a][b]) + 1, Len(msgs'[a][b])) ELSE <<>>

\\* An observation's zxids and values in the window's coordinates (conformance/validate/zkrebase.py): counters of
\\* Win.epoch lowered by Win.shift (those of dropped transactions below 0), values by Win.values.
Z(z) == IF z[1] = Win.epoch /\\ z[2] > 0
        THEN IF z[2] > Win.shift THEN <<z[1], z[2] - Win.shift>> ELSE <<z[1], z[2] - Win.shift - 1>>
        ELSE z
OV(o) == IF o.type = "PROPOSAL" THEN o.data - Win.values ELSE o.data
ST(txns) == [k \\in 1 .. Len(txns) |-> [zxid |-> Z(txns[k].zxid), value |-> txns[k].value - Win.values]]

\\* (ZabrefSeats, above) A zabref follower's commit point at a ZooKeeper leader's UPTODATE, in the window's coordinates.
ZooKeeperUptodatePoint(i, j, z) ==
    IF i \\in ZabrefSeats /\\ j \\notin ZabrefSeats
    THEN IF tags[j][i] /= <<>> /\\ Head(tags[j][i]) > 0 THEN Z(O(Head(tags[j][i])).up) ELSE <<0, 0>>
    ELSE z

\\* The spec's packet p is the observed send o (the fields o does not compare are ZooKeeper's own).
Agree(p, o) == /\\ p.type = o.type
               /\\ IF o.cz THEN p.zxid = Z(o.zxid) ELSE TRUE
               /\\ IF o.cd THEN p.data = OV(o) ELSE TRUE

NumLE(h, z) == Cardinality({{k \\in 1 .. Len(h) : ZxidLE(h[k].zxid, z)}})

\\* The spec's sync ``new`` from leader l to follower f and the observed one o leave f with the same history: the
\\* leader's (every sync of the spec does). DIFF keeps f's history and appends o's proposals; TRUNC(z) cuts it after z
\\* first; SNAP replaces it with the leader's up to the snapshot's zxid, and o's proposals are the rest.
SyncAgree(l, f, new, o) ==
    /\\ new[Len(new)].type = "NEWLEADER" /\\ new[Len(new)].zxid = Z(o.nl)
    /\\ LET hl == history[l]
           hf == history[f]
           sp == ST(o.sp)
       IN  CASE o.sk = "DIFF" -> hf \\o sp = hl
             [] o.sk = "TRUNC" -> SubSeq(hf, 1, NumLE(hf, Z(o.sz))) \\o sp = hl
             [] o.sk = "SNAP" -> SubSeq(hl, NumLE(hl, Z(o.sz)) + 1, Len(hl)) = sp
             [] OTHER -> FALSE

\\* A step's ACKs on a -> b that acknowledge no more than the ACK last observed on that pair: the spec's ACK is
\\* cumulative (LeaderProcessACK keeps the greatest), so its leader takes them and changes nothing, and ZooKeeper's
\\* learner does not send them again (the spec's follower sends them at UPTODATE for the transactions after the commit
\\* point; a 3.8 learner ACKed them when NEWLEADER logged them, before its ACK of NEWLEADER). They match no
\\* observation and make none. A zabref server sends each ACK its spec step makes: from its seat it is an observation
\\* like any other.
Redundant(a, new, c, ch) == /\\ a \\notin ZabrefSeats
                            /\\ new /= <<>> /\\ c > 0 /\\ O(ch[c]).type = "ACK"
                            /\\ \\A k \\in 1 .. Len(new) : /\\ new[k].type = "ACK" /\\ new[k].zxid[2] > 0
                                                      /\\ ZxidLE(new[k].zxid, Z(O(ch[c]).zxid))

\\* x follows in a role that ended before the run did, and has made every send observed in it.
Over(x) == state[x] = FOLLOWING /\\ CanLeave(x)

Acks(new) == \\A k \\in 1 .. Len(new) : new[k].type = "ACK"

\\* a's sends to b, a follower whose role is over (`Over`), once every send a -> b observed in that role is made:
\\* lost, never taken. A leader that read its follower's ACK commits and writes the COMMIT after the follower closed
\\* the connection (the proxy leaves such bytes out: AFTER-CLOSE); the spec's leader sends it while the follower is
\\* still in its role, which the follower leaves before taking it.
Lost(a, b) == Over(b) /\\ sent[a][b] >= RoleRecvs[b][rc[b]][a]

\\* The new value of sent[a][b] after this step, or -1 when its sends on a -> b are not the next observations. An ACK
\\* of a follower whose role is over (`Over`: every send observed in it made) is lost: tagged 0, never taken, gone
\\* when a GoLooking empties the channel. A follower killed after it logged a PROPOSAL and before the proxy read its
\\* ACK is such a run: the kernel resets a killed process's connections, and what was still in its send buffer is
\\* gone (its ACKEPOCH later names the transaction). A leader's sends to such a follower are lost too (`Lost`).
Adv(a, b) ==
    LET new == NewSends(a, b)
        c == sent[a][b]
        ch == Chan[a][b]
    IN  IF new = <<>> THEN c
        ELSE IF Over(a) /\\ Acks(new) THEN c
        ELSE IF Lost(a, b) THEN c
        ELSE IF Redundant(a, new, c, ch) THEN c
        ELSE IF c + 1 > Len(ch) THEN -1
        ELSE IF new[1].type \\in SyncHeads
        THEN IF O(ch[c + 1]).type = "SYNCGROUP" /\\ SyncAgree(a, b, new, O(ch[c + 1])) THEN c + 1 ELSE -1
        ELSE IF c + Len(new) <= Len(ch) /\\ \\A k \\in 1 .. Len(new) : Agree(new[k], O(ch[c + k]))
        THEN c + Len(new) ELSE -1

GoesLooking(x) == state[x] /= LOOKING /\\ state'[x] = LOOKING
Leaves(x) == state[x] = LOOKING /\\ state'[x] /= LOOKING

\\* The observation each packet in flight was matched to (a sync's packets all to its SYNCGROUP observation; a redundant
\\* ACK to the ACK it repeats; a lost packet to none: 0).
TagsNext == [a \\in Server |-> [b \\in Server |->
    LET new == NewSends(a, b)
        c == sent[a][b]
    IN  IF new /= <<>> /\\ ((Over(a) /\\ Acks(new)) \\/ Lost(a, b)) THEN tags[a][b] \\o [k \\in 1 .. Len(new) |-> 0]
        ELSE IF new /= <<>> /\\ Redundant(a, new, c, Chan[a][b])
        THEN tags[a][b] \\o [k \\in 1 .. Len(new) |-> Chan[a][b][c]]
        ELSE IF new /= <<>>
        THEN tags[a][b] \\o [k \\in 1 .. Len(new) |->
                 IF new[1].type \\in SyncHeads THEN Chan[a][b][c + 1] ELSE Chan[a][b][c + k]]
        ELSE IF msgs'[a][b] = <<>> THEN <<>>
        ELSE IF Len(msgs'[a][b]) < Len(msgs[a][b]) THEN Tail(tags[a][b])
        ELSE tags[a][b]]]

\\* b takes the head of msgs[a][b] in this step.
Received(a, b) == msgs[a][b] /= <<>> /\\ msgs'[a][b] = Tail(msgs[a][b]) /\\ ~GoesLooking(a) /\\ ~GoesLooking(b)

\\* A server takes a packet only after every send of its own that the proxy read before that packet.
\\* A lost packet (tag 0) is never taken.
Causal == \\A a, b \\in Server : Received(a, b) =>
              /\\ Head(tags[a][b]) > 0
              /\\ LET need == O(Head(tags[a][b])).need IN \\A k \\in Server : sent[b][k] >= need[k]

\\* Follower i can take a packet that makes it send nothing: one of its synchronization (DIFF, TRUNC, SNAP, or a
\\* PROPOSAL or COMMIT before NEWLEADER), or a COMMIT or a client's SYNC in BROADCAST. Such a receive changes only i's
\\* staged history or lastCommitted and the channel's head, which nothing observed reads (a follower's lastCommitted
\\* is read by no step that sends what a ZooKeeper run is compared on: UPTODATE's and a DIFF's zxids are not compared,
\\* and a leader commits its whole history at NEWLEADER's quorum before it sends a COMMIT), and it stays possible
\\* until it is taken or a GoLooking empties the channel; so the behaviours that take it at once make every run the
\\* others make (docs/zookeeper.md, "Eager receives"), and `Eager` makes it the next step. A DIFF of hundreds of
\\* transactions to a learner that ACKs NEWLEADER hundreds of observations later was that many hidden steps, each free
\\* to come anywhere in between, and a lagging learner's COMMITs the same: a search of their product.
Quiet(i) == /\\ state[i] = FOLLOWING
            /\\ msgs[leader[i]][i] /= <<>>
            /\\ \\/ zabState[i] = SYNCHRONIZATION
                  /\\ Head(msgs[leader[i]][i]).type \\in {{"DIFF", "TRUNC", "SNAP", "PROPOSAL", "COMMIT"}}
               \\/ zabState[i] = BROADCAST /\\ Head(msgs[leader[i]][i]).type \\in {{"COMMIT", "SYNC"}}
            /\\ Head(tags[leader[i]][i]) > 0
            /\\ \\A k \\in Server : sent[i][k] >= O(Head(tags[leader[i]][i])).need[k]
\\* Leader i can take an ACK of learner j that acknowledges no more than i has committed: it raises only
\\* ackIndex[i][j] to a point at or below lastCommitted[i], which no quorum above the commit point counts (the commit
\\* point never falls in a role), sends nothing, and stays possible until taken or a GoLooking empties the channel. It
\\* is a leader's quiet receive, taken at once too: with five servers, each transaction's ACKs past a quorum were
\\* two hidden steps free to come anywhere in the window.
QuietAck(i, j) == /\\ state[i] = LEADING /\\ zabState[i] = BROADCAST
                  /\\ learnerPhase[i][j] \\in {{"ACKNEWLEADER", "UPTODATE"}}
                  /\\ msgs[j][i] /= <<>> /\\ Head(msgs[j][i]).type = "ACK" /\\ Head(msgs[j][i]).zxid[2] > 0
                  /\\ IndexOf(history[i], Head(msgs[j][i]).zxid) <= lastCommitted[i]
                  /\\ Head(tags[j][i]) > 0
                  /\\ \\A k \\in Server : sent[i][k] >= O(Head(tags[j][i])).need[k]
QuietNow == \\E i \\in Server : Quiet(i) \\/ \\E j \\in Server : QuietAck(i, j)
Eager == QuietNow =>
             \\E i \\in Server : \\/ Quiet(i) /\\ Received(leader[i], i)
                             \\/ \\E j \\in Server : QuietAck(i, j) /\\ Received(j, i)

\\* The first observation (in the proxy's order) this state has not made; Total + 1 when it made them all.
Frontier == LET next(a, b) == IF sent[a][b] < Len(Chan[a][b]) THEN Chan[a][b][sent[a][b] + 1] ELSE Total + 1
                firsts == {{next(a, b) : a, b \\in Server}}
            IN  CHOOSE g \\in firsts : \\A g2 \\in firsts : g <= g2

\\* The first place (`Obs.early`) of the observations not made (`InOrder`).
Front == LET next(a, b) == IF sent[a][b] < Len(Chan[a][b]) THEN O(Chan[a][b][sent[a][b] + 1]).e ELSE Total + 1
             firsts == {{next(a, b) : a, b \\in Server}}
         IN  CHOOSE g \\in firsts : \\A g2 \\in firsts : g <= g2

\\* The guide's order of steps (with Win.lag > 0; docs/zookeeper.md, "The guide": *order*). TLC has no partial-order
\\* reduction, so the independent progress of four learners (each one's PROPOSALs taken and ACKed on its own
\\* connection) and of the leader's receives of their ACKs was a product of interleavings that a five-server window
\\* spent its whole budget on. The guide keeps one interleaving of those the run shows: a step that makes observations
\\* makes one placed first among those not made (`MakesFrontier`: by places, not by where the proxy read them, as a
\\* leader's answer to a client's sync is read after the next PROPOSAL to another learner and must be sent before the
\\* same PROPOSAL to its own), and a leader takes its learners' ACKs that are not quiet in the order the proxy read
\\* them (`AcksInOrder`). A behaviour it finds is still a behaviour of the spec; one it misses (a leader whose threads
\\* took two ACKs in the other order, where that order shows) is left to the search without the guide. The guide's
\\* second try lets a step's first observation be placed up to Win.slack past the first not made (zkcheck.SLACK).
MakesFrontier == (\\E a, b \\in Server : sent'[a][b] > sent[a][b]) =>
                     \\E a, b \\in Server : /\\ sent'[a][b] > sent[a][b]
                                       /\\ O(Chan[a][b][sent[a][b] + 1]).e <= Front + Win.slack
LoudAck(j, i) == /\\ msgs[j][i] /= <<>> /\\ Head(msgs[j][i]).type = "ACK" /\\ Head(tags[j][i]) > 0
                 /\\ state[i] = LEADING /\\ ~QuietAck(i, j)
AcksInOrder == \\A i, j \\in Server : LoudAck(j, i) /\\ Received(j, i) =>
                   \\A k \\in Server \\ {{j}} : LoudAck(k, i) => Head(tags[k][i]) > Head(tags[j][i])
\\* Roles change as late as the run allows, and leaving one as early: a server leaves LOOKING for its next role only
\\* when every observation placed before its first send in it is made (`Lazy`); a server whose role is over in the
\\* run goes LOOKING (a timeout or a crash) at the first step it can (`Prompt`), once it made every send of the role
\\* and every send to it was made (the spec's server takes none after it left: GoLooking empties its channels), and its
\\* history is what its next ACKEPOCH names. Between those two points its election was a free hidden step in every
\\* state of the window, a product over the servers that a five-server leader's crash spent a search's budget on.
Due(x) == /\\ state[x] /= LOOKING /\\ CanLeave(x)
          /\\ \\A a \\in Server : sent[a][x] >= RoleRecvs[x][rc[x]][a]
          /\\ LET c == RoleClaims[x][rc[x]] IN c[1] < 0 \\/ LastZxid(history[x]) = Z(c)
Prompt == (\\E x \\in Server : Due(x)) /\\ ~QuietNow => \\E x \\in Server : Due(x) /\\ GoesLooking(x)
Lazy == \\A x \\in Server : Leaves(x) => RoleFirsts[x][rc[x] + 1] <= Front
\\* A crash that loses no transaction leaves what a timeout leaves but the volatile commit point (which no observation
\\* reads) and one fault more: the guided search goes LOOKING by a timeout then, not by both.
Timely == \\A x \\in Server : GoesLooking(x) /\\ Len(history'[x]) = Len(history[x]) =>
                                lastCommitted'[x] = lastCommitted[x]
\\* A ZooKeeper leader's own ACK (Zab.tla's LeaderOwnACK: its log write of what it proposed is durable) comes at
\\* once, for all it proposed, unless a quiet receive or a server's leaving comes first (`OwnAckAtOnce`): so the ACK
\\* that follows counts the leader as the seed's leader is counted. Left free, it was a hidden step after every
\\* proposal, free to come anywhere before the proposal's COMMIT. A run whose leader logged later than a learner's ACK
\\* (a COMMIT sent only after the next PROPOSAL) is left to the search without the guide.
OwnDue(i) == LeaderLogsLate /\\ state[i] = LEADING /\\ zabState[i] = BROADCAST /\\ ackIndex[i][i] < Len(history[i])
OwnAckAtOnce == (\\E i \\in Server : OwnDue(i)) /\\ ~QuietNow /\\ ~(\\E x \\in Server : Due(x)) =>
                    \\E i \\in Server : OwnDue(i) /\\ (ackIndex'[i][i] = Len(history[i]) \\/ GoesLooking(i))
InOrder == MakesFrontier /\\ AcksInOrder /\\ Prompt /\\ Lazy /\\ Timely /\\ OwnAckAtOnce

RolesNext ==
    /\\ \\A x \\in Server : GoesLooking(x) => CanLeave(x)
    /\\ \\A x \\in Server : Leaves(x) =>
          /\\ rc[x] < Len(Roles[x])
          /\\ LET r == Roles[x][rc[x] + 1]
             IN  IF r.k = "L" THEN state'[x] = LEADING ELSE state'[x] = FOLLOWING /\\ leader'[x] = r.j
    /\\ rc' = [x \\in Server |-> IF Leaves(x) THEN rc[x] + 1 ELSE rc[x]]

TraceInit ==
    IF Win.init
    THEN /\\ SyncInit
         /\\ sent = [a \\in Server |-> [b \\in Server |-> 0]]
         /\\ tags = [a \\in Server |-> [b \\in Server |-> <<>>]]
         /\\ rc = [x \\in Server |-> 0]
    ELSE
{start}

TraceNext ==
    /\\ ObsNext
    /\\ LET adv == [a \\in Server |-> [b \\in Server |-> Adv(a, b)]]
       IN  /\\ \\A a, b \\in Server : adv[a][b] >= 0
           /\\ sent' = adv
    /\\ RolesNext
    /\\ Causal
    /\\ Eager
    /\\ Win.lag = 0 \\/ InOrder
    /\\ tags' = TagsNext

Complete ==
    /\\ \\A a, b \\in Server : sent[a][b] = Len(Chan[a][b])
    /\\ \\A x \\in Server : rc[x] = Len(Roles[x])
    /\\ \\A x \\in Server : Len(Roles[x]) > 0 /\\ Roles[x][Len(Roles[x])].ended => state[x] = LOOKING

\\* A window is done when its state made the window's sends; the last window when the whole run is (Complete).
Done == IF Win.final THEN Complete ELSE \\A a, b \\in Server : sent[a][b] >= Win.goal[a][b]

\\* The first state that is done is printed, whole, and ends the search: the next window starts from it.
Stop == IF Done
        THEN /\\ PrintT(<<"zkend", [{end}]>>)
             /\\ TLCSet("exit", TRUE)
        ELSE TRUE

\\* The search's guide (docs/zookeeper.md, "Windows"), with Win.lag > 0: the order of steps above (`InOrder`), and a
\\* leader takes every packet but an ACK sent to it in the window before the first observation not made is Win.lag
\\* past it (a follower's wait behind its one channel, and a server that sends nothing, paused or cut off, is not
\\* hurried; ACKs are taken in the proxy's order, `AcksInOrder`). Measured from the frontier, not from the leader's own
\\* latest send: one step of a leader sends on every learner's connection, and the proxy may read one of them many
\\* observations after the others. The bound of every search: no pair's sends go past Win.cap; at most Win.budget
\\* distinct states (0: no limit), after which the search stops and says so.
\\* Sends are measured by the observations' places (`early`, conformance/zk/observe.py: a packet the proxy read late,
\\* a cut held it, placed with the same packet to another learner, the PROPOSAL its ACK answers, or the next one on
\\* its own connection), receives by where the proxy read them (a packet is taken after it was read).
\\* A follower whose role is over logs nothing past what its next ACKEPOCH names (`role_claims`), and a server that
\\* left its role goes LOOKING with exactly that as its last zxid (nothing changes its history until it sends that
\\* ACKEPOCH, which `Agree` compares the same way): in a cut or a pause, the PROPOSALs in flight to the follower are
\\* not each taken at every point of the leader's progress, nor does it leave before it took those it logged.
Claimed(x) == LET c == RoleClaims[x][rc[x]]
              IN  \\/ c[1] < 0
                  \\/ state[x] = LOOKING /\\ LastZxid(history[x]) = Z(c)
                  \\/ state[x] /= LOOKING /\\ ZxidLE(LastZxid(history[x]), Z(c))
Guide == Win.lag = 0 \\/ /\\ \\A x \\in Server : Over(x) \\/ (state[x] = LOOKING /\\ rc[x] >= 1) => Claimed(x)
                         /\\ \\A a, b \\in Server : state[b] /= LEADING \\/ tags[a][b] = <<>>
                                                 \\/ Head(msgs[a][b]).type = "ACK"
                                                 \\/ Head(tags[a][b]) <= Win.exempt
                                                 \\/ Head(tags[a][b]) + Win.lag >= Frontier
Bound == /\\ \\A a, b \\in Server : sent[a][b] <= Win.cap[a][b]
         /\\ IF Win.budget > 0 /\\ TLCGet("distinct") >= Win.budget
            THEN PrintT(<<"zkbudget", TLCGet("distinct")>>) /\\ TLCSet("exit", TRUE)
            ELSE TRUE

{REBASING}
\\* The window's coordinates hold in every state it reaches; else the window is checked again without dropping.
Exact == IF Rebased(Win.anchors) THEN TRUE ELSE PrintT(<<"zkinexact">>) /\\ TLCSet("exit", TRUE)

\\* What TLC tells states apart by: every variable a step or this module reads. Zab's checking variables are read by no
\\* action but ClientRequest, which reads the size of `proposed` only; they grow with the run, and fingerprinting them
\\* was most of the cost of a state in a long run's windows.
Place == <<{place}>>

ASSUME TLCSet(1, 0)
Prog == IF Frontier > TLCGet(1)
        THEN /\\ TLCSet(1, Frontier)
             /\\ PrintT(<<"zkprogress", Frontier, rc, state, zabState, leader, acceptedEpoch, currentEpoch,
                        lastCommitted, history, msgs>>)
        ELSE TRUE
=============================================================================
"""


def config(observation: Observation) -> str:
    roles = sum(len(r) for r in observation.roles.values())
    syncs = sum(1 for o in observation.obs if o.type == "REQUEST")  # each ClientSync makes one: no more can be
    # (and the bound is not counted: SyncsUnderWay <- ZooKeeperSyncsUnderWay)
    deferral = "    NewLeaderDefers <- ZooKeeperNewLeaderDefers\n" if defers(observation.version) else ""
    return (f"CONSTANTS\n    N = {observation.servers}\n    MaxEpoch = {observation.max_epoch}\n"
            f"    MaxTxns = {observation.txns}\n    MaxFaults = {roles + 1}\n    MaxSyncs = {syncs}\n"
            "    TruncAtOnce <- ZooKeeperTruncAtOnce\n    LeaderLogsLate <- ZooKeeperLeaderLogsLate\n"
            "    SyncsUnderWay <- ZooKeeperSyncsUnderWay\n    UptodatePoint <- ZooKeeperUptodatePoint\n"
            f"{deferral}INIT TraceInit\nNEXT TraceNext\nCONSTRAINT Exact Prog Stop Guide Bound\nVIEW Place\n")
