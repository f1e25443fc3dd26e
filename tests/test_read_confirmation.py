"""A leader answers a sync once a quorum has confirmed, after the sync arrived, that it still leads (zabref's
`client_sync`; spec/ZabSync.tla's PING round under SyncConfirms). It PINGs only a learner whose sync it has sent
(ZabSync.tla's Pinged), so every answer it reads was sent after the learner's ACKEPOCH: before it, the learner may
hold a later epoch whose leader committed with it (spec/MC_fivestale: counted, such an answer lets a deposed leader
answer a sync that misses that commit; the mutation PingBeforeSyncCounts)."""

from __future__ import annotations

import pytest
from helpers import decide
from test_core import ackepoch, followerinfo, pkt, z

from zabref.core.effects import Effects, Timing
from zabref.core.node import Node
from zabref.core.packets import PacketType, ServerState
from zabref.core.zab import LearnerPhase, Persistent, ZabState
from zabref.errors import RemoteProtocolError

PING = pkt(PacketType.PING)


def _pings_to(eff: Effects) -> list[int]:
    return [peer for peer, p in eff.send if p.type == PacketType.PING]


def _leader_with_a_returning_learner(accepted_epoch: int) -> Node:
    """Leader 1 of three established epoch 1 with learner 3, whose connection then closed; learner 2 connects with
    FOLLOWERINFO(``accepted_epoch``) and is sent LEADERINFO: the leader holds no learner past ACKEPOCH."""
    node = Node(1, (1, 2, 3), Persistent(), Timing(tick_s=0.05, init_limit=10, sync_limit=5))
    node.start(0.0)
    decide(node, 1, 0.0)
    node.connection_opened(3, inbound=True)
    node.packet(3, followerinfo(3, 0), 0.0)
    node.packet(3, ackepoch(0, 0), 0.0)
    node.packet(3, pkt(PacketType.ACK, z(1, 0)), 0.0)
    core = node.core
    assert core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST
    node.connection_closed(3, 0.01, inbound=True)
    node.connection_opened(2, inbound=True)
    node.packet(2, followerinfo(2, accepted_epoch), 0.02)
    assert core.learner_phase[2] == LearnerPhase.LEADERINFO and core.zab_state == ZabState.BROADCAST
    return node


def test_no_ping_goes_to_a_learner_before_its_sync_and_an_answer_to_none_is_refused() -> None:
    """No PING goes to a learner before its sync is sent (a ZooKeeper learner leaves on one: docs/zookeeper.md,
    item 7), so nothing it sends before can confirm: an answer to a PING never sent is the connection's error, and
    counts nothing."""
    node = _leader_with_a_returning_learner(accepted_epoch=2)  # a later epoch: 2 will refuse the LEADERINFO
    eff = node.client_sync(7, 0.03)
    assert _pings_to(eff) == [] and not eff.answers
    with pytest.raises(RemoteProtocolError, match="an answer from 2 to a PING that this leader did not send"):
        node.packet(2, PING, 0.04)
    assert node.pings[2] == [0, 0] and not node.tick(0.05).answers


def test_the_first_answer_after_ackepoch_confirms_it() -> None:
    """A learner not PINGed when the sync arrived (its sync was not sent) confirms it with its answer to the first
    PING it is sent once it is."""
    node = _leader_with_a_returning_learner(accepted_epoch=0)
    assert _pings_to(node.client_sync(7, 0.03)) == [] and _pings_to(node.tick(0.04)) == []
    node.packet(2, ackepoch(0, 0), 0.05)  # 2 accepted epoch 1: what it sends from now on, it sends with it
    assert node.core.learner_phase[2] not in (LearnerPhase.FOLLOWERINFO, LearnerPhase.LEADERINFO)
    assert _pings_to(node.tick(0.06)) == [2]  # the tick's PING asks for the answer the sync still needs
    assert node.packet(2, PING, 0.07).answers == ((7, {"zxid": 0}),)


def test_an_answer_after_ackepoch_confirms_at_once() -> None:
    """The other side of the rule: a learner past ACKEPOCH confirms with its answer to the PING sent at the sync."""
    node = _leader_with_a_returning_learner(accepted_epoch=0)
    node.packet(2, ackepoch(0, 0), 0.03)
    assert _pings_to(node.client_sync(7, 0.04)) == [2]
    assert node.packet(2, PING, 0.05).answers == ((7, {"zxid": 0}),)
