"""A just-decided server's answer with the vote it held before the election (conformance/validate/flemodule.py,
`OldVoteReply`): in a paced random run of a mixed 3.9.5 ensemble (zabref as server 1), ZooKeeper server 2 decided to
lead in round 4 and answered 1's round-4 LOOKING vote with LEADING, leader 3, zxid <<1, 14>>, round 3 (notification
76): its vote as a follower of 3 in round 3. Its own log shows the window: WorkerReceiver logged "my state:LEADING"
for 1's notification before QuorumPeer logged LEADING, which it does after setCurrentVote -- lookForLeader sets the
state and returns, and only then does QuorumPeer.run set the vote an answer reads (FastLeaderElection.java's
WorkerReceiver, 3.9.5). FastLeaderElection.tla's decided server answers with its new vote in the step it decides
(docs/zookeeper.md, "Windows for elections")."""

from __future__ import annotations

from pathlib import Path

import pytest

from flebuild import fixture_elections, needs_widening

#: The first 80 notifications of that run (`zabref zk faults --version 3.9.5 --zabref 1 --duration 30 --rate 5
#: --seed 1`, 2026-12-03).
OLDVOTE = Path(__file__).parent / "fixtures" / "zk" / "oldvote-395-elections.json"


@pytest.mark.slow
@pytest.mark.deep
def test_an_answer_with_the_vote_before_the_election_is_a_behaviour_right_after_the_decision(tla, tmp_path,
                                                                                              monkeypatch):
    """The run's first 80 notifications are a behaviour of VFle, found by the guided searches; without
    `OldVoteReply` the guided searches stop at notification 76, and the search without the guide, cut at 60,000
    states (the two variables stay, so window 3's guided search takes 50,330), has no verdict."""
    el = fixture_elections(OLDVOTE)
    assert len(el.notices) == 80
    stale = el.notices[75]
    assert (stale.sender, stale.receiver, stale.state, stale.leader, stale.round) == (2, 1, "LEADING", 3, 3)
    loose = needs_widening(OLDVOTE, "OldVoteReply", budget=60_000, work=tmp_path, monkeypatch=monkeypatch)
    assert not loose.matched and loose.inconclusive and loose.guided_frontier == 76, loose.failure
