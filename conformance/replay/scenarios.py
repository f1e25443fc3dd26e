"""The regression scenarios: what each committed trace in traces/regression/ must show, as a monitor over steps.

Theory of operation
-------------------
A scenario is a property of a *path*, not of one state: "a transaction is committed, then its leader crashes, then a
new leader is established that still has it". So each scenario is a small monitor (an automaton) that reads the
steps of a path one at a time -- the state before, the action and its parameters, the state after -- and carries a
small hashable memory (which transaction, which server). `conformance.replay.regress` searches the product of the state
graph and the monitor breadth-first, so the trace it returns is a shortest path of the graph that the monitor
accepts: the shortest witness of the scenario the model has, not merely a path through some state.

States are the canonical JSON objects of the trace format (docs/values.md): functions over Server are lists indexed
from 0 for server 1, transactions are ``{"zxid": [epoch, counter], "value": v}``. Each monitor's ``step`` returns
its next memory, ``ACCEPT``, or ``None`` to stay where it is.

The set follows issue 5 (seed 004's Fig. 3 and Fig. 4, a join of an established leader, each synchronization mode,
an election with split votes -- in the fine-grained spec/FastLeaderElection.tla, model ``fle_ci``) and adds the
case no action-coverage trace reaches: a leader whose new epoch must rise above a follower's acceptedEpoch (the
seeded bug ``epoch_ignores_acceptedepoch`` hides there).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["ACCEPT", "Scenario", "SCENARIOS", "ZOOKEEPER_SCENARIOS", "LATE_SCENARIOS", "by_name"]

ACCEPT = "accept"

State = dict[str, Any]
Memory = Any
StepFn = Callable[[Memory, State, str, dict[str, Any], State], Memory]


@dataclass(frozen=True)
class Scenario:
    name: str          # the trace file's stem in traces/regression/
    config: str        # the model whose graph holds the witness
    seed: str          # where the protocol documents state it
    why: str           # what a failure of this trace would mean
    step: StepFn


def _key(txn: dict[str, Any]) -> str:
    return json.dumps(txn, sort_keys=True)


def _has(history: list[dict[str, Any]], key: str) -> bool:
    return any(_key(t) == key for t in history)


def _established(s: State, k: int) -> bool:
    """IsPrimary: server k+1 leads and has reached BROADCAST."""
    return s["state"][k] == "LEADING" and s["zabState"][k] == "BROADCAST"


def _srv(params: dict[str, Any], name: str = "i") -> int:
    return params[name] - 1


# -- seed 004, Fig. 3 -------------------------------------------------------------------------------------------

def _commits_two(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """A leader's ACK that commits two transactions or more at once; then another follower of that leader takes the
    last two of its COMMITs, one after the other (the first brings it to the one before the new commit point)."""
    if m is None:
        if action == "LeaderProcessACK":
            k = _srv(params)
            if after["lastCommitted"][k] - before["lastCommitted"][k] >= 2:
                return k, _srv(params, "j"), after["lastCommitted"][k]
        return None
    k, acker, point = m
    f = _srv(params)
    if (action == "FollowerProcessCOMMIT" and f != acker and _srv(params, "j") == k
            and before["lastCommitted"][f] == point - 1 and after["lastCommitted"][f] == point):
        return ACCEPT
    return None


def _fig3(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    if m is None:
        if after["committed"] and not before["committed"]:
            t = after["committed"][0]
            leaders = [k for k in range(len(after["state"])) if _established(after, k) and t in after["history"][k]]
            return ("committed", _key(t), t["zxid"][0], leaders[0]) if leaders else None
        return None
    phase, key, epoch, old = m
    if phase == "committed" and action == "Crash" and _srv(params) == old:
        return ("crashed", key, epoch, old)
    if phase == "crashed":
        for k in range(len(after["state"])):
            if k != old and _established(after, k) and after["currentEpoch"][k] > epoch and _has(after["history"][k], key):
                return ACCEPT
    return None


# -- seed 004, Fig. 4 -------------------------------------------------------------------------------------------

def _fig4(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    committed = {_key(t) for t in after["committed"]}
    if m is None:
        if action == "ClientRequest":
            t = after["history"][_srv(params)][-1]
            return ("proposed", _key(t), t["zxid"][0], _srv(params))
        return None
    phase, key, epoch, old = m[:4]
    if key in committed:
        return None  # the proposal got committed after all: this path is no witness (BFS tries the others)
    if phase == "proposed" and action == "Crash" and _srv(params) == old:
        return ("crashed", key, epoch, old)
    if phase == "crashed":
        for k in range(len(after["state"])):
            if k != old and _established(after, k) and after["currentEpoch"][k] > epoch \
                    and not _has(after["history"][k], key):
                m, phase = ("skipped", key, epoch, old, k), "skipped"  # and see below: it may end here too
                break
    if phase == "skipped":
        new = m[4]
        if after["leader"][old] == new + 1 and after["zabState"][old] == "BROADCAST" \
                and after["state"][old] == "FOLLOWING" and not _has(after["history"][old], key):
            return ACCEPT
        return m
    return None


# -- a follower joins a leader that is already established --------------------------------------------------------

def _join(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    if m is None:
        if action == "BecomeFollower":
            i, j = _srv(params), _srv(params, "j")
            if _established(before, j) and before["history"][j]:
                return ("joining", i, j)
        return None
    _, i, j = m
    if after["leader"][i] == j + 1 and after["state"][i] == "FOLLOWING" and after["zabState"][i] == "BROADCAST":
        return ACCEPT
    return None


# -- each synchronization mode, up to the follower's UPTODATE ----------------------------------------------------

def _sync(mode: str, needs: str | None, foreign: bool = False) -> StepFn:
    """FollowerProcess<mode>(i, j) -- with ``foreign``, while i holds a transaction j's history lacks (a TRUNC of a
    learner that holds only j's outstanding proposals is sync-outstanding-sent-again's) -- then, after
    FollowerProcess<needs> when given, i's UPTODATE."""
    def step(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
        if action == f"FollowerProcess{mode}":  # a sync of this kind starts (again: a later one of the same follower)
            i, j = _srv(params), _srv(params, "j")
            if foreign and all(_has(before["history"][j], _key(t)) for t in before["history"][i]):
                return None
            return (mode, i, j, needs is None)
        if m is None or m == "over":
            return None
        _, i, j, ready = m
        if (params.get("i"), params.get("j")) != (i + 1, j + 1):
            return None
        if needs and action == f"FollowerProcess{needs}":
            return (mode, i, j, True)
        if ready and action == "FollowerProcessUPTODATE":
            return ACCEPT
        if action in SYNC_HEADS or action == "FollowerProcessNEWLEADER" and not ready:
            return "over"  # the sync of this kind ended without what it needs: a later sync of another kind is not it
        return None
    return step


#: The actions that take a sync's first packet.
SYNC_HEADS = frozenset({"FollowerProcessDIFF", "FollowerProcessTRUNC", "FollowerProcessSNAP"})


def _snap(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    if m is None:
        if action == "FollowerProcessSNAP" and after["history"][_srv(params)]:
            return ("snap", _srv(params), _srv(params, "j"))
        return None
    _, i, j = m
    if action == "FollowerProcessUPTODATE" and (_srv(params), _srv(params, "j")) == (i, j):
        return ACCEPT
    return None


# -- TRUNC to a non-empty prefix, committed by NEWLEADER --------------------------------------------------------

def _trunc(proposals_behind: bool) -> StepFn:
    """FollowerProcessTRUNC(i, j) takes a TRUNC to a non-empty prefix of i's history, a non-empty suffix of it to go,
    with PROPOSALs queued behind it (``proposals_behind``) or nothing but NEWLEADER; at i's NEWLEADER the history is
    that prefix followed by those proposals (or the prefix alone), the suffix gone; then i's UPTODATE."""
    def step(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
        if m is None:
            if action != "FollowerProcessTRUNC":
                return None
            i, j = _srv(params), _srv(params, "j")
            channel = before["msgs"][j][i]
            to = channel[0]["zxid"]
            keep = tuple(_key(t) for t in before["history"][i] if t["zxid"] <= to)
            drop = tuple(_key(t) for t in before["history"][i] if t["zxid"] > to)
            behind = any(p["type"] == "PROPOSAL" for p in channel[1:])
            return ("truncated", i, j, keep, drop) if to != [0, 0] and keep and drop and behind == proposals_behind \
                else None
        phase, i, j, keep, drop = m
        if (params.get("i"), params.get("j")) != (i + 1, j + 1):
            return None
        if phase == "truncated" and action == "FollowerProcessNEWLEADER":
            now = [_key(t) for t in after["history"][i]]
            extended = len(now) > len(keep)  # the proposals behind the TRUNC follow the prefix
            if now[:len(keep)] == list(keep) and not set(drop) & set(now) and extended == proposals_behind:
                return ("committed", i, j, keep, drop)
        if phase == "committed" and action == "FollowerProcessUPTODATE":
            return ACCEPT
        return None
    return step


# -- a learner holding an outstanding proposal is synced again by its leader in BROADCAST ---------------------------

def _outstanding(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """FollowerProcessTRUNC(i, j) to a transaction (not to the empty history) from a leader j in BROADCAST while i
    holds a proposal of j's history that j has not committed; then i, in BROADCAST, takes j's COMMIT of it. (A TRUNC
    to the empty history is left out: ZooKeeper's FileTxnLog.truncate keeps the first logged transaction when the
    zxid precedes it, docs/zookeeper.md, "Every seat", finding 2.)"""
    if m is None:
        if action != "FollowerProcessTRUNC":
            return None
        i, j = _srv(params), _srv(params, "j")
        if not _established(before, j) or before["lastCommitted"][j] == 0:
            return None
        outstanding = [_key(t) for t in before["history"][j][before["lastCommitted"][j]:]]
        held = [k for k in outstanding if _has(before["history"][i], k)]
        return ("truncated", i, j, held[0]) if held else None
    _, i, j, key = m
    if action == "FollowerProcessCOMMIT" and (_srv(params), _srv(params, "j")) == (i, j):
        done = {_key(t) for t in after["history"][i][:after["lastCommitted"][i]]}
        if key in done:
            return ACCEPT
    return m


# -- the new epoch rises above a follower's acceptedEpoch --------------------------------------------------------

def _epoch_above(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    if m is None:
        if action == "LeaderProcessFOLLOWERINFO":
            i, j = _srv(params), _srv(params, "j")
            head = before["msgs"][j][i][0]
            if head["zxid"][0] >= before["newEpoch"][i]:
                return ("raised", i, after["newEpoch"][i])
        return None
    _, i, epoch = m
    if _established(after, i) and after["currentEpoch"][i] == epoch:
        return ACCEPT
    return None


# -- FastLeaderElection: split votes, a quorum for one leader, then a better vote wins ----------------------------

def _split_vote(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """The servers start split (each votes for itself); a quorum agrees on some leader A and waits in finalize; a
    better vote reaches them, and every server decides the same leader B != A."""
    seen = m or frozenset()
    for k, waiting in enumerate(after["finalizing"]):
        if waiting:
            seen = seen | {after["proposedVote"][k]["leader"]}
    leaders = {v["leader"] for v in after["proposedVote"]}
    if all(st != "LOOKING" for st in after["state"]) and len(leaders) == 1 and seen - leaders:
        return ACCEPT
    return seen or None


# -- FastLeaderElection: a decided server's notification of an older round reaches a LOOKING server -----------------

def _older_round_ballot(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """HandleFromDecided(i, j) takes a FOLLOWING or LEADING notification of a round below i's own, and i goes on
    looking: the notification belongs to outOfElection only, never to i's ballot box of this round."""
    if action != "HandleFromDecided":
        return None
    i, j = _srv(params), _srv(params, "j")
    n = before["electionMsgs"][j][i][0]
    if n["electionEpoch"] < before["logicalclock"][i] and after["state"][i] == "LOOKING":
        return ACCEPT
    return None


# -- FastLeaderElection: a resend with a quorum in the ballot box waits in finalize again ----------------------------

def _resend_waits_again(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """ResendNotifications(i) where i's ballot box holds a quorum agreeing with its vote: i waits in finalize again,
    as ZooKeeper's lookForLeader does when it takes its own resent notification."""
    if action == "ResendNotifications" and after["finalizing"][_srv(params)]:
        return ACCEPT
    return None


# -- NEWLEADER that leaves the new epoch's proposals for UPTODATE (NewLeaderDefers: ZooKeeper 3.9.3+) ------------

def _deferred(behind: bool) -> StepFn:
    """FollowerProcessNEWLEADER(i, j) leaves transactions staged (spec/README.md, departure 12); with ``behind``, a
    PROPOSAL from j is then staged behind them; then i's UPTODATE logs them all: its history ends with what was
    staged and nothing stays staged."""
    def step(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
        if m is None:
            if action == "FollowerProcessNEWLEADER" and after["stagedHistory"][_srv(params)]:
                return ("deferred", _srv(params), _srv(params, "j"), not behind)
            return None
        _, i, j, ready = m
        if (params.get("i"), params.get("j")) != (i + 1, j + 1):
            return None
        if action == "FollowerProcessPROPOSAL" and len(after["stagedHistory"][i]) > len(before["stagedHistory"][i]):
            return ("deferred", i, j, True)
        if ready and action == "FollowerProcessUPTODATE":
            staged = before["stagedHistory"][i]
            if not after["stagedHistory"][i] and after["history"][i][len(after["history"][i]) - len(staged):] == staged:
                return ACCEPT
        return None
    return step


SCENARIOS = (
    Scenario("fig3-committed-survives-leader-crash", "ci", "seed 004, Fig. 3",
             "A transaction committed in epoch e is in the history of the leader established after e's leader "
             "crashed: the new leader must have learned it from a quorum member. Failing means a committed write "
             "can be lost.", _fig3),
    Scenario("fig4-skipped-proposal-stays-skipped", "ci", "seed 004, Fig. 4",
             "A proposal only the crashed leader logged is skipped by the next epoch; when the old leader comes back "
             "it must drop it (TRUNC or SNAP) before it serves. Failing means a skipped proposal can be delivered.",
             _fig4),
    Scenario("join-established-leader", "ci", "seed 000, phase 2 (a learner connecting to an established leader)",
             "A server joins a leader that has already reached BROADCAST with a non-empty history, is synced, and "
             "reaches BROADCAST itself.", _join),
    Scenario("sync-diff", "ci", "seed 000, phase 2, DIFF",
             "A follower is synced by DIFF followed by at least one PROPOSAL, then NEWLEADER and UPTODATE.",
             _sync("DIFF", "PROPOSALInSync")),
    Scenario("sync-trunc", "ci", "seed 000, phase 2, TRUNC",
             "A follower with a proposal the leader does not have is truncated, then completes synchronization.",
             _sync("TRUNC", None, foreign=True)),
    Scenario("sync-snap", "ci", "seed 000, phase 2, SNAP",
             "A follower receives a non-empty snapshot of the leader's history, then completes synchronization.",
             _snap),
    Scenario("sync-trunc-then-proposals", "ci3", "seed 000, phase 2, TRUNC (then the PROPOSALs after t)",
             "A follower whose history runs past the leader's is sent TRUNC to a non-empty prefix with PROPOSALs "
             "behind it; at NEWLEADER its history is that prefix and those proposals, its own suffix gone, and it "
             "reaches UPTODATE. Only a model with three transactions reaches it (ci3: the ci model cannot). Failing "
             "means a truncation keeps what it must drop, drops what it must keep, or loses the proposals behind it.",
             _trunc(proposals_behind=True)),
    Scenario("sync-trunc-to-prefix", "ci", "seed 000, phase 2, TRUNC (to a non-empty prefix)",
             "A follower whose history runs past the leader's is sent TRUNC to a non-empty prefix of it and nothing "
             "after; at NEWLEADER its history is exactly that prefix (on disk: a truncation to that zxid, not to "
             "the empty history), and it reaches UPTODATE. Failing means a truncation keeps or drops the wrong "
             "transactions.", _trunc(proposals_behind=False)),
    Scenario("ack-commits-two-at-once", "ci", "seed 000, phase 3, step 3 (COMMIT each proposal a quorum ACKed)",
             "One ACK makes a quorum of two transactions or more at once (a follower synced past an uncommitted "
             "proposal ACKs a later PROPOSAL before its UPTODATE ACKs the one its sync carried), the leader sends "
             "a COMMIT for each, in order, and another follower "
             "takes them one after the other: a ZooKeeper follower applies a COMMIT only to its oldest unapplied "
             "transaction and exits on any other. Failing means one COMMIT of the last, which such a follower "
             "cannot take.",
             _commits_two),
    Scenario("sync-outstanding-sent-again", "ci", "seed 000, phase 2 (a learner joining a leader in BROADCAST); "
             "ZooKeeper's LearnerHandler.syncFollower and Leader.startForwarding",
             "A follower that logged a proposal its leader has not committed yet goes back to election and joins the "
             "same leader again: the leader truncates it to its commit point and sends the proposal again, and the "
             "follower later takes its COMMIT. Failing means the sync left the proposal in place (a DIFF from it), "
             "which a ZooKeeper follower cannot take: it commits only what came on its connection and exits at that "
             "COMMIT (docs/zookeeper.md, item 8).", _outstanding),
    Scenario("epoch-above-follower-acceptedepoch", "ci", "seed 000, phase 1, step 2 (e' greater than any e received)",
             "The leader hears FOLLOWERINFO with an acceptedEpoch at least its own proposed epoch and must raise the "
             "new epoch above it, then establishes that epoch. The action-coverage traces never reach this: it is "
             "the trace that catches seeded bug epoch_ignores_acceptedepoch.", _epoch_above),
    Scenario("fle-split-vote-better-vote-ends-finalize", "fle_ci",
             "seed 003, steps 5-8 (finalizeWait); seed 002 (vote order)",
             "Every server starts voting for itself; a quorum agrees on a leader and waits in finalize; a better "
             "vote arrives within the wait, and all three servers decide the better leader. Failing means the vote "
             "order or the finalize wait is wrong (seeded bug fle_vote_order_sid_reversed fails here).",
             _split_vote),
    Scenario("fle-older-round-ballot-stays-out-of-the-box", "fle_ci",
             "seed 003, scenarios 2 and 3 (notifications of decided servers); ZooKeeper's lookForLeader",
             "A LOOKING server in a later round takes a FOLLOWING or LEADING notification of an earlier round and "
             "keeps looking: the ballot counts toward joining an established leader (outOfElection), never toward "
             "this round's ballot box. Failing means a server can follow the leader of an older round (seeded bug "
             "follows_older_round fails here).", _older_round_ballot),
    Scenario("fle-resend-waits-again", "fle_ci",
             "ZooKeeper's lookForLeader (notTimeout; its own notification in its recvqueue); spec/FLE.md, departures",
             "A better notification of a decided server in another round ends a finalize wait and leaves the vote and "
             "the quorum agreeing with it as they were; nothing arrives for notTimeout, the server sends its vote "
             "again and, its own copy taken like a peer's, waits in finalize again. Failing means a resend ignores "
             "the ballot box (seeded bug resend_forgets_quorum fails here).", _resend_waits_again),
)

#: Scenarios of a ZooKeeper model only (not committed with traces/regression, whose traces zabref also follows):
#: `zabref regress --write --in-model NAME` searches them beside ci's, into traces/zookeeper/.
ZOOKEEPER_SCENARIOS = (
    Scenario("sync-newleader-defers", "cizk39", "seed 000, phase 2, NEWLEADER; ZooKeeper 3.9.3+ Learner.syncWithLeader",
             "A follower synced by a leader in broadcast takes NEWLEADER with the leader's uncommitted proposal of "
             "the new epoch left staged, ACKs it, and logs the proposal at UPTODATE (NewLeaderDefers: spec/README.md, "
             "departure 12). A 3.9.3+ follower does this; 3.8.x and 3.9.0-3.9.2 log it at NEWLEADER and depart.",
             _deferred(behind=False)),
    Scenario("sync-newleader-defers-then-proposal", "cizk39",
             "seed 000, phase 2, NEWLEADER; ZooKeeper 3.9.3+ Learner.syncWithLeader (packetsNotLogged)",
             "As sync-newleader-defers, and a PROPOSAL of the leader between NEWLEADER and UPTODATE is staged behind "
             "what was left (no ACK until UPTODATE logs both). Failing means a follower logs or ACKs a proposal "
             "ahead of one before it.", _deferred(behind=True)),
)


def _late_crash(keeps: bool) -> StepFn:
    """A leader that logs late proposes; a follower logs the PROPOSAL; the leader crashes before its own ACK of it,
    its disk keeping only what it had logged (``keeps`` False) or the unlogged proposal too (True: the spec's Kept(i)
    allows any length from ackIndex[i][i] to its history's)."""

    def step(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
        if m is None:
            return _srv(params, "j") if action == "FollowerProcessPROPOSAL" else None
        k = m
        if action != "Crash" or _srv(params) != k or not _established(before, k):
            return None
        logged, length = before["ackIndex"][k][k], len(before["history"][k])
        kept = len(after["history"][k])
        return ACCEPT if logged < length and (kept > logged if keeps else kept == logged) else None

    return step


def _late_timeout(m: Memory, before: State, action: str, params: dict, after: State) -> Memory:
    """A leader that logs late gives up leading (LeaderTimeout) with a proposal it has not logged: LOOKING, its
    whole history is what a crash keeps (Kept(i)), so the write must be durable before anything of the step leaves."""
    if action != "LeaderTimeout":
        return None
    k = _srv(params)
    return ACCEPT if _established(before, k) and before["ackIndex"][k][k] < len(before["history"][k]) else None


#: Scenarios of model tinylate (zabref with [cluster] leader_logs_late), which no action-coverage trace of it
#: reaches: tests/test_late_leader.py searches them in tinylate's graph and replays the witnesses against zabref.
LATE_SCENARIOS = (
    Scenario("late-leader-crash-loses-unlogged", "tinylate", "spec/README.md, departure 13 (LeaderLogsLate)",
             "A late leader's PROPOSAL left and a follower logged it; the leader's power cut came before its own log "
             "write was durable, and its disk holds only what it had logged. Failing means the write was durable "
             "before the PROPOSAL left (then the leader is no late one) or the crash lost what it had logged.",
             _late_crash(keeps=False)),
    Scenario("late-leader-crash-keeps-unlogged", "tinylate", "spec/README.md, departure 13 (LeaderLogsLate)",
             "As late-leader-crash-loses-unlogged, but the write reached the disk before the power cut, without the "
             "leader's own ACK: the restarted server holds the proposal. Failing means a held write was lost or its "
             "sync counted as the leader's ACK.", _late_crash(keeps=True)),
    Scenario("late-leader-times-out-unlogged", "tinylate", "spec/README.md, departure 13 (LeaderLogsLate: Kept)",
             "A late leader with a proposal it has not logged gives up leading: from then on its whole history is "
             "what a crash keeps. Failing means the held write was not made durable with the role's change.",
             _late_timeout),
)


def by_name(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"no scenario {name!r}; known: {', '.join(s.name for s in SCENARIOS)}")
