"""The simulator's invariant checks (conformance/sim/invariants.py): the same checks as the models, each able to
fail."""

from __future__ import annotations

from pathlib import Path

from conformance.sim.fle_invariants import (
    FLE_INVARIANTS,
    BallotsOfOwnRound,
    FinalizeOnlyWithQuorum,
    ProposalAtLeastOwnVote,
    RoleMatchesVote,
)
from conformance.sim.fle_invariants import NOT_SIMULATED as FLE_NOT_SIMULATED
from conformance.sim.invariants import (
    INVARIANTS,
    NOT_SIMULATED,
    DeliveredGrows,
    HistoryWithinCurrentEpoch,
    LeaderUniqueness,
    HistoryContiguous,
    LogMatching,
    ZxidUnique,
    _View,
)
from conformance.tla.mutations import model_checks
from zabref.core.election import FastLeaderElection, Vote
from zabref.core.packets import ServerState
from zabref.core.types import Txn

SPEC = Path(__file__).resolve().parent.parent / "spec"


def _txn(e: int, c: int, v: int) -> dict:
    return {"zxid": [e, c], "value": v}


def test_every_check_of_the_models_is_simulated_or_says_why_not() -> None:
    invariants, properties = model_checks((SPEC / "MC_ci.cfg").read_text())
    simulated = [f.__name__ for f, _ in INVARIANTS]
    assert sorted(simulated + list(NOT_SIMULATED)) == sorted(invariants + properties)
    assert all(reason for reason in NOT_SIMULATED.values())


def test_leader_uniqueness_fails_on_two_leaders_of_one_epoch_at_once_or_one_after_the_other() -> None:
    v = _View((1, 2, 3))
    v.state[1], v.zabState[1], v.currentEpoch[1] = "LEADING", "BROADCAST", 1
    assert not LeaderUniqueness(v, 1)  # an established leader the record misses
    v.established[1] = {1}
    assert LeaderUniqueness(v, 1)
    # server 1 is gone (LOOKING); server 2 establishes the same epoch later: the instant check would pass
    v.state[1], v.zabState[1] = "LOOKING", "ELECTION"
    v.state[2], v.zabState[2], v.currentEpoch[2] = "LEADING", "SYNCHRONIZATION", 1
    v.established[1].add(2)
    assert not LeaderUniqueness(v, 2)
    v.established[1] = {1}
    v.established[2] = {2}
    v.currentEpoch[2] = 2
    assert LeaderUniqueness(v, 2)


def test_zxid_unique_and_log_matching_fail_on_diverging_histories() -> None:
    v = _View((1, 2, 3))
    v.history[1] = [_txn(1, 1, 1), _txn(1, 2, 2)]
    v.history[2] = [_txn(1, 1, 1)]
    assert ZxidUnique(v, 1) and ZxidUnique(v, 2) and LogMatching(v, 1) and LogMatching(v, 2)
    v.history[3] = [_txn(1, 1, 1), _txn(1, 2, 9)]  # one zxid, another value
    assert not ZxidUnique(v, 3)
    v.history[3] = [_txn(1, 1, 1), _txn(1, 1, 1), _txn(1, 2, 2)]  # the same transaction twice: a shifted log
    assert not LogMatching(v, 3)


def test_history_contiguous_fails_on_a_gap_in_an_epoch_or_an_epoch_not_begun_at_one() -> None:
    v = _View((1, 2, 3))
    v.history[1] = [_txn(1, 1, 1), _txn(1, 2, 2), _txn(2, 1, 3)]
    assert HistoryContiguous(v, 1) and HistoryContiguous(v, 2)  # an empty history too
    v.history[2] = [_txn(1, 1, 1), _txn(1, 3, 3)]  # a DIFF across a hole (ZOOKEEPER-4925)
    assert not HistoryContiguous(v, 2)
    v.history[3] = [_txn(1, 1, 1), _txn(2, 2, 3)]  # epoch 2 entered at its second transaction
    assert not HistoryContiguous(v, 3)


def _vars(last_committed: int, state: str = "FOLLOWING", zab_state: str = "BROADCAST") -> dict:
    return {"last_committed": last_committed, "state": state, "zab_state": zab_state, "accepted_epoch": 1,
            "current_epoch": 1}


def test_delivered_grows_fails_when_a_step_takes_a_delivery_back_but_not_after_a_crash() -> None:
    one, two, other = Txn(1 << 32 | 1, b"1"), Txn(1 << 32 | 2, b"2"), Txn(2 << 32 | 1, b"3")
    v = _View((1, 2, 3))
    v.set(1, _vars(2), [one, two])
    assert DeliveredGrows(v, 1)
    v.set(1, _vars(2), [one, two, other])  # appended: what was delivered stays
    assert DeliveredGrows(v, 1)
    v.set(1, _vars(1), [one, two, other])  # the commit point went back
    assert not DeliveredGrows(v, 1)
    v.set(1, _vars(2), [one, two])
    v.set(1, _vars(2), [one, other])  # a delivered transaction replaced in place (a bad TRUNC)
    assert not DeliveredGrows(v, 1)
    v.set(1, _vars(0, "LOOKING", "ELECTION"), [one], crash=True)  # a power cut starts a new incarnation
    assert DeliveredGrows(v, 1)


def test_history_within_current_epoch_fails_on_a_history_its_epochs_do_not_vouch_for() -> None:
    v = _View((1, 2, 3))
    v.history[1], v.currentEpoch[1] = [_txn(1, 1, 1), _txn(2, 1, 2)], 2
    assert HistoryWithinCurrentEpoch(v, 1) and HistoryWithinCurrentEpoch(v, 2)  # an empty history holds too
    v.currentEpoch[1] = 1  # a state transfer written before NEWLEADER set currentEpoch = 2 (newleader_before_sync)
    assert not HistoryWithinCurrentEpoch(v, 1)


def test_every_check_of_the_election_model_is_simulated_or_says_why_not() -> None:
    invariants, properties = model_checks((SPEC / "MC_fle_ci.cfg").read_text())
    simulated = [f.__name__ for f in FLE_INVARIANTS]
    assert sorted(simulated + list(FLE_NOT_SIMULATED)) == sorted(invariants + properties)


def test_the_election_invariants_use_the_spec_order_and_fail_on_a_worse_proposal_or_a_mismatched_role() -> None:
    fle = FastLeaderElection(2, frozenset({1, 2, 3}))
    fle.start_election(2 << 32 | 1, 2)  # own vote: server 2, zxid <<2, 1>>, epoch 2
    assert ProposalAtLeastOwnVote(fle) and RoleMatchesVote(fle)
    fle.proposed_vote = Vote(1, 1 << 32 | 2, 2)  # <<1, 2>>: a greater counter of an older epoch is worse
    assert not ProposalAtLeastOwnVote(fle)
    fle.proposed_vote = Vote(3, 2 << 32 | 1, 2)  # the same data, a greater sid: better
    assert ProposalAtLeastOwnVote(fle)
    fle.state = ServerState.LEADING  # leading for a vote that names server 3
    assert not RoleMatchesVote(fle)
    fle.state = ServerState.FOLLOWING
    assert RoleMatchesVote(fle)


def test_the_ballot_box_invariants_fail_on_a_ballot_of_an_older_round_and_a_finalize_wait_without_quorum() -> None:
    fle = FastLeaderElection(1, frozenset({1, 2, 3}))
    fle.start_election(0, 0)
    assert fle.logicalclock == 1 and BallotsOfOwnRound(fle) and FinalizeOnlyWithQuorum(fle)
    fle.logicalclock = 2  # round 2 (after a fault), its own ballot of round 2 ...
    fle.recv_votes = {1: fle.own_vote.notification(ServerState.LOOKING, 2)}
    assert BallotsOfOwnRound(fle)
    # ... and a FOLLOWING ballot of round 1 in the box (follows_older_round)
    fle.recv_votes[2] = Vote(3, 0, 0).notification(ServerState.FOLLOWING, 1)
    assert not BallotsOfOwnRound(fle)
    fle.state = ServerState.FOLLOWING  # a decided server's box is not read again
    assert BallotsOfOwnRound(fle)
    fle.state = ServerState.LOOKING
    fle.recv_votes = {1: fle.own_vote.notification(ServerState.LOOKING, 2)}
    fle.finalizing = True  # one agreeing ballot of three voters is no quorum
    assert not FinalizeOnlyWithQuorum(fle)
    fle.recv_votes[3] = fle.proposed_vote.notification(ServerState.LOOKING, 1)  # agrees, but of another round
    assert not FinalizeOnlyWithQuorum(fle)
    fle.recv_votes[3] = fle.proposed_vote.notification(ServerState.LOOKING, 2)
    assert FinalizeOnlyWithQuorum(fle)
    fle.state = ServerState.LEADING  # only a LOOKING server waits in finalize
    assert not FinalizeOnlyWithQuorum(fle)
