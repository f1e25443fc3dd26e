"""Election notifications of a ZooKeeper run held against spec/FastLeaderElection.tla, from outside: ``VFle``.

Theory of operation
-------------------
The proxy sees what each server's QuorumCnxManager put on the wire (`conformance.zk.elections`). Module ``VFle``
EXTENDS FastLeaderElection (all servers from an empty data dir: zxid <<0, 0>>, epoch 0; the notifications
`conformance.zk.elections` keeps, a whole run's; MaxFaults from the rounds and the restarts the notifications show,
`max_faults`) and keeps apart, in each channel ``electionMsgs[i][j]``, the notifications
that crossed the wire -- its first ``OnWire(i, j)``, whose observation numbers ``wire[i][j]`` holds -- from those still
in i's send queue:

* ``Transmit(i, j)``: the oldest queued notification of i -> j crosses the wire; it must be the next observation in
  the proxy's order (``next``), addressed i -> j, with the same state, leader, zxid, round and peerEpoch. The proxy's
  order is total, so the wire order of the whole run is the recording's.
Four widenings: two are QuorumCnxManager's (the transport that FastLeaderElection.tla's channels abstract), one is
FastLeaderElection.java's threads, one is Zab's; they live here, for ZooKeeper's runs, not in the spec zabref's servers
are checked against:

* ``DropQueued(i, j)``: with two or more notifications queued for j, the oldest is dropped.
  `QuorumCnxManager.addToSendQueue` keeps one message per peer while the connection is not there (``SEND_CAPACITY``
  is 1: a full queue loses its oldest), so a server that voted twice before j was up sends j only its last vote.
  FastLeaderElection.tla's channels lose nothing (docs/zookeeper.md, "Election notifications").
* ``ResendLast(i, j)``: the last notification that crossed the wire to j goes first again. QuorumCnxManager's
  SendWorker does so when it starts with an empty queue ("Duplicate messages are handled correctly by the peer",
  its comment), so a peer can get the same vote twice with no step of the election between.

* ``LateReply(i, j)``: a decided server's answer to a LOOKING peer crosses the wire after a LOOKING notification of a
  later round that it queued after it. FastLeaderElection.java's WorkerReceiver reads the server's state (not
  LOOKING), then builds the answer from the current vote and queues it; meanwhile the QuorumPeer thread may have gone
  back to LOOKING and queued its new round's notifications (3.9.5, a 60 s fault run: 2's FOLLOWING(3) of round 1
  after its own LOOKING votes of round 2). FastLeaderElection.tla answers in the step that takes the notification.

The three are taken only when the next observation is on their pair (i -> j), and a resend at most once before
each: they change nothing but i's queue for j, so taking them just before that queue's next notification crosses the
wire loses no behaviour of interest and keeps TLC's search small (five servers' elections too).

* ``ZabData`` (Zab's, between elections; with ``VoteEpoch`` and ``Crash``): the spec's ``InitVote`` is replaced
  (VFle.cfg) by the vote of the data a server has now (``dataZxid``, ``dataEpoch``). A decided server's data
  changes as Zab gives it transactions and epochs, or a down server's (its restart reads what its disk kept), to a
  zxid some notification of the run carries and an epoch some notification carries, no older; a decided server's
  vote takes its new epoch (``VoteEpoch``: QuorumPeer.updateElectionVote); a restart is ``Crash`` then
  FastLeaderElection's ``Restart``.
* Every step of FastLeaderElection's ``Next`` is kept, except that a server takes the head of a channel only once
  it crossed the wire (``OnWire >= 1``).

**The guide** (``Focus``). FastLeaderElection's steps are each one server's (it takes from its own channels, changes
its own variables, queues its own notifications; a restart also empties its channels), and what one server does
shows only when its notification crosses the wire. Steps of different servers commute, and a step of server x can
wait until x's next notification is the next observation, and until that one cannot cross without it (``Ready``):
the steps TLC takes are then only those of the next observation's sender, while that observation is not queued. One
order of each behaviour's independent steps is kept instead of all of them. A server goes back to an election (a
restart, or StartElection once decided) only where the next observation says so: it is the server's LOOKING vote
while the server is decided, or of an earlier round than the server's. And a server takes the notifications that
crossed the wire to it in the order they crossed (the proxy's): QuorumCnxManager's receivers put what every connection
brings into one queue, which FastLeaderElection's WorkerReceiver takes in turn (two connections' packets forwarded at
nearly one time may still be read in either order). ``ResendNotifications`` reads other servers' channels (it waits
for every channel to and from its server to be empty), so a behaviour the guide orders differently may be missed: a
search with the guide that finds no behaviour is run again without it, and only that one's verdict is a departure.
The guide also changes a server's data only to what its next notification shows (its epoch; its zxid only when that
notification is a LOOKING one, the only kind that can show it), and ends a finalize wait
(``TimedOut``) only if nothing waits on the wire to the server that crossed sooner than ``FinalizeWait`` after the
last notification it took, less ``Latency``: lookForLeader polls finalizeWait (200 ms) for each notification, and a
server takes one no sooner than the proxy forwarded it (the records carry the proxy's times, ``t`` in ms).

The run is a behaviour when a state has transmitted every observation (``NotDone`` violated; TLC's counterexample is
the shortest such behaviour). When none gets there, the constraint ``Prog`` has kept, in TLC register 1, the
longest prefix of observations any state transmitted, and printed that state: the next observation is the first
the spec (with QuorumCnxManager's queue) cannot make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.tla.tracemodule import chunked
from conformance.tla.values import format_value
from conformance.validate.observed import check_observed, observed_folder
from conformance.zk.elections import Elections, elections_dir

__all__ = ["FleValidation", "fle_module", "validate_elections", "validate_elections_dir"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
CHUNK = 200
#: ZooKeeper's behaviours VFle adds to FastLeaderElection (module docstring); a test takes each away to show that it is
#: needed.
WIDENINGS = ("DropQueued", "ResendLast", "ZabData", "LateReply")
#: The most distinct states one search explores, and the most seconds it runs (TLCGet("duration")); a search that
#: stops at either has no verdict. A whole fault run's elections can take the guided search hours (docs/zookeeper.md,
#: "Fault runs' elections"): the seconds bound what `zabref zk validate` spends on them.
BUDGET = 2_000_000
BUDGET_SECONDS = 600


@dataclass
class FleValidation:
    recording: str
    servers: int
    notifications: int
    after_end: int
    matched: bool = False
    steps: int = 0
    distinct_states: int = 0
    frontier: int = 0
    failure: str | None = None
    inconclusive: bool = False
    tlc_seconds: float = 0.0
    best: dict[str, Any] = field(default_factory=dict)
    runs: int = 0  # TLC runs: with the guide, then without it when that found no behaviour
    guided: bool = False  # the verdict is the guided search's (only a match is taken from it)
    guided_frontier: int = 0  # where a guided search that found no behaviour stopped (0: none did)

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        return (f"zk validate (election): servers={self.servers} notifications={self.notifications} "
                f"after-end={self.after_end} steps={self.steps} states={self.distinct_states} "
                f"tlc-runs={self.runs} tlc={self.tlc_seconds:.1f}s result={self.verdict}")


def _record(n: Any, t0: int) -> str:
    return format_value({"s": n.sender, "r": n.receiver, "st": n.state, "leader": n.leader, "zxid": n.zxid,
                         "round": n.round, "pe": n.peer_epoch, "t": (n.t_ns - t0) // 1_000_000})


#: Ready's cases for the widenings: the next observation waits behind notifications DropQueued may drop, or
#: ResendLast may put it first again.
_READY_DROP = r"""
             \/ \E m \in (k + 2)..Len(electionMsgs[o.s][o.r]) : Matches(electionMsgs[o.s][o.r][m], o)"""
_READY_RESEND = r"""
             \/ ~resent /\ lastSent[o.s][o.r] /= <<>> /\ Matches(lastSent[o.s][o.r][1], o)"""
_READY_LATE = r"""
             \/ k + 2 <= Len(electionMsgs[o.s][o.r]) /\ LateAnswer(electionMsgs[o.s][o.r], k + 1)
                /\ Matches(electionMsgs[o.s][o.r][k + 2], o)"""
#: The widenings that are a step on one pair's send queue, taken just before the pair's next notification crosses,
#: and the case each adds to ``Ready``.
_PAIR_WIDENINGS = {"DropQueued": _READY_DROP, "ResendLast": _READY_RESEND, "LateReply": _READY_LATE}


def fle_module(el: Elections, widenings: tuple[str, ...] = WIDENINGS, guided: bool = False) -> str:
    """The text of module VFle for ``el`` (module docstring); ``widenings``: which of `WIDENINGS` Next has;
    ``guided``: FastLeaderElection's steps are the next observation's sender's (``Focus``)."""
    t0 = el.notices[0].t_ns if el.notices else 0
    records = [_record(n, t0) for n in el.notices]
    zxids = "{" + ", ".join(f"<<{z[0]}, {z[1]}>>" for z in sorted({(0, 0)} | {tuple(n.zxid) for n in el.notices})) + "}"
    epochs = "{" + ", ".join(str(e) for e in sorted({0} | {n.peer_epoch for n in el.notices})) + "}"
    extra = "".join(f"\n    \\/ \\E i, j \\in Server : {w}(i, j)" for w in _PAIR_WIDENINGS if w in widenings)
    zab = " \\/ ZabData(i) \\/ VoteEpoch(i)" if "ZabData" in widenings else ""
    ready = "".join(text for w, text in _PAIR_WIDENINGS.items() if w in widenings)
    return f"""---------------------------- MODULE VFle ----------------------------
\\* Generated by conformance/validate/flecheck.py from a ZooKeeper recording: {el.recording}
\\* One record a notification the proxy saw on an election connection. Do not edit.
EXTENDS FastLeaderElection, TLC
VARIABLES wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake

\\* How many notifications of i -> j crossed the wire and wait for j (the first of electionMsgs[i][j]).
OnWire(i, j) == Len(wire[i][j])

{chunked("Ob", records, "O", CHUNK)}
Total == {len(records)}

VServer == 1..{el.servers}
VInitZxid == [i \\in VServer |-> <<0, 0>>]
VInitEpoch == [i \\in VServer |-> 0]

\\* FastLeaderElection's InitVote (replaced in VFle.cfg): a server votes with the data it has now.
VInitVote(i) == [leader |-> i, zxid |-> dataZxid[i], epoch |-> dataEpoch[i]]
\\* Every zxid and every epoch a notification of the run carries: what a server's data may become (a decided server's
\\* notifications show its epoch, not its zxid).
SeenZxids == {zxids}
SeenEpochs == {epochs}

Matches(n, o) == /\\ n.state = o.st /\\ n.leader = o.leader /\\ n.zxid = o.zxid
                 /\\ n.electionEpoch = o.round /\\ n.peerEpoch = o.pe

\\* The k-th notification of queue q is a decided server's answer and the next a LOOKING one of a later round
\\* (LateReply).
LateAnswer(q, k) == /\\ q[k].state /= "LOOKING" /\\ q[k + 1].state = "LOOKING"
                    /\\ q[k + 1].electionEpoch > q[k].electionEpoch

\\* SubSeq, empty when m > n (TLC 2.15 refuses SubSeq(<<>>, 1, 0)).
Part(s, m, n) == IF m > n THEN <<>> ELSE SubSeq(s, m, n)

\\* x restarted in this step (FastLeaderElection's Restart: a fault, round 1 again; it empties x's channels).
RestartOf(x) == faults'[x] > faults[x] /\\ logicalclock'[x] = 1

\\* b took the head of a -> b.
Popped(a, b) == Len(electionMsgs'[a][b]) = Len(electionMsgs[a][b]) - 1 /\\ ~RestartOf(a) /\\ ~RestartOf(b)

\\* The servers a step of FastLeaderElection acts for: x changed its own variables, queued a notification, or took one
\\* (a channel to it shrank, not by its sender's restart).
FleActs(x) == \\/ state'[x] /= state[x] \\/ logicalclock'[x] /= logicalclock[x] \\/ proposedVote'[x] /= proposedVote[x]
              \\/ recvVotes'[x] /= recvVotes[x] \\/ outOfElection'[x] /= outOfElection[x]
              \\/ finalizing'[x] /= finalizing[x] \\/ faults'[x] /= faults[x]
              \\/ \\E a \\in Server : \\/ Len(electionMsgs'[x][a]) > Len(electionMsgs[x][a])
                                   \\/ Len(electionMsgs'[a][x]) < Len(electionMsgs[a][x]) /\\ ~RestartOf(a)
\\* ... or a step of its environment: its data changed, it went down.
Acts(x) == FleActs(x) \\/ dataZxid'[x] /= dataZxid[x] \\/ dataEpoch'[x] /= dataEpoch[x] \\/ down'[x] /= down[x]

\\* x's finalize wait ended with no notification (FastLeaderElection's FinalizeTimeout).
TimedOut(x) == finalizing[x] /\\ state'[x] /= "LOOKING" /\\ \\A a \\in Server : ~Popped(a, x)
\\* lookForLeader polls finalizeWait ms for each notification; the proxy forwards one within this many ms.
FinalizeWait == 200
Latency == 50

\\* The next observation can cross the wire with no step of its sender: it is queued first, or behind what
\\* QuorumCnxManager may still drop, or it is the last one sent and may be sent again.
Ready == LET o == O(next)
             k == OnWire(o.s, o.r)
         IN  \\/ k < Len(electionMsgs[o.s][o.r]) /\\ Matches(electionMsgs[o.s][o.r][k + 1], o){ready}

\\* The guide (module docstring): while the next observation cannot cross the wire yet, a step of its sender; taking
\\* what crossed the wire to a server in the order it crossed; going back to an election only when that observation
\\* says so (its sender is decided and it is a LOOKING vote of a later round, or of the same round after a restart, or
\\* it is of an earlier round than the sender's); no end of a finalize wait while a notification that crossed the wire
\\* soon enough waits; data changed only as that observation shows it.
Focus == /\\ next <= Total /\\ ~Ready
         /\\ \\A x \\in Server : Acts(x) => x = O(next).s
         /\\ \\A a, b \\in Server : Popped(a, b) =>
                \\A c \\in Server : wire[c][b] /= <<>> => wire[a][b][1] <= wire[c][b][1]
         /\\ \\A x \\in Server : faults'[x] > faults[x] /\\ ~RestartOf(x) =>
                state[x] /= "LOOKING" /\\ O(next).st = "LOOKING" /\\ O(next).round > logicalclock[x]
         /\\ \\A x \\in Server : down'[x] /\\ ~down[x] =>
                \\/ O(next).round < logicalclock[x]
                \\/ state[x] /= "LOOKING" /\\ O(next).st = "LOOKING" /\\ O(next).round = logicalclock[x]
         /\\ \\A x \\in Server : TimedOut(x) =>
                \\A a \\in Server : wire[a][x] /= <<>> /\\ lastTake[x] > 0 =>
                    O(wire[a][x][1]).t >= O(lastTake[x]).t + FinalizeWait - Latency
         /\\ \\A x \\in Server : <<dataZxid'[x], dataEpoch'[x]>> /= <<dataZxid[x], dataEpoch[x]>> =>
                /\\ dataEpoch'[x] = O(next).pe
                /\\ O(next).st = "LOOKING" /\\ O(next).leader = x => dataZxid'[x] = O(next).zxid
                /\\ O(next).st /= "LOOKING" => dataZxid'[x] = dataZxid[x]
Guided == {"TRUE" if guided else "FALSE"}

\\* Zab, between two elections: a decided server's data changes as Zab gives it transactions and epochs (and a down
\\* server's restart reads what its disk kept), to a zxid and epoch the run shows, of an epoch no older.
ZabData(i) ==
    /\\ (state[i] /= "LOOKING" \\/ down[i])
    /\\ \\E z \\in SeenZxids, e \\in SeenEpochs :
           /\\ e >= dataEpoch[i] /\\ <<z, e>> /= <<dataZxid[i], dataEpoch[i]>>
           /\\ dataZxid' = [dataZxid EXCEPT ![i] = z]
           /\\ dataEpoch' = [dataEpoch EXCEPT ![i] = e]
    /\\ UNCHANGED <<vars, down>>

\\* QuorumPeer.updateElectionVote: once its epoch is new, a decided server answers with it in its vote.
VoteEpoch(i) ==
    /\\ state[i] /= "LOOKING" /\\ ~down[i]
    /\\ proposedVote[i].epoch < dataEpoch[i]
    /\\ proposedVote' = [proposedVote EXCEPT ![i].epoch = dataEpoch[i]]
    /\\ UNCHANGED <<state, logicalclock, recvVotes, outOfElection, finalizing, electionMsgs, faults, decisions>>
    /\\ UNCHANGED <<dataZxid, dataEpoch, down>>

\\* A server goes down (FastLeaderElection's Restart then brings it back, and only then).
Crash(i) ==
    /\\ ~down[i] /\\ TotalFaults < MaxFaults
    /\\ down' = [down EXCEPT ![i] = TRUE]
    /\\ UNCHANGED <<vars, dataZxid, dataEpoch>>

\\* FastLeaderElection's steps and its environment's: a server takes a notification only once it crossed the wire; a
\\* down server takes no step of the election but its restart.
FleStep ==
    /\\ \\/ /\\ Next
          /\\ \\A x \\in Server : RestartOf(x) => down[x]
          /\\ \\A x \\in Server : down[x] /\\ FleActs(x) => RestartOf(x)
          /\\ down' = [x \\in Server |-> down[x] /\\ ~RestartOf(x)]
          /\\ UNCHANGED <<dataZxid, dataEpoch>>
       \\/ \\E i \\in Server : Crash(i){zab}
    /\\ \\A a, b \\in Server : Popped(a, b) => OnWire(a, b) >= 1
    /\\ Guided => Focus
    /\\ wire' = [a \\in Server |-> [b \\in Server |->
                 IF RestartOf(a) \\/ RestartOf(b) THEN <<>> ELSE IF Popped(a, b) THEN Tail(wire[a][b]) ELSE wire[a][b]]]
    /\\ lastTake' = [b \\in Server |-> IF RestartOf(b) THEN 0
                                     ELSE IF \\E a \\in Server : Popped(a, b)
                                          THEN LET a == CHOOSE a \\in Server : Popped(a, b) IN wire[a][b][1]
                                          ELSE lastTake[b]]
    /\\ UNCHANGED <<next, lastSent, resent>>

\\* The next observation is on the pair i -> j.
NextOn(i, j) == next <= Total /\\ O(next).s = i /\\ O(next).r = j

\\* The oldest queued notification of i -> j crosses the wire: the next observation, in the proxy's order.
Transmit(i, j) ==
    /\\ NextOn(i, j)
    /\\ OnWire(i, j) < Len(electionMsgs[i][j])
    /\\ Matches(electionMsgs[i][j][OnWire(i, j) + 1], O(next))
    /\\ wire' = [wire EXCEPT ![i][j] = Append(@, next)]
    /\\ next' = next + 1
    /\\ lastSent' = [lastSent EXCEPT ![i][j] = <<electionMsgs[i][j][OnWire(i, j) + 1]>>]
    /\\ resent' = FALSE
    /\\ UNCHANGED <<serverVars, electionMsgs, faults, decisions, dataZxid, dataEpoch, down, lastTake>>

\\* QuorumCnxManager's send queue holds one message per peer: of two queued, the older is dropped.
DropQueued(i, j) ==
    /\\ NextOn(i, j)
    /\\ Len(electionMsgs[i][j]) - OnWire(i, j) >= 2
    /\\ LET k == OnWire(i, j) + 1
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] = Part(@, 1, k - 1) \\o Part(@, k + 1, Len(@))]
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake>>

\\* QuorumCnxManager's SendWorker, starting, sends j its last message again, before what is queued.
ResendLast(i, j) ==
    /\\ NextOn(i, j)
    /\\ ~resent
    /\\ lastSent[i][j] /= <<>>
    /\\ LET k == OnWire(i, j)
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] =
                               Part(@, 1, k) \\o lastSent[i][j] \\o Part(@, k + 1, Len(@))]
    /\\ resent' = TRUE
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, dataZxid, dataEpoch, down, lastTake>>

\\* FastLeaderElection's WorkerReceiver answers a LOOKING peer with the state and vote it read, and queues the answer
\\* once built; meanwhile the QuorumPeer thread may have gone back to LOOKING and queued its new round's notifications
\\* first: a decided server's answer follows a LOOKING notification of a later round.
LateReply(i, j) ==
    /\\ NextOn(i, j)
    /\\ LET q == electionMsgs[i][j]
       IN  \\E p \\in (OnWire(i, j) + 1)..(Len(q) - 1) :
               /\\ LateAnswer(q, p)
               /\\ electionMsgs' = [electionMsgs EXCEPT ![i][j] = [q EXCEPT ![p] = q[p + 1], ![p + 1] = q[p]]]
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake>>

TraceInit == /\\ dataZxid = VInitZxid /\\ dataEpoch = VInitEpoch /\\ down = [i \\in Server |-> FALSE]
             /\\ Init /\\ wire = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ next = 1
             /\\ lastSent = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ resent = FALSE
             /\\ lastTake = [b \\in Server |-> 0]

TraceNext ==
    \\/ FleStep
    \\/ \\E i, j \\in Server : Transmit(i, j){extra}

NotDone == next <= Total

ASSUME TLCSet(1, 0)
Prog == /\\ IF next > TLCGet(1)
           THEN /\\ TLCSet(1, next)
                /\\ PrintT(<<"fleprogress", next, state, logicalclock, proposedVote, electionMsgs, wire, dataZxid,
                             dataEpoch, down>>)
           ELSE TRUE
        /\\ IF TLCGet("distinct") >= {BUDGET} \\/ TLCGet("duration") >= {BUDGET_SECONDS}
           THEN PrintT(<<"budget", TLCGet("distinct"), TLCGet("duration")>>) /\\ TLCSet("exit", TRUE)
           ELSE TRUE
=============================================================================
"""


def max_faults(el: Elections) -> int:
    """MaxFaults: StartElection and Restart steps. A server goes to a new round at most rounds - 1 times in each of
    its lives; a restart shows as a notification of an earlier round than its sender's last, a LOOKING one after its
    sender's FOLLOWING or LEADING one of the same round, or a vote for itself with other data than its last."""
    last: dict[int, Any] = {}
    data: dict[int, tuple] = {}
    restarts = 0
    for n in el.notices:
        p = last.get(n.sender)
        mine = (n.zxid, n.peer_epoch) if n.state == "LOOKING" and n.leader == n.sender else None
        if p is not None and (n.round < p.round or n.round == p.round and n.state == "LOOKING" != p.state
                              or mine is not None and data.get(n.sender, mine) != mine):
            restarts += 1
        last[n.sender] = n
        if mine is not None:
            data[n.sender] = mine
    return el.servers * (el.rounds - 1) * (1 + restarts) + restarts


def fle_config(el: Elections) -> str:
    return ("CONSTANTS\n    Server <- VServer\n    InitZxid <- VInitZxid\n    InitEpoch <- VInitEpoch\n"
            f"    InitVote <- VInitVote\n    MaxFaults = {max_faults(el)}\n"
            "INIT TraceInit\nNEXT TraceNext\nCONSTRAINT Prog\nINVARIANT NotDone\n")


PROGRESS_FIELDS = ("next", "state", "logicalclock", "proposedVote", "electionMsgs", "wire", "dataZxid", "dataEpoch",
                   "down")


def validate_elections(el: Elections, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                       echo: Callable[[str], None] = lambda s: None, guide: bool = True) -> FleValidation:
    """Check ``el``'s notifications with TLC (module docstring): with the guide first when ``guide``, then without;
    never raises for a departure."""
    spent, runs, frontier = 0.0, 0, 0
    for guided in (True, False) if guide else (False,):
        result = FleValidation(el.recording, el.servers, len(el.notices), el.after_end)
        folder = observed_folder(SPEC_DIR / "FastLeaderElection.tla", "VFle", fle_module(el, widenings, guided),
                                 fle_config(el), "zabref-flevalidate-", work)
        searched = check_observed(result, folder, "VFle", "fleprogress", PROGRESS_FIELDS)
        spent += result.tlc_seconds
        runs += 1
        result.tlc_seconds, result.runs, result.guided = spent, runs, guided
        result.guided_frontier = frontier
        if not searched:
            return result
        result.frontier = int(result.best.get("next", 1))
        if guided:
            frontier = result.guided_frontier = result.frontier
        result.failure = _report(el, result, folder)
        echo(f"zk validate (election): {result.distinct_states:,} states explored"
             f"{' with the guide' if guided else ''}, none makes every notification"
             f"{f' (stopped at its budget, {_budget()})' if result.inconclusive else ''}"
             f"; the longest prefix made ends before notification {result.frontier}")
    return result


def _budget() -> str:
    return f"{BUDGET:,} distinct states or {BUDGET_SECONDS:,} s of TLC, whichever came first"


def _report(el: Elections, result: FleValidation, folder: Path) -> str:
    g, best = result.frontier, result.best
    n = el.notices[g - 1] if 0 < g <= len(el.notices) else None
    lines = [f"notification {g} of {len(el.notices)} is the first FastLeaderElection.tla cannot send: "
             + (f"{n.describe()} from {n.sender} to {n.receiver}\n  at {n.where(el.recording)}" if n else "?"),
             "  in the state that sent the longest prefix of them:"]
    for s in range(1, el.servers + 1):
        part = [f"{k}={format_value(best[k][s - 1])}"
                for k in ("state", "logicalclock", "proposedVote", "dataZxid", "dataEpoch", "down") if k in best]
        lines.append(f"    server {s}: " + " ".join(part))
    if "electionMsgs" in best:
        for a in range(1, el.servers + 1):
            for b in range(1, el.servers + 1):
                ch = best["electionMsgs"][a - 1][b - 1]
                if ch:
                    wire = len(best["wire"][a - 1][b - 1])
                    lines.append(f"    {a}->{b}: {len(ch)} notifications, {wire} on the wire; queued: "
                                 + ", ".join(f"{m['state']}({m['leader']})" for m in ch[wire:]))
    if result.inconclusive:
        lines.append(f"  not proven: the search stopped at its budget ({_budget()})")
    gf = result.guided_frontier
    if not result.guided and g < gf <= len(el.notices):
        lines.append(f"  the search with the guide went further and found no behaviour that sends notification {gf}: "
                     f"{el.notices[gf - 1].describe()} from {el.notices[gf - 1].sender} to "
                     f"{el.notices[gf - 1].receiver}")
    lines.append(f"  the generated module is kept in {folder}")
    return "\n".join(lines)


def validate_elections_dir(folder: str | Path, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                           echo: Callable[[str], None] = lambda s: None) -> FleValidation:
    """The notifications of ``folder``'s recording checked (WireError for a recording that does not decode)."""
    return validate_elections(elections_dir(folder), widenings=widenings, work=work, echo=echo)
