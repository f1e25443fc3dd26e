"""A better vote put back at the tail of lookForLeader's queue (conformance/validate/flemodule.py, `Requeue`): in
3.8.0's run of ZOOKEEPER-4837's schedule, server 1, waiting in finalize after server 2's round-2 vote for 2, met 2's
better round-2 vote for 3 (x's longer log) and put it back behind 2's round-3 votes, which its queue already held
(`recvqueue.put`); it went to round 3 on them, voted 2 in that round (notification 36) and then dropped the vote for
3 as of an older round. FastLeaderElection.tla's CanHandle takes the better vote next, so it has 1 vote for 3 in
round 2 first, which the run never shows (docs/zookeeper.md, "Windows for elections")."""

from __future__ import annotations

from pathlib import Path

import pytest

from flebuild import fixture_elections, needs_widening

#: The first 45 notifications of that run (`zabref zk faults --schedule zookeeper-4837 --version 3.8.0`).
REQUEUE = Path(__file__).parent / "fixtures" / "zk" / "requeue-4837-elections.json"


@pytest.mark.slow
@pytest.mark.deep
def test_a_better_vote_put_back_behind_the_queue_is_a_behaviour(tla, tmp_path, monkeypatch):
    """The run's first 45 notifications are a behaviour of VFle, found by the guided searches; without `Requeue`
    the guided searches stop at notification 36 (1's round-3 vote for 2), and the search without the guide, cut at
    20,000 states, has no verdict."""
    el = fixture_elections(REQUEUE)
    assert len(el.notices) == 45
    loose = needs_widening(REQUEUE, "Requeue", budget=20_000, work=tmp_path, monkeypatch=monkeypatch)
    assert not loose.matched and loose.inconclusive and loose.guided_frontier == 36, loose.failure
    assert "LOOKING vote (leader 2, zxid <<1, 258>>, peerEpoch 1) of round 3 from 1 to 2" in loose.failure
