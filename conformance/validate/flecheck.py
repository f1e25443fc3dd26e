"""Election notifications of a ZooKeeper run held against spec/FastLeaderElection.tla, from outside: ``VFle``.

Theory of operation
-------------------
The proxy sees what each server's QuorumCnxManager put on the wire (`conformance.zk.elections`). Module ``VFle``
EXTENDS FastLeaderElection (all servers from an empty data dir: zxid <<0, 0>>, epoch 0, the notifications
`conformance.zk.elections` keeps; MaxFaults the servers times the rounds beyond the first, since a server that
decided and lost its leader looks again in the next round -- FastLeaderElection's StartElection, a fault -- as a
server of a slow start does) and keeps apart, in each channel ``electionMsgs[i][j]``, the notifications
that crossed the wire -- its first ``onwire[i][j]`` -- from those still in i's send queue:

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
  it crossed the wire (``onwire >= 1``).

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

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        return (f"zk validate (election): servers={self.servers} notifications={self.notifications} "
                f"after-end={self.after_end} later={self.later} steps={self.steps} states={self.distinct_states} "
                f"tlc={self.tlc_seconds:.1f}s result={self.verdict}")


def _record(n: Any) -> str:
    return format_value({"s": n.sender, "r": n.receiver, "st": n.state, "leader": n.leader, "zxid": n.zxid,
                         "round": n.round, "pe": n.peer_epoch})


def fle_module(el: Elections, widenings: tuple[str, ...] = WIDENINGS) -> str:
    """The text of module VFle for ``el`` (module docstring); ``widenings``: which of `WIDENINGS` Next has."""
    records = [_record(n) for n in el.notices]
    extra = "".join(f"\n    \\/ \\E i, j \\in Server : {w}(i, j)" for w in WIDENINGS if w in widenings)
    return f"""---------------------------- MODULE VFle ----------------------------
\\* Generated by conformance/validate/flecheck.py from a ZooKeeper recording: {el.recording}
\\* One record a notification the proxy saw on an election connection. Do not edit.
EXTENDS FastLeaderElection, TLC
VARIABLES onwire, next, lastSent, resent

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

\\* FastLeaderElection's steps: a server takes a notification only once it crossed the wire.
FleStep ==
    /\\ Next
    /\\ \\A a, b \\in Server : Popped(a, b) => onwire[a][b] >= 1
    /\\ onwire' = [a \\in Server |-> [b \\in Server |->
                   IF RestartOf(a) \\/ RestartOf(b) THEN 0 ELSE IF Popped(a, b) THEN onwire[a][b] - 1 ELSE onwire[a][b]]]
    /\\ UNCHANGED <<next, lastSent, resent>>

\\* The next observation is on the pair i -> j.
NextOn(i, j) == next <= Total /\\ O(next).s = i /\\ O(next).r = j

\\* The oldest queued notification of i -> j crosses the wire: the next observation, in the proxy's order.
Transmit(i, j) ==
    /\\ NextOn(i, j)
    /\\ onwire[i][j] < Len(electionMsgs[i][j])
    /\\ Matches(electionMsgs[i][j][onwire[i][j] + 1], O(next))
    /\\ onwire' = [onwire EXCEPT ![i][j] = @ + 1]
    /\\ next' = next + 1
    /\\ lastSent' = [lastSent EXCEPT ![i][j] = <<electionMsgs[i][j][onwire[i][j] + 1]>>]
    /\\ UNCHANGED <<serverVars, electionMsgs, faults, decisions, resent>>

\\* QuorumCnxManager's send queue holds one message per peer: of two queued, the older is dropped.
DropQueued(i, j) ==
    /\\ NextOn(i, j)
    /\\ Len(electionMsgs[i][j]) - onwire[i][j] >= 2
    /\\ LET k == onwire[i][j] + 1
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] = Part(@, 1, k - 1) \\o Part(@, k + 1, Len(@))]
    /\\ UNCHANGED <<serverVars, faults, decisions, onwire, next, lastSent, resent>>

\\* QuorumCnxManager's SendWorker, starting, sends j its last message again, before what is queued.
ResendLast(i, j) ==
    /\\ NextOn(i, j)
    /\\ resent /= next
    /\\ lastSent[i][j] /= <<>>
    /\\ LET k == onwire[i][j]
       IN  electionMsgs' = [electionMsgs EXCEPT ![i][j] =
                               Part(@, 1, k) \\o lastSent[i][j] \\o Part(@, k + 1, Len(@))]
    /\\ resent' = next
    /\\ UNCHANGED <<serverVars, faults, decisions, onwire, next, lastSent>>

TraceInit == /\\ Init /\\ onwire = [a \\in Server |-> [b \\in Server |-> 0]] /\\ next = 1
             /\\ lastSent = [a \\in Server |-> [b \\in Server |-> <<>>]] /\\ resent = 0

TraceNext ==
    \\/ FleStep
    \\/ \\E i, j \\in Server : Transmit(i, j){extra}

NotDone == next <= Total

ASSUME TLCSet(1, 0)
Prog == IF next > TLCGet(1)
        THEN /\\ TLCSet(1, next)
             /\\ PrintT(<<"fleprogress", next, state, logicalclock, proposedVote, electionMsgs, onwire>>)
        ELSE TRUE
=============================================================================
"""


def fle_config(el: Elections) -> str:
    return ("CONSTANTS\n    Server <- VServer\n    InitZxid <- VInitZxid\n    InitEpoch <- VInitEpoch\n"
            f"    MaxFaults = {el.servers * (el.rounds - 1)}\n"
            "INIT TraceInit\nNEXT TraceNext\nCONSTRAINT Prog\nINVARIANT NotDone\n")


PROGRESS_FIELDS = ("next", "state", "logicalclock", "proposedVote", "electionMsgs", "onwire")


def validate_elections(el: Elections, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                       echo: Callable[[str], None] = lambda s: None) -> FleValidation:
    """Check ``el``'s notifications with TLC (module docstring); never raises for a departure."""
    result = FleValidation(el.recording, el.servers, len(el.notices), el.after_end, el.later)
    folder = observed_folder(SPEC_DIR / "FastLeaderElection.tla", "VFle", fle_module(el, widenings), fle_config(el),
                             "zabref-flevalidate-", work)
    if not check_observed(result, folder, "VFle", "fleprogress", PROGRESS_FIELDS):
        return result
    result.frontier = int(result.best.get("next", 1))
    result.failure = _report(el, result, folder)
    echo(f"zk validate (election): {result.distinct_states} states explored, none makes every notification")
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
                    wire = best["onwire"][a - 1][b - 1]
                    lines.append(f"    {a}->{b}: {len(ch)} notifications, {wire} on the wire; queued: "
                                 + ", ".join(f"{m['state']}({m['leader']})" for m in ch[wire:]))
    lines.append(f"  the generated module is kept in {folder}")
    return "\n".join(lines)


def validate_elections_dir(folder: str | Path, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                           echo: Callable[[str], None] = lambda s: None) -> FleValidation:
    """The notifications of ``folder``'s recording checked (WireError for a recording that does not decode)."""
    return validate_elections(elections_dir(folder), widenings=widenings, work=work, echo=echo)
