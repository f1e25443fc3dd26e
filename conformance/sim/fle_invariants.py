"""The invariants of spec/FastLeaderElection.tla that a simulated run can check, after every step of every server.

Theory of operation: `ElectionInvariants` is an `conformance.sim.Observer` beside `conformance.sim.invariants`'s
`SpecInvariants` (the Zab module's). After a server's step it reads that server's election state -- the
`zabref.core.election.FastLeaderElection` its node holds: state, own vote (the spec's ``InitVote(i)`` of the current
round), proposed vote -- and evaluates each invariant below, one function named as in the spec. The vote order is
the spec's ``TotalOrderPredicate`` (seed 002), written here again on purpose: the checker must not use the order of
the code it checks (a seeded bug changes that one). `NOT_SIMULATED` gives, for the model's other checks, why not.
"""

from __future__ import annotations

from typing import Any

from zabref.core.packets import ServerState

__all__ = ["ElectionInvariants", "FLE_INVARIANTS", "NOT_SIMULATED", "total_order_predicate"]


def total_order_predicate(new: Any, cur: Any) -> bool:
    """Spec ``TotalOrderPredicate(new, cur)``: new beats cur -- the greater epoch, then the greater zxid (the whole
    64 bits), then the greater sid."""
    return (new.epoch, new.zxid, new.leader) > (cur.epoch, cur.zxid, cur.leader)


def ProposalAtLeastOwnVote(fle: Any) -> bool:  # noqa: N802 (the spec's names)
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


FLE_INVARIANTS = (ProposalAtLeastOwnVote, RoleMatchesVote)

#: The checks of spec/MC_fle_ci.cfg the simulator does not evaluate, each with the reason.
NOT_SIMULATED = {
    "TypeOK": "the election's types are Python's (zabref.core.election's dataclasses check their fields)",
    "FinalizeOnlyWithQuorum": "not evaluated yet: it counts the box's ballots that agree in the round "
                              "(AgreeingInRound), which this observer does not compute",
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
                        f"proposed vote {fle.proposed_vote}")
        return None

    def crashed(self, sim: Any, sid: int) -> str | None:
        return None

    def finished(self, sim: Any) -> str | None:
        return None
