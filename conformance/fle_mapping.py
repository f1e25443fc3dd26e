"""From FastLeaderElection objects to spec/FastLeaderElection.tla's variables: one function per spec variable.

Theory of operation: the FLE replay (`conformance.fle_replay`) holds one `zabref.election.FastLeaderElection` per
server, the FIFO channels between them (the notifications each `Step` said to send, in order), and the decisions
the cores returned. This module turns those into the spec's variables in the canonical value form
(docs/values.md), so that comparing with a trace state is plain equality, as `conformance.mapping` does for Zab.tla.

A notification is the spec record ``[state, leader, zxid, electionEpoch, peerEpoch]`` (zxid as ``<<epoch,
counter>>``); a vote is ``[leader, zxid, epoch]``; a ballot box (``recvVotes``, ``outOfElection``) is a function
from sid to notification. The spec variables with no implementation counterpart are in `NOT_MAPPED`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from conformance.mapping import zxid_pair
from conformance.values import Value, canonicalize, make_function, make_record, make_set

__all__ = ["FleWorld", "MAPPED", "NOT_MAPPED", "spec_state", "notification", "vote"]

NOT_MAPPED = {
    "faults": "an environment bound (StartElection and Restart so far, per server); the driver takes those steps "
              "and the election core keeps no such counter",
}


class FleWorld:
    """What the mapping reads: the cores by sid, the channels (sender, receiver) -> notifications, the decisions."""

    def __init__(self, cores: Mapping[int, Any], channels: Mapping[tuple[int, int], Sequence[Any]],
                 decisions: Sequence[tuple[int, Any]]) -> None:
        self.cores, self.channels, self.decisions = cores, channels, decisions

    @property
    def sids(self) -> list[int]:
        return sorted(self.cores)


def vote(v: Any) -> Value:
    """A `Vote` as the spec's ``[leader, zxid, epoch]``."""
    return make_record([("leader", v.leader), ("zxid", zxid_pair(v.zxid)), ("epoch", v.epoch)])


def notification(n: Any) -> Value:
    """A `Notification` as the spec's ``[state, leader, zxid, electionEpoch, peerEpoch]``."""
    return make_record([("state", n.state.name), ("leader", n.leader), ("zxid", zxid_pair(n.zxid)),
                        ("electionEpoch", n.election_epoch), ("peerEpoch", n.peer_epoch)])


def _box(box: Mapping[int, Any]) -> Value:
    return make_function((sid, notification(n)) for sid, n in box.items())


def state(w: FleWorld) -> Value:
    """``state[i]``: FastLeaderElection.state (QuorumPeer's LOOKING / FOLLOWING / LEADING)."""
    return [w.cores[s].state.name for s in w.sids]


def logicalclock(w: FleWorld) -> Value:
    """``logicalclock[i]``: FastLeaderElection.logicalclock."""
    return [w.cores[s].logicalclock for s in w.sids]


def proposedVote(w: FleWorld) -> Value:  # noqa: N802 -- the spec's name
    """``proposedVote[i]``: FastLeaderElection.proposed_vote (the end vote once decided)."""
    return [vote(w.cores[s].proposed_vote) for s in w.sids]


def recvVotes(w: FleWorld) -> Value:  # noqa: N802
    """``recvVotes[i]``: FastLeaderElection.recv_votes, the ballot box of the current round."""
    return [_box(w.cores[s].recv_votes) for s in w.sids]


def outOfElection(w: FleWorld) -> Value:  # noqa: N802
    """``outOfElection[i]``: FastLeaderElection.out_of_election, ballots of FOLLOWING/LEADING servers."""
    return [_box(w.cores[s].out_of_election) for s in w.sids]


def finalizing(w: FleWorld) -> Value:
    """``finalizing[i]``: FastLeaderElection.finalizing (waiting finalizeWait for a better vote)."""
    return [w.cores[s].finalizing for s in w.sids]


def electionMsgs(w: FleWorld) -> Value:  # noqa: N802
    """``electionMsgs[i][j]``: the notifications core i sent to j (its `Send` outputs) not yet received by j."""
    return [[[notification(n) for n in w.channels.get((i, j), ())] for j in w.sids] for i in w.sids]


def decisions(w: FleWorld) -> Value:
    """``decisions``: every `Decision` a core returned, as ``[sid, round, leader, quorum, looking]``."""
    return make_set(make_record([("sid", sid), ("round", d.round), ("leader", d.leader),
                                 ("quorum", canonicalize(frozenset(d.quorum))),
                                 ("looking", canonicalize(frozenset(d.looking)))]) for sid, d in w.decisions)


MAPPED: dict[str, Callable[[FleWorld], Value]] = {
    f.__name__: f for f in (state, logicalclock, proposedVote, recvVotes, outOfElection, finalizing, electionMsgs,
                            decisions)
}


def spec_state(world: FleWorld) -> dict[str, Value]:
    """Every mapped spec variable of FastLeaderElection.tla, canonical."""
    return {name: f(world) for name, f in MAPPED.items()}
