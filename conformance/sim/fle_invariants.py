"""The invariants of spec/FastLeaderElection.tla that a simulated run can check, after every step of every server.

Theory of operation: `ElectionInvariants` is an `conformance.sim.Observer` beside `conformance.sim.invariants`'s
`SpecInvariants` (the Zab module's). After a server's step it reads that server's election state -- the
`zabref.core.election.FastLeaderElection` its node holds: state, round, ballot box, finalize wait, own vote (the
spec's ``InitVote(i)`` of the current round), proposed vote -- and evaluates each invariant below, one function named
as in the spec. The vote order is the spec's ``TotalOrderPredicate`` (seed 002) and the quorum a strict majority of
the voters, both written here again on purpose: the checker must not use the code it checks (a seeded bug changes
that). `NOT_SIMULATED` gives, for the model's other checks, why not.
"""

from __future__ import annotations

from typing import Any

from zabref.core.packets import ServerState

__all__ = ["ElectionInvariants", "FLE_INVARIANTS", "NOT_SIMULATED", "total_order_predicate"]


def total_order_predicate(new: Any, cur: Any) -> bool:
    """Spec ``TotalOrderPredicate(new, cur)``: new beats cur -- the greater epoch, then the greater zxid (the whole
    64 bits), then the greater sid."""
    return (new.epoch, new.zxid, new.leader) > (cur.epoch, cur.zxid, cur.leader)


def BallotsOfOwnRound(fle: Any) -> bool:  # noqa: N802 (the spec's names)
    """A LOOKING server's ballot box holds ballots of its own round only."""
    if fle.state != ServerState.LOOKING:
        return True
    return all(n.election_epoch == fle.logicalclock for n in fle.recv_votes.values())


def FinalizeOnlyWithQuorum(fle: Any) -> bool:  # noqa: N802
    """Only a LOOKING server waits in finalize, and only while a quorum of its ballot box agrees with its vote in
    its round (the spec's ``AgreeingInRound``: the ballot's leader, zxid and epoch are the vote's, its round the
    server's)."""
    if not fle.finalizing:
        return True
    if fle.state != ServerState.LOOKING or fle.proposed_vote is None:
        return False
    v, r = fle.proposed_vote, fle.logicalclock
    agreeing = {s for s, n in fle.recv_votes.items()
                if (n.leader, n.zxid, n.peer_epoch, n.election_epoch) == (v.leader, v.zxid, v.epoch, r)}
    return 2 * len(agreeing & fle.voters) > len(fle.voters)


def ProposalAtLeastOwnVote(fle: Any) -> bool:  # noqa: N802
    """A LOOKING server never proposes a vote worse than its own initial vote of the round."""
    if fle.state != ServerState.LOOKING or fle.own_vote is None or fle.proposed_vote is None:
        return True
    return not total_order_predicate(fle.own_vote, fle.proposed_vote)


def RoleMatchesVote(fle: Any) -> bool:  # noqa: N802
    """A server that LEADs decided for itself; a server that FOLLOWs decided for another server."""
    if fle.proposed_vote is None:
        return True
    if fle.state == ServerState.LEADING:
        return fle.proposed_vote.leader == fle.sid
    if fle.state == ServerState.FOLLOWING:
        return fle.proposed_vote.leader != fle.sid
    return True


FLE_INVARIANTS = (BallotsOfOwnRound, FinalizeOnlyWithQuorum, ProposalAtLeastOwnVote, RoleMatchesVote)

#: The checks of spec/MC_fle_ci.cfg the simulator does not evaluate, each with the reason.
NOT_SIMULATED = {
    "TypeOK": "the election's types are Python's (zabref.core.election's dataclasses check their fields)",
    "LeaderGreatestAmongLookingVoters": "needs each voter's InitVote of the deciding round, which a voter that has "
                                        "moved on (or restarted, starting its rounds again) no longer holds",
}


class ElectionInvariants:
    """The `conformance.sim.Observer` of the module docstring."""

    def step(self, sim: Any, sid: int, eff: Any) -> str | None:
        fle = sim.server(sid).node.fle
        for invariant in FLE_INVARIANTS:
            if not invariant(fle):
                return (f"invariant {invariant.__name__} violated (server {sid}, FastLeaderElection.tla): "
                        f"{fle.state.name} round {fle.logicalclock}, own vote {fle.own_vote}, "
                        f"proposed vote {fle.proposed_vote}, finalizing {fle.finalizing}, ballot box "
                        + ", ".join(f"{s}: {n.state.name} for {n.leader} in round {n.election_epoch}"
                                    for s, n in sorted(fle.recv_votes.items())))
        return None

    def crashed(self, sim: Any, sid: int) -> str | None:
        return None

    def finished(self, sim: Any) -> str | None:
        return None
