"""Module ``VFle``: spec/FastLeaderElection.tla with what a ZooKeeper run's election notifications need.

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
Eight widenings: four are QuorumCnxManager's (the transport that FastLeaderElection.tla's channels abstract), three
are FastLeaderElection.java's and QuorumPeer's threads and queue, one is Zab's; they live here, for ZooKeeper's runs,
not in the spec zabref's servers are checked against (spec/README.md's table of what ZooKeeper does):

* ``DropQueued(i, j)``: with two or more notifications queued for j, the oldest is dropped.
  `QuorumCnxManager.addToSendQueue` keeps one message per peer while the connection is not there (``SEND_CAPACITY``
  is 1: a full queue loses its oldest), so a server that voted twice before j was up sends j only its last vote.
  FastLeaderElection.tla's channels lose nothing (docs/zookeeper.md, "Election notifications").
* ``ResendLast(i, j)``: the last notification that crossed the wire to j goes first again, as the first i puts on a
  new connection to j (``nc``, from the proxy's connection ids). QuorumCnxManager's SendWorker does so when it starts
  with an empty queue ("Duplicate messages are handled correctly by the peer", its comment), so a peer can get the
  same vote twice with no step of the election between. (Allowed on any connection until 2026-11-30, it also made
  lookForLeader's resends, and its guided search then took those, with no step of the server: 3.9.5's notification
  325 needs the step, ``ResendDelivered``.)
* ``LateReply(i, j)``: a decided server's answer to a LOOKING peer crosses the wire after a LOOKING notification of a
  later round that it queued after it. FastLeaderElection.java's WorkerReceiver reads the server's state (not
  LOOKING), then builds the answer from the current vote and queues it; meanwhile the QuorumPeer thread may have gone
  back to LOOKING and queued its new round's notifications (3.9.5, a 60 s fault run: 2's FOLLOWING(3) of round 1
  after its own LOOKING votes of round 2). FastLeaderElection.tla answers in the step that takes the notification.

The three are taken only when the next observation is on their pair (i -> j), and a resend at most once before
each: they change nothing but i's queue for j, so taking them just before that queue's next notification crosses the
wire loses no behaviour of interest and keeps TLC's search small (five servers' elections too).

* ``RestartKeepsQueues(i)``, in place of FastLeaderElection's Restart: the same step, except that what i's peers queued
  for i and did not send yet stays queued. QuorumCnxManager's ``queueSendMap`` outlives a connection (SendWorker.finish
  leaves it), so what a peer queued while i was down crosses once i is back (3.9.5, the same run: 1's and 2's round-4
  votes reach 3 first after its restart, then 3's own round-1 vote); and what i sent that crossed the wire stays with
  its receiver, whose RecvWorker queued it (a mixed 3.8.0 run: the zabref server joined its leader on a vote of 1
  that it took before 1 was killed, and answered 1's next vote as a follower). FastLeaderElection.tla's Restart
  empties all of i's channels.
* ``ResendDelivered(i)``: FastLeaderElection's ResendNotifications on ZooKeeper's own condition. lookForLeader resends
  when its poll of notTimeout finds nothing and ``QuorumCnxManager.haveDelivered`` holds (some peer's send queue is
  empty); FastLeaderElection.tla waits for every channel to and from i to be empty (``Quiet``), which counts what
  crossed the wire from i and its peer did not take yet, and which the guide's order of steps rarely gives (a peer
  takes what crossed to it only when its own next notification is the next observation). What crossed to i less
  than ``Latency`` ms before the next observation does not stop it either (the resent vote crosses after the poll,
  from i's WorkerSender: 3.9.5's notification 165 crossed 1 ms after 3's resend to 2). It also checks the quorum again
  (FastLeaderElection.tla's ``SendVoteAgain``), as the spec's step does.
* ``Requeue(i)``: lookForLeader's finalize wait ends on a better notification n, which ZooKeeper puts back at the
  *tail* of its queue (``recvqueue.put(n)``), so the notifications WorkerReceiver had queued behind it -- from n's
  sender too -- are taken first. FastLeaderElection.tla's CanHandle takes n next. Here n moves behind up to all the
  notifications of its channel that crossed the wire after it (those a RecvWorker may have queued), and the wait
  ends; taken only when i's next notification is the next observation, as the guide takes i's steps. (3.8.0,
  ZOOKEEPER-4837's schedule: server 1, waiting in finalize for 2's round-2 vote, met 2's better round-2 vote for 3,
  put it back behind 2's round-3 votes, went to round 3 on them and then dropped it as of an older round.) What the
  spec's HandleLowerRound then answers, ZooKeeper's WorkerReceiver did not (it answers at receipt, in the round it
  had then): DropQueued absorbs that answer when the sender's next notification to n's sender is queued behind it.
* ``OldVoteReply(i, j)``: a server that has just decided answers a LOOKING peer with its new state and the vote
  it held before the election. lookForLeader sets the state (``setPeerState``) and returns; only then does
  QuorumPeer.run set ``currentVote``, which WorkerReceiver reads for the answer. ``heldVote[i]`` is the vote i
  answered with when last decided and that decision's round (none after a restart: ZooKeeper's vote then is of round
  -1, which no run here has shown); ``voteUnset[i]`` holds from i's decision until its next step. Taken only when i's
  next notification is the next observation, with the guide only for an answer the run shows on that pair. (3.9.5, a
  random mixed run: server 2, deciding to lead in round 4, answered 1's round-4 vote with LEADING, leader 3, round 3,
  its vote as 3's follower; its own log has WorkerReceiver's "my state:LEADING" before QuorumPeer's "LEADING".)
* ``ZabData`` (Zab's, between elections; with ``VoteEpoch`` and ``Crash``): the spec's ``InitVote`` is replaced
  (VFle.cfg) by the vote of the data a server has now (``dataZxid``, ``dataEpoch``). A decided server's data
  changes as Zab gives it transactions and epochs, or a down server's (its restart reads what its disk kept), to a
  zxid some notification of the run carries and an epoch some notification carries, no older; a decided server's
  vote takes its new epoch (``VoteEpoch``: QuorumPeer.updateElectionVote, FastLeaderElection's
  ``UpdateElectionVote`` on the run's data, in either order of leader and follower: that step's switch
  ``VoteUpdates`` stays off here); a restart is ``Crash`` then FastLeaderElection's ``Restart``.
* Every step of FastLeaderElection's ``Next`` is kept, except that a server takes the head of a channel only once
  it crossed the wire (``OnWire >= 1``).

**The guide** (``Focus``). FastLeaderElection's steps are each one server's (it takes from its own channels, changes its
own variables, queues its own notifications; a restart also empties its channels), and what one server does shows only
when its notification crosses the wire. Steps of different servers commute, and a step of server x can wait until x's
next notification is the next observation, and until that one cannot cross without it (``Ready``): the steps TLC takes
are then only those of the next observation's sender, while that observation is not queued, and a down receiver's crash
or restart (it must be up to take what crosses to it; its own next notification, ``Own``, says whether it went down).
One order of each behaviour's independent steps is kept instead of all of them. A server goes back to an election (a
restart, or StartElection once decided) only where its next notification says so: it is the server's LOOKING vote while
the server is decided, or of an earlier round than the server's, or a round-1 vote for itself on other data than the
server has (``RestartShown``: a LOOKING server's data changes only in a restart). And a server takes the notifications
that crossed the wire to it in the order they crossed (the proxy's), or within ``Skew`` ms of it: QuorumCnxManager's
receivers put what every connection brings into one queue, which FastLeaderElection's WorkerReceiver takes in turn, and
two connections' packets forwarded at nearly one time may reach it in either order. ``ResendNotifications`` reads other
servers' channels (it waits for every channel to and from its server to be empty; ``ResendDelivered`` reads only its
server's), so a behaviour the guide orders differently may be missed: a search with the guide that finds no behaviour is
run again without it, and only that one's verdict is a departure. The guide changes a server's data only to what its
next notification shows (its epoch; its zxid only when that notification is a LOOKING one, the only kind that can show
it), and ends a finalize wait (``TimedOut``) only if nothing waits on the wire to the server that crossed sooner than
``FinalizeWait`` after the last notification it took, less ``Latency``: lookForLeader polls finalizeWait (200 ms) for
each notification, and a server takes one no sooner than the proxy forwarded it (the records carry the proxy's times,
``t`` in ms). With the guide, ``ZabData`` makes only the values it admits (TLC made every zxid and epoch of the run and
threw most away: four fifths of a window's time).

**A span** (`Span`; conformance/validate/flecheck.py checks a run in windows): one search makes the notifications
``lo + 1 .. hi`` of the run, from Init (``lo`` = 0) or from a state a search of the notifications before reached,
written in the module as TLC printed it (``TraceInit``). Two variables start again at each span: ``faults`` (each
span's MaxFaults bounds its own rounds and restarts, `max_faults`) and ``decisions`` (read by no guard, only by
FastLeaderElection's invariants): the span's behaviour goes on from the state before, but for what no step reads.

The span is made when a state has transmitted its last notification (``NotDone`` violated; TLC's counterexample is
the shortest such behaviour, and its last state the next span's start). When none gets there, the constraint
``Prog`` has kept, in TLC register 1, the longest prefix of observations any state transmitted, and printed that
state: the next observation is the first the spec (with QuorumCnxManager's queue) cannot make from the span's start.
A search also stops at a budget of distinct states or seconds of TLC (``budget`` in the line it prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.tla.tracemodule import chunked
from conformance.tla.valueparse import parse_value
from conformance.tla.values import format_value
from conformance.zk.elections import Elections

__all__ = ["PROGRESS_FIELDS", "WIDENINGS", "Span", "fle_config", "fle_module", "max_faults"]

CHUNK = 200
#: ZooKeeper's behaviours VFle adds to FastLeaderElection (module docstring); a test takes each away to show that it is
#: needed.
WIDENINGS = ("DropQueued", "ResendLast", "ZabData", "LateReply", "RestartKeepsQueues", "ResendDelivered",
             "Requeue", "OldVoteReply")
#: The variables a span starts again (module docstring: "A span").
RESTARTED = {"faults": "[i \\in Server |-> 0]", "decisions": "{}"}


@dataclass(frozen=True)
class Span:
    """The notifications one search makes, ``lo + 1 .. hi``, and the state it starts in: each variable's text as TLC
    printed it in the last state of the search before (empty: Init, and ``lo`` is 0)."""

    lo: int
    hi: int
    start: tuple[tuple[str, str], ...] = ()

    def clocks(self) -> list[int]:
        """Each server's logicalclock at the start (Init: round 1)."""
        for name, text in self.start:
            if name == "logicalclock":
                return [int(c) for c in parse_value(text, "a span's start")]
        return []


def _record(n: Any, t0: int, own: list[int], nc: bool) -> str:
    return format_value({"s": n.sender, "r": n.receiver, "st": n.state, "leader": n.leader, "zxid": n.zxid,
                         "round": n.round, "pe": n.peer_epoch, "t": (n.t_ns - t0) // 1_000_000, "own": own,
                         "nc": nc})


def _first_on_connection(el: Elections) -> list[bool]:
    """For each notification: the first its sender put on its connection (``nc``; QuorumCnxManager's SendWorker of
    that connection had just started)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for n in el.notices:
        out.append((n.conn, n.sender) not in seen)
        seen.add((n.conn, n.sender))
    return out


def _own(el: Elections) -> list[list[int]]:
    """For each notification g, each server's next notification from g on (its number, 0: none): ``own``."""
    nxt = [0] * el.servers
    out: list[list[int]] = []
    for n in reversed(el.notices):
        nxt[n.sender - 1] = n.g
        out.append(list(nxt))
    return out[::-1]


#: Ready's cases for the widenings: the next observation waits behind notifications DropQueued may drop, or
#: ResendLast may put it first again.
_READY_DROP = r"""
             \/ \E m \in (k + 2)..Len(electionMsgs[o.s][o.r]) : Matches(electionMsgs[o.s][o.r][m], o)"""
_READY_RESEND = r"""
             \/ ~resent /\ lastSent[o.s][o.r] /= <<>> /\ Matches(lastSent[o.s][o.r][1], o) /\ o.nc"""
_READY_LATE = r"""
             \/ k + 2 <= Len(electionMsgs[o.s][o.r]) /\ LateAnswer(electionMsgs[o.s][o.r], k + 1)
                /\ Matches(electionMsgs[o.s][o.r][k + 2], o)"""
#: The widenings that are a step on one pair's send queue, taken just before the pair's next notification crosses,
#: and the case each adds to ``Ready``.
_PAIR_WIDENINGS = {"DropQueued": _READY_DROP, "ResendLast": _READY_RESEND, "LateReply": _READY_LATE}


def fle_module(el: Elections, span: Span, *, budget: tuple[int, int], widenings: tuple[str, ...] = WIDENINGS,
               guided: bool = False) -> str:
    """The text of module VFle for ``el``'s notifications of ``span`` (module docstring); ``budget``: the distinct
    states and seconds of TLC the search stops at; ``widenings``: which of `WIDENINGS` Next has; ``guided``:
    FastLeaderElection's steps are the next observation's sender's (``Focus``)."""
    t0 = el.notices[0].t_ns if el.notices else 0
    records = [_record(n, t0, own, nc) for n, own, nc in zip(el.notices, _own(el), _first_on_connection(el))]
    zxids = "{" + ", ".join(f"<<{z[0]}, {z[1]}>>" for z in sorted({(0, 0)} | {tuple(n.zxid) for n in el.notices})) + "}"
    epochs = "{" + ", ".join(str(e) for e in sorted({0} | {n.peer_epoch for n in el.notices})) + "}"
    extra = "".join(f"\n    \\/ \\E i, j \\in Server : {w}(i, j)" for w in _PAIR_WIDENINGS if w in widenings)
    zab = " \\/ ZabData(i) \\/ VoteEpoch(i)" if "ZabData" in widenings else ""
    per_server = [w for w in ("RestartKeepsQueues", "ResendDelivered") if w in widenings]
    fle_next = ((r"(Next /\ \A x \in Server : ~RestartOf(x))" if "RestartKeepsQueues" in per_server else "Next")
                + (" \\/ \\E i \\in Server : " + " \\/ ".join(f"{w}(i)" for w in per_server) if per_server else ""))
    ready = "".join(text for w, text in _PAIR_WIDENINGS.items() if w in widenings)
    # what a restarted server sent that crossed the wire: its receivers keep it with RestartKeepsQueues
    crossed = "wire[a][b]" if "RestartKeepsQueues" in per_server else "<<>>"
    extra += "\n    \\/ \\E i \\in Server : Requeue(i)" if "Requeue" in widenings else ""
    extra += "\n    \\/ \\E i, j \\in Server : OldVoteReply(i, j)" if "OldVoteReply" in widenings else ""
    return f"""---------------------------- MODULE VFle ----------------------------
\\* Generated by conformance/validate/flecheck.py from a ZooKeeper recording: {el.recording}
\\* One record a notification the proxy saw on an election connection. Do not edit.
EXTENDS FastLeaderElection, TLC
VARIABLES wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake, heldVote, voteUnset

\\* How many notifications of i -> j crossed the wire and wait for j (the first of electionMsgs[i][j]).
OnWire(i, j) == Len(wire[i][j])

{chunked("Ob", records, "O", CHUNK)}
Total == {span.hi}

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
\\* Two connections' notifications the proxy forwarded this many ms apart or less may reach the receiver's queue in
\\* either order (QuorumCnxManager has a RecvWorker a connection).
Skew == 2

\\* b takes the head of a -> b in the order what waits for it crossed the wire (the proxy's), or within Skew ms of it.
TakenInOrder(a, b) == \\A c \\in Server : wire[c][b] /= <<>> =>
                          \\/ wire[a][b][1] <= wire[c][b][1]
                          \\/ O(wire[a][b][1]).t <= O(wire[c][b][1]).t + Skew

\\* The next notification x sends, from the next observation on (0: none): the one that shows x's next steps.
Own(x) == O(next).own[x]

\\* The next observation can cross the wire with no step of its sender: it is queued first, or behind what
\\* QuorumCnxManager may still drop, or it is the last one sent and may be sent again.
Ready == LET o == O(next)
             k == OnWire(o.s, o.r)
         IN  \\/ k < Len(electionMsgs[o.s][o.r]) /\\ Matches(electionMsgs[o.s][o.r][k + 1], o){ready}

\\* x's next notification is a round-1 vote for itself on other data than x has: only a restart gives a LOOKING server
\\* new data (ZabData), in whatever round x is (a behaviour that never needed x to decide leaves it LOOKING in its first
\\* round: 3.8.0's mixed-handover, the killed ZooKeeper leader's first vote after its restart).
RestartShown(x) == LET o == O(Own(x))
                   IN  /\\ o.st = "LOOKING" /\\ o.leader = x /\\ o.round = 1
                       /\\ <<o.zxid, o.pe>> /= <<dataZxid[x], dataEpoch[x]>>

\\* The guide (module docstring): while the next observation cannot cross the wire yet, a step of its sender; taking
\\* what crossed the wire to a server in the order it crossed; going back to an election only when that observation
\\* says so (its sender is decided and it is a LOOKING vote of a later round, or of the same round after a restart, or
\\* it is of an earlier round than the sender's, or RestartShown); no end of a finalize wait while a notification that
\\* crossed the wire soon enough waits; data changed only as that observation shows it.
Focus == /\\ next <= Total
         /\\ \\/ ~Ready /\\ \\A x \\in Server : Acts(x) => x = O(next).s
            \\/ \\A x \\in Server : Acts(x) => x = O(next).r /\\ (down[x] \\/ down'[x])
         /\\ \\A a, b \\in Server : Popped(a, b) => TakenInOrder(a, b)
         /\\ \\A x \\in Server : faults'[x] > faults[x] /\\ ~RestartOf(x) =>
                state[x] /= "LOOKING" /\\ O(next).st = "LOOKING" /\\ O(next).round > logicalclock[x]
         /\\ \\A x \\in Server : down'[x] /\\ ~down[x] =>
                /\\ Own(x) > 0
                /\\ \\/ O(Own(x)).round < logicalclock[x]
                   \\/ state[x] /= "LOOKING" /\\ O(Own(x)).st = "LOOKING" /\\ O(Own(x)).round = logicalclock[x]
                   \\/ RestartShown(x)
         /\\ \\A x \\in Server : TimedOut(x) =>
                \\A a \\in Server : wire[a][x] /= <<>> /\\ lastTake[x] > 0 =>
                    O(wire[a][x][1]).t >= O(lastTake[x]).t + FinalizeWait - Latency
         /\\ \\A x \\in Server : <<dataZxid'[x], dataEpoch'[x]>> /= <<dataZxid[x], dataEpoch[x]>> =>
                LET o == O(Own(x))
                IN  /\\ Own(x) > 0 /\\ dataEpoch'[x] = o.pe
                    /\\ o.st = "LOOKING" /\\ o.leader = x => dataZxid'[x] = o.zxid
                    /\\ o.st /= "LOOKING" => dataZxid'[x] = dataZxid[x]
Guided == {"TRUE" if guided else "FALSE"}

\\* What ZabData may give i: what the run shows; with the guide, only what i's next notification shows (Focus), so
\\* that the values it rules out are not made at all (TLC made them and threw them away: most of its time).
DataEpochs(i) == IF ~Guided THEN SeenEpochs ELSE IF next > Total THEN {{}} ELSE IF Own(i) = 0 THEN {{}}
                 ELSE {{O(Own(i)).pe}}
DataZxids(i) == IF ~Guided THEN SeenZxids ELSE IF next > Total THEN {{}} ELSE IF Own(i) = 0 THEN {{}}
                ELSE LET o == O(Own(i))
                     IN  IF o.st /= "LOOKING" THEN {{dataZxid[i]}} ELSE IF o.leader = i THEN {{o.zxid}} ELSE SeenZxids

\\* Zab, between two elections: a decided server's data changes as Zab gives it transactions and epochs (and a down
\\* server's restart reads what its disk kept), to a zxid and epoch the run shows, of an epoch no older.
ZabData(i) ==
    /\\ (state[i] /= "LOOKING" \\/ down[i])
    /\\ \\E z \\in DataZxids(i), e \\in DataEpochs(i) :
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

\\* FastLeaderElection's Restart, with what QuorumCnxManager keeps: a peer's queue for i (queueSendMap) outlives i's
\\* connection, so the restart loses what crossed the wire to i and what i queued, not what its peers queued for it;
\\* and what i sent that crossed the wire is in its receiver's queue already (a RecvWorker put it there), which i's
\\* crash does not take back.
RestartKeepsQueues(i) ==
    /\\ TotalFaults < MaxFaults
    /\\ LET kept == [s \\in Server |-> [t \\in Server |->
                       IF s = i THEN Part(electionMsgs[s][t], 1, OnWire(s, t))
                       ELSE IF t = i THEN Part(electionMsgs[s][t], OnWire(s, t) + 1, Len(electionMsgs[s][t]))
                       ELSE electionMsgs[s][t]]]
       IN  EnterElection(i, 1, kept)
    /\\ faults' = [faults EXCEPT ![i] = @ + 1]
    /\\ UNCHANGED decisions

\\* FastLeaderElection's ResendNotifications on what ZooKeeper reads: lookForLeader's poll of notTimeout found nothing
\\* (nothing that crossed the wire to i waits for it, but what crossed less than Latency ms before the next
\\* observation: i's WorkerSender puts the resent vote on the wire after the poll) and QuorumCnxManager.haveDelivered
\\* holds (the send queue of some peer is empty: what i queued for it crossed the wire). What crossed the wire from i
\\* and its peer did not take yet does not count, nor what a peer queued for i that did not cross:
\\* FastLeaderElection.tla's Quiet waits for both.
ResendDelivered(i) ==
    /\\ state[i] = "LOOKING" /\\ ~finalizing[i]
    /\\ \\A j \\in Server : IF OnWire(j, i) = 0 THEN TRUE
                         ELSE next <= Total /\\ O(wire[j][i][1]).t >= O(next).t - Latency
    /\\ \\E j \\in Server \\ {{i}} : Len(electionMsgs[i][j]) = OnWire(i, j)
    /\\ SendVoteAgain(i)

\\* FastLeaderElection's steps, with RestartKeepsQueues for its Restart and ResendDelivered beside its
\\* ResendNotifications when VFle has them.
FleNext == {fle_next}

\\* FastLeaderElection's steps and its environment's: a server takes a notification only once it crossed the wire; a
\\* down server takes no step of the election but its restart.
FleStep ==
    /\\ \\/ /\\ FleNext
          /\\ \\A x \\in Server : RestartOf(x) => down[x]
          /\\ \\A x \\in Server : down[x] /\\ FleActs(x) => RestartOf(x)
          /\\ down' = [x \\in Server |-> down[x] /\\ ~RestartOf(x)]
          /\\ UNCHANGED <<dataZxid, dataEpoch>>
       \\/ \\E i \\in Server : Crash(i){zab}
    /\\ \\A a, b \\in Server : Popped(a, b) => OnWire(a, b) >= 1
    /\\ Guided => Focus
    /\\ wire' = [a \\in Server |-> [b \\in Server |->
                 IF RestartOf(b) THEN <<>> ELSE IF RestartOf(a) THEN {crossed}
                 ELSE IF Popped(a, b) THEN Tail(wire[a][b]) ELSE wire[a][b]]]
    /\\ lastTake' = [b \\in Server |-> IF RestartOf(b) THEN 0
                                     ELSE IF \\E a \\in Server : Popped(a, b)
                                          THEN LET a == CHOOSE a \\in Server : Popped(a, b) IN wire[a][b][1]
                                          ELSE lastTake[b]]
    /\\ voteUnset' = [x \\in Server |-> IF state[x] = "LOOKING" /\\ state'[x] /= "LOOKING" THEN heldVote[x] /= <<>>
                                      ELSE voteUnset[x] /\\ ~Acts(x)]
    /\\ heldVote' = [x \\in Server |-> IF RestartOf(x) THEN <<>>
                                     ELSE IF state[x] /= "LOOKING" /\\ state'[x] = "LOOKING"
                                          THEN <<[v |-> proposedVote[x], r |-> logicalclock[x]]>>
                                          ELSE IF state'[x] /= "LOOKING" /\\ ~voteUnset'[x] THEN <<>>
                                          ELSE heldVote[x]]
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
    /\\ UNCHANGED <<serverVars, electionMsgs, faults, decisions, dataZxid, dataEpoch, down, lastTake,
                   heldVote, voteUnset>>

\\* Sequence s with its head moved behind the k elements after it.
Behind(s, k) == Part(s, 2, k + 1) \\o <<s[1]>> \\o Part(s, k + 2, Len(s))

\\* lookForLeader's finalize wait ended by a better notification n from j: ZooKeeper puts n back at the tail of its
\\* queue, so the k notifications of j that crossed the wire after n (WorkerReceiver may have queued them) go first.
Requeue(i) ==
    /\\ next <= Total /\\ O(next).s = i
    /\\ state[i] = "LOOKING" /\\ finalizing[i]
    /\\ \\E j \\in Server : \\E k \\in 1..(OnWire(j, i) - 1) :
           /\\ TotalOrderPredicate(VoteOf(electionMsgs[j][i][1]), proposedVote[i])
           /\\ electionMsgs' = [electionMsgs EXCEPT ![j][i] = Behind(@, k)]
           /\\ wire' = [wire EXCEPT ![j][i] = Behind(@, k)]
    /\\ finalizing' = [finalizing EXCEPT ![i] = FALSE]
    /\\ UNCHANGED <<state, logicalclock, proposedVote, recvVotes, outOfElection, faults, decisions>>
    /\\ UNCHANGED <<next, lastSent, resent, dataZxid, dataEpoch, down, lastTake,
                   heldVote, voteUnset>>

\\* QuorumCnxManager's send queue holds one message per peer: of two queued, the older is dropped.
DropQueued(i, j) ==
    /\\ NextOn(i, j)
    /\\ Len(electionMsgs[i][j]) - OnWire(i, j) >= 2
    /\\ LET k == OnWire(i, j) + 1
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] = Part(@, 1, k - 1) \\o Part(@, k + 1, Len(@))]
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake,
                   heldVote, voteUnset>>

\\* QuorumCnxManager's SendWorker, starting, sends j its last message again, before what is queued.
ResendLast(i, j) ==
    /\\ NextOn(i, j) /\\ O(next).nc
    /\\ ~resent
    /\\ lastSent[i][j] /= <<>>
    /\\ LET k == OnWire(i, j)
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] =
                               Part(@, 1, k) \\o lastSent[i][j] \\o Part(@, k + 1, Len(@))]
    /\\ resent' = TRUE
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, dataZxid, dataEpoch, down, lastTake,
                   heldVote, voteUnset>>

\\* FastLeaderElection's WorkerReceiver answers a LOOKING peer with the state and vote it read, and queues the answer
\\* once built; meanwhile the QuorumPeer thread may have gone back to LOOKING and queued its new round's notifications
\\* first: a decided server's answer follows a LOOKING notification of a later round.
LateReply(i, j) ==
    /\\ NextOn(i, j)
    /\\ LET q == electionMsgs[i][j]
       IN  \\E p \\in (OnWire(i, j) + 1)..(Len(q) - 1) :
               /\\ LateAnswer(q, p)
               /\\ electionMsgs' = [electionMsgs EXCEPT ![i][j] = [q EXCEPT ![p] = q[p + 1], ![p + 1] = q[p]]]
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, resent, dataZxid, dataEpoch, down, lastTake,
                   heldVote, voteUnset>>

\\* FastLeaderElection's WorkerReceiver of a server that has just decided answers a LOOKING peer with its new state and
\\* the vote QuorumPeer still holds from before this election: lookForLeader sets the state (setPeerState) and returns,
\\* and only then does QuorumPeer.run set currentVote. So until i's next step of its own, an answer may carry the
\\* vote i answered with when it was last decided, of that election's round (heldVote; none after a restart, whose
\\* vote ZooKeeper makes of round -1, which no notification here has shown). Taken in the guide's order of i's steps.
OldVoteReply(i, j) ==
    /\\ next <= Total /\\ O(next).s = i
    /\\ voteUnset[i] /\\ ~down[i] /\\ state[i] /= "LOOKING"
    /\\ OnWire(j, i) >= 1 /\\ Head(electionMsgs[j][i]).state = "LOOKING"
    /\\ Guided => TakenInOrder(j, i)
    /\\ LET n == Notification(state[i], heldVote[i][1].v, heldVote[i][1].r)
       IN  /\\ Guided => \\E g \\in next..Total : O(g).s = i /\\ O(g).r = j /\\ Matches(n, O(g))
           /\\ electionMsgs' = Send(Pop(electionMsgs, j, i), i, j, n)
    /\\ wire' = [wire EXCEPT ![j][i] = Tail(@)]
    /\\ lastTake' = [lastTake EXCEPT ![i] = wire[j][i][1]]
    /\\ UNCHANGED <<serverVars, faults, decisions, next, lastSent, resent, dataZxid, dataEpoch, down,
                   heldVote, voteUnset>>

InitOfRun == /\\ dataZxid = VInitZxid /\\ dataEpoch = VInitEpoch /\\ down = [i \\in Server |-> FALSE]
             /\\ Init /\\ wire = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ next = 1
             /\\ lastSent = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ resent = FALSE
             /\\ lastTake = [b \\in Server |-> 0]
             /\\ heldVote = [x \\in Server |-> <<>>] /\\ voteUnset = [x \\in Server |-> FALSE]

{_trace_init(span)}

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
        /\\ IF TLCGet("distinct") >= {budget[0]} \\/ TLCGet("duration") >= {budget[1]}
           THEN PrintT(<<"budget", TLCGet("distinct"), TLCGet("duration")>>) /\\ TLCSet("exit", TRUE)
           ELSE TRUE
=============================================================================
"""


def _trace_init(span: Span) -> str:
    """TraceInit: the run's initial state, or the state the span starts in (module docstring: "A span")."""
    if not span.start:
        return "TraceInit == InitOfRun"
    values = {name: " ".join(text.split()) for name, text in span.start}
    if values.get("next") != str(span.lo + 1):
        raise ValueError(f"a span of notifications {span.lo + 1}..{span.hi} cannot start where next = "
                         f"{values.get('next')}")
    values.update(RESTARTED)
    return "TraceInit ==\n" + "\n".join(f"    /\\ {name} = {text}" for name, text in values.items())


def max_faults(el: Elections, span: Span | None = None) -> int:
    """MaxFaults of a search of ``span`` (None: the whole run from Init): StartElection and Restart steps. A server
    goes to a new round at most R - c times in each of its lives, R the span's greatest round and c the least round a
    server starts it in (1 after a restart); a restart shows as a notification of an earlier round than its sender's
    last, a LOOKING one after its sender's FOLLOWING or LEADING one of the same round, or a vote for itself with
    other data than its last."""
    span = span or Span(0, len(el.notices))
    last: dict[int, Any] = {}
    data: dict[int, tuple] = {}
    restarts = 0
    for n in el.notices[:span.hi]:
        p = last.get(n.sender)
        mine = (n.zxid, n.peer_epoch) if n.state == "LOOKING" and n.leader == n.sender else None
        if p is not None and n.g > span.lo and (
                n.round < p.round or n.round == p.round and n.state == "LOOKING" != p.state
                or mine is not None and data.get(n.sender, mine) != mine):
            restarts += 1
        last[n.sender] = n
        if mine is not None:
            data[n.sender] = mine
    top = max((n.round for n in el.notices[span.lo:span.hi]), default=1)
    base = 1 if restarts or not span.start else min(span.clocks())
    return el.servers * max(top - base, 0) * (1 + restarts) + restarts


def fle_config(el: Elections, span: Span) -> str:
    return ("CONSTANTS\n    Server <- VServer\n    InitZxid <- VInitZxid\n    InitEpoch <- VInitEpoch\n"
            f"    InitVote <- VInitVote\n    MaxFaults = {max_faults(el, span)}\n"
            "INIT TraceInit\nNEXT TraceNext\nCONSTRAINT Prog\nINVARIANT NotDone\n")


PROGRESS_FIELDS = ("next", "state", "logicalclock", "proposedVote", "electionMsgs", "wire", "dataZxid", "dataEpoch",
                   "down")


