"""From real servers' election state to spec/FastLeaderElection.tla's variables: one function per spec variable.

Theory of operation: the FLE replay (`conformance.replay.fle_driver`) reads every server's ``state`` through the control
socket (`zabref.runtime.control`): its FastLeaderElection fields (``fle``), the notifications waiting on each of its
election connections (``votes``), and the decisions it took (``decisions``; the driver keeps those of a process that
crashed, since the spec's ``decisions`` is checking-only and survives a Restart). This module turns those into the
spec's variables in the canonical value form (docs/values.md), so that comparing with a trace state is plain equality,
as `conformance.replay.mapping` does for Zab.tla.

A notification is the spec record ``[state, leader, zxid, electionEpoch, peerEpoch]`` (zxid as ``<<epoch,
counter>>``); a vote is ``[leader, zxid, epoch]``; a ballot box (``recvVotes``, ``outOfElection``) is a function
from sid to notification. ``electionMsgs[i][j]`` is what server j holds from i, connection by connection in the order
they were opened (the driver first waits until everything sent has arrived). The spec variables with no
implementation counterpart are in `NOT_MAPPED`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conformance.replay.mapping import zxid_pair
from conformance.tla.values import Value, canonicalize, make_function, make_record, make_set

__all__ = ["FleWorld", "MAPPED", "NOT_MAPPED", "spec_state", "notification", "vote"]

NOT_MAPPED = {
    "faults": "an environment bound (StartElection and Restart so far, per server); the driver takes those steps "
              "and the election core keeps no such counter",
}


class FleWorld:
    """What the mapping reads: every server's ``state`` by sid, and every decision taken so far."""

    def __init__(self, states: Mapping[int, Mapping[str, Any]], decisions: Sequence[Mapping[str, Any]]) -> None:
        self.states, self.decisions = states, decisions

    @property
    def sids(self) -> list[int]:
        return sorted(self.states)

    def fle(self, sid: int) -> Mapping[str, Any]:
        return self.states[sid]["fle"]


def vote(v: Mapping[str, Any]) -> Value:
    """A vote ``{leader, zxid, epoch}`` as the spec's ``[leader, zxid, epoch]``."""
    return make_record([("leader", v["leader"]), ("zxid", zxid_pair(v["zxid"])), ("epoch", v["epoch"])])


def notification(n: Mapping[str, Any]) -> Value:
    """A notification as the spec's ``[state, leader, zxid, electionEpoch, peerEpoch]``."""
    return make_record([("state", n["state"]), ("leader", n["leader"]), ("zxid", zxid_pair(n["zxid"])),
                        ("electionEpoch", n["electionEpoch"]), ("peerEpoch", n["peerEpoch"])])


def _box(box: Mapping[str, Any]) -> Value:
    return make_function((int(sid), notification(n)) for sid, n in box.items())


def state(w: FleWorld) -> Value:
    """``state[i]``: FastLeaderElection.state (QuorumPeer's LOOKING / FOLLOWING / LEADING)."""
    return [w.fle(s)["state"] for s in w.sids]


def logicalclock(w: FleWorld) -> Value:
    """``logicalclock[i]``: FastLeaderElection.logicalclock."""
    return [w.fle(s)["logicalclock"] for s in w.sids]


def proposedVote(w: FleWorld) -> Value:  # noqa: N802 -- the spec's name
    """``proposedVote[i]``: FastLeaderElection.proposed_vote (the end vote once decided)."""
    return [vote(w.fle(s)["proposedVote"]) for s in w.sids]


def recvVotes(w: FleWorld) -> Value:  # noqa: N802
    """``recvVotes[i]``: FastLeaderElection.recv_votes, the ballot box of the current round."""
    return [_box(w.fle(s)["recvVotes"]) for s in w.sids]


def outOfElection(w: FleWorld) -> Value:  # noqa: N802
    """``outOfElection[i]``: FastLeaderElection.out_of_election, ballots of FOLLOWING/LEADING servers."""
    return [_box(w.fle(s)["outOfElection"]) for s in w.sids]


def finalizing(w: FleWorld) -> Value:
    """``finalizing[i]``: FastLeaderElection.finalizing (waiting finalizeWait for a better vote)."""
    return [w.fle(s)["finalizing"] for s in w.sids]


def electionMsgs(w: FleWorld) -> Value:  # noqa: N802
    """``electionMsgs[i][j]``: the notifications i sent that j has not taken: what j holds from i."""
    def held(i: int, j: int) -> list[Value]:
        channels = sorted((v for v in w.states[j]["votes"] if v["peer"] == i), key=lambda v: v["serial"])
        return [notification(n) for v in channels for n in v["held"]]

    return [[held(i, j) for j in w.sids] for i in w.sids]


def decisions(w: FleWorld) -> Value:
    """``decisions``: every decision taken, as ``[sid, round, leader, quorum, looking]``."""
    return make_set(make_record([("sid", d["sid"]), ("round", d["round"]), ("leader", d["leader"]),
                                 ("quorum", canonicalize(frozenset(d["quorum"]))),
                                 ("looking", canonicalize(frozenset(d["looking"])))]) for d in w.decisions)


MAPPED: dict[str, Callable[[FleWorld], Value]] = {
    f.__name__: f for f in (state, logicalclock, proposedVote, recvVotes, outOfElection, finalizing, electionMsgs,
                            decisions)
}


def spec_state(world: FleWorld) -> dict[str, Value]:
    """Every mapped spec variable of FastLeaderElection.tla, canonical."""
    return {name: f(world) for name, f in MAPPED.items()}
