"""Election notifications of a ZooKeeper run held against spec/FastLeaderElection.tla, from outside: ``VFle``.

Theory of operation
-------------------
The proxy sees what each server's QuorumCnxManager put on the wire (`conformance.zk.elections`). Module ``VFle``
EXTENDS FastLeaderElection (all servers from an empty data dir: zxid <<0, 0>>, epoch 0, the notifications
`conformance.zk.elections` keeps; MaxFaults the servers times the rounds beyond the first, since a server that
decided and lost its leader looks again in the next round -- FastLeaderElection's StartElection, a fault -- as a
server of a slow start does) and keeps apart, in each channel ``electionMsgs[i][j]``, the notifications
that crossed the wire -- its first ``OnWire(i, j)``, whose observation numbers ``wire[i][j]`` holds -- from those still
in i's send queue:

* ``Transmit(i, j)``: the oldest queued notification of i -> j crosses the wire; it must be the next observation in
  the proxy's order (``next``), addressed i -> j, with the same state, leader, zxid, round and peerEpoch. The proxy's
  order is total, so the wire order of the whole run is the recording's.
Two widenings, both QuorumCnxManager's (the transport that FastLeaderElection.tla's channels abstract); they live
here, for ZooKeeper's runs, not in the spec zabref's servers are checked against:

* ``DropQueued(i, j)``: with two or more notifications queued for j, the oldest is dropped.
  `QuorumCnxManager.addToSendQueue` keeps one message per peer while the connection is not there (``SEND_CAPACITY``
  is 1: a full queue loses its oldest), so a server that voted twice before j was up sends j only its last vote.
  FastLeaderElection.tla's channels lose nothing (docs/zookeeper.md, "Election notifications").
* ``ResendLast(i, j)``: the last notification that crossed the wire to j goes first again. QuorumCnxManager's
  SendWorker does so when it starts with an empty queue ("Duplicate messages are handled correctly by the peer",
  its comment), so a peer can get the same vote twice with no step of the election between.

Both are taken only when the next observation is on their pair (i -> j), and a resend at most once before each:
a drop or a resend changes nothing but i's queue for j, so taking it just before that queue's next notification
crosses the wire loses no behaviour of interest and keeps TLC's search small (five servers' elections too).
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
#: QuorumCnxManager's behaviours VFle adds to FastLeaderElection (module docstring); a test takes each away to show
#: that it is needed.
WIDENINGS = ("DropQueued", "ResendLast")
#: The most distinct states one search explores; a search without the guide that stops there has no verdict.
BUDGET = 2_000_000


@dataclass
class FleValidation:
    recording: str
    servers: int
    notifications: int
    after_end: int
    later: int = 0
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

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        return (f"zk validate (election): servers={self.servers} notifications={self.notifications} "
                f"after-end={self.after_end} later={self.later} steps={self.steps} states={self.distinct_states} "
                f"tlc-runs={self.runs} tlc={self.tlc_seconds:.1f}s result={self.verdict}")


def _record(n: Any) -> str:
    return format_value({"s": n.sender, "r": n.receiver, "st": n.state, "leader": n.leader, "zxid": n.zxid,
                         "round": n.round, "pe": n.peer_epoch})


def fle_module(el: Elections, widenings: tuple[str, ...] = WIDENINGS, guided: bool = False) -> str:
    """The text of module VFle for ``el`` (module docstring); ``widenings``: which of `WIDENINGS` Next has;
    ``guided``: FastLeaderElection's steps are the next observation's sender's (``Focus``)."""
    records = [_record(n) for n in el.notices]
    extra = "".join(f"\n    \\/ \\E i, j \\in Server : {w}(i, j)" for w in WIDENINGS if w in widenings)
    return f"""---------------------------- MODULE VFle ----------------------------
\\* Generated by conformance/validate/flecheck.py from a ZooKeeper recording: {el.recording}
\\* One record a notification the proxy saw on an election connection. Do not edit.
EXTENDS FastLeaderElection, TLC
VARIABLES wire, next, lastSent, resent

\\* How many notifications of i -> j crossed the wire and wait for j (the first of electionMsgs[i][j]).
OnWire(i, j) == Len(wire[i][j])

{chunked("Ob", records, "O", CHUNK)}
Total == {len(records)}

VServer == 1..{el.servers}
VInitZxid == [i \\in VServer |-> <<0, 0>>]
VInitEpoch == [i \\in VServer |-> 0]

Matches(n, o) == /\\ n.state = o.st /\\ n.leader = o.leader /\\ n.zxid = o.zxid
                 /\\ n.electionEpoch = o.round /\\ n.peerEpoch = o.pe

\\* SubSeq, empty when m > n (TLC 2.15 refuses SubSeq(<<>>, 1, 0)).
Part(s, m, n) == IF m > n THEN <<>> ELSE SubSeq(s, m, n)

\\* x restarted in this step (FastLeaderElection's Restart: a fault, round 1 again; it empties x's channels).
RestartOf(x) == faults'[x] > faults[x] /\\ logicalclock'[x] = 1

\\* b took the head of a -> b.
Popped(a, b) == Len(electionMsgs'[a][b]) = Len(electionMsgs[a][b]) - 1 /\\ ~RestartOf(a) /\\ ~RestartOf(b)

\\* The servers a step of FastLeaderElection acts for: x changed its own variables, queued a notification, or took one
\\* (a channel to it shrank, not by its sender's restart).
Acts(x) == \\/ state'[x] /= state[x] \\/ logicalclock'[x] /= logicalclock[x] \\/ proposedVote'[x] /= proposedVote[x]
           \\/ recvVotes'[x] /= recvVotes[x] \\/ outOfElection'[x] /= outOfElection[x] \\/ finalizing'[x] /= finalizing[x]
           \\/ faults'[x] /= faults[x]
           \\/ \\E a \\in Server : \\/ Len(electionMsgs'[x][a]) > Len(electionMsgs[x][a])
                                \\/ Len(electionMsgs'[a][x]) < Len(electionMsgs[a][x]) /\\ ~RestartOf(a)

\\* The next observation can cross the wire now: its sender has queued it.
Ready == LET o == O(next)
             k == OnWire(o.s, o.r)
         IN  k < Len(electionMsgs[o.s][o.r]) /\\ Matches(electionMsgs[o.s][o.r][k + 1], o)

\\* The guide (module docstring): while the next observation cannot cross the wire yet, a step of its sender; taking
\\* what crossed the wire to it in the order it crossed; going back to an election only when that observation says so
\\* (its sender is decided and it is a LOOKING vote, or it is of an earlier round than the sender's).
Focus == /\\ next <= Total /\\ ~Ready
         /\\ \\A x \\in Server : Acts(x) => x = O(next).s
         /\\ \\A a, b \\in Server : Popped(a, b) =>
                \\A c \\in Server : wire[c][b] /= <<>> => wire[a][b][1] <= wire[c][b][1]
         /\\ \\A x \\in Server : faults'[x] > faults[x] =>
                \\/ state[x] /= "LOOKING" /\\ O(next).st = "LOOKING"
                \\/ O(next).round < logicalclock[x]
Guided == {"TRUE" if guided else "FALSE"}

\\* FastLeaderElection's steps: a server takes a notification only once it crossed the wire.
FleStep ==
    /\\ Next
    /\\ \\A a, b \\in Server : Popped(a, b) => OnWire(a, b) >= 1
    /\\ Guided => Focus
    /\\ wire' = [a \\in Server |-> [b \\in Server |->
                 IF RestartOf(a) \\/ RestartOf(b) THEN <<>> ELSE IF Popped(a, b) THEN Tail(wire[a][b]) ELSE wire[a][b]]]
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
    /\\ UNCHANGED <<serverVars, electionMsgs, faults, decisions, resent>>

\\* QuorumCnxManager's send queue holds one message per peer: of two queued, the older is dropped.
DropQueued(i, j) ==
    /\\ NextOn(i, j)
    /\\ Len(electionMsgs[i][j]) - OnWire(i, j) >= 2
    /\\ LET k == OnWire(i, j) + 1
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] = Part(@, 1, k - 1) \\o Part(@, k + 1, Len(@))]
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent, resent>>

\\* QuorumCnxManager's SendWorker, starting, sends j its last message again, before what is queued.
ResendLast(i, j) ==
    /\\ NextOn(i, j)
    /\\ resent /= next
    /\\ lastSent[i][j] /= <<>>
    /\\ LET k == OnWire(i, j)
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] =
                               Part(@, 1, k) \\o lastSent[i][j] \\o Part(@, k + 1, Len(@))]
    /\\ resent' = next
    /\\ UNCHANGED <<serverVars, faults, decisions, wire, next, lastSent>>

TraceInit == /\\ Init /\\ wire = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ next = 1
             /\\ lastSent = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ resent = 0

TraceNext ==
    \\/ FleStep
    \\/ \\E i, j \\in Server : Transmit(i, j){extra}

NotDone == next <= Total

ASSUME TLCSet(1, 0)
Prog == /\\ IF next > TLCGet(1)
           THEN /\\ TLCSet(1, next)
                /\\ PrintT(<<"fleprogress", next, state, logicalclock, proposedVote, electionMsgs, wire>>)
           ELSE TRUE
        /\\ IF TLCGet("distinct") >= {BUDGET}
           THEN PrintT(<<"budget", TLCGet("distinct")>>) /\\ TLCSet("exit", TRUE)
           ELSE TRUE
=============================================================================
"""


def fle_config(el: Elections) -> str:
    return ("CONSTANTS\n    Server <- VServer\n    InitZxid <- VInitZxid\n    InitEpoch <- VInitEpoch\n"
            f"    MaxFaults = {el.servers * (el.rounds - 1)}\n"
            "INIT TraceInit\nNEXT TraceNext\nCONSTRAINT Prog\nINVARIANT NotDone\n")


PROGRESS_FIELDS = ("next", "state", "logicalclock", "proposedVote", "electionMsgs", "wire")


def validate_elections(el: Elections, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                       echo: Callable[[str], None] = lambda s: None, guide: bool = True) -> FleValidation:
    """Check ``el``'s notifications with TLC (module docstring): with the guide first when ``guide``, then without;
    never raises for a departure."""
    spent, runs = 0.0, 0
    for guided in (True, False) if guide else (False,):
        result = FleValidation(el.recording, el.servers, len(el.notices), el.after_end, el.later)
        folder = observed_folder(SPEC_DIR / "FastLeaderElection.tla", "VFle", fle_module(el, widenings, guided),
                                 fle_config(el), "zabref-flevalidate-", work)
        searched = check_observed(result, folder, "VFle", "fleprogress", PROGRESS_FIELDS)
        spent += result.tlc_seconds
        runs += 1
        result.tlc_seconds, result.runs, result.guided = spent, runs, guided
        if not searched:
            return result
        result.frontier = int(result.best.get("next", 1))
        result.failure = _report(el, result, folder)
        echo(f"zk validate (election): {result.distinct_states:,} states explored"
             f"{' with the guide' if guided else ''}, none makes every notification"
             f"{f' (stopped at its budget of {BUDGET:,} states)' if result.inconclusive else ''}")
    return result


def _report(el: Elections, result: FleValidation, folder: Path) -> str:
    g, best = result.frontier, result.best
    n = el.notices[g - 1] if 0 < g <= len(el.notices) else None
    lines = [f"notification {g} of {len(el.notices)} is the first FastLeaderElection.tla cannot send: "
             + (f"{n.describe()} from {n.sender} to {n.receiver}\n  at {n.where(el.recording)}" if n else "?"),
             "  in the state that sent the longest prefix of them:"]
    for s in range(1, el.servers + 1):
        part = [f"{k}={format_value(best[k][s - 1])}" for k in ("state", "logicalclock", "proposedVote") if k in best]
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
        lines.append(f"  not proven: the search stopped at its budget of {BUDGET:,} distinct states")
    lines.append(f"  the generated module is kept in {folder}")
    return "\n".join(lines)


def validate_elections_dir(folder: str | Path, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                           echo: Callable[[str], None] = lambda s: None) -> FleValidation:
    """The notifications of ``folder``'s recording checked (WireError for a recording that does not decode)."""
    return validate_elections(elections_dir(folder), widenings=widenings, work=work, echo=echo)
