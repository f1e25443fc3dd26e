"""A decided server's vote takes the epoch Zab established (spec/FastLeaderElection.tla's UpdateElectionVote;
ZooKeeper's QuorumPeer.updateElectionVote, ZOOKEEPER-1732): a leader once its NEWLEADER quorum is in, a follower at
UPTODATE. Without it a ZooKeeper server that looks for a leader hears decided votes of one ensemble that disagree on
the epoch and cannot join (docs/zookeeper.md, "A zabref server in a ZooKeeper ensemble", item 6)."""

from __future__ import annotations

from helpers import decide
from test_core import ackepoch, followerinfo, pkt, z

from zabref.core import payloads
from zabref.core.effects import Timing
from zabref.core.node import Node
from zabref.core.packets import Notification, PacketType, QuorumPacket, ServerState
from zabref.core.zab import Persistent, ZabState

TIMING = Timing(tick_s=0.05, init_limit=10, sync_limit=5)


def _fle(effects) -> list[str]:
    return [a.name for a in effects.actions if a.module == "FLE"]


def test_a_leader_updates_its_vote_at_its_newleader_quorum() -> None:
    node = Node(1, (1, 2, 3), Persistent(), TIMING)
    node.start(0.0)
    decide(node, 1, 0.0)
    node.connection_opened(2, inbound=True)
    node.packet(2, followerinfo(2, 0), 0.0)
    node.packet(2, ackepoch(0, 0), 0.0)
    assert node.fle.proposed_vote.epoch == 0 and node.core.zab_state == ZabState.SYNCHRONIZATION
    effects = node.packet(2, pkt(PacketType.ACK, z(1, 0)), 0.0)  # the ACK of NEWLEADER: the quorum {1, 2}
    assert node.core.zab_state == ZabState.BROADCAST and _fle(effects) == ["UpdateElectionVote"]
    assert node.fle.proposed_vote.epoch == 1
    answer = node.notification(3, Notification(ServerState.LOOKING, 3, 0, 1, 0), 0.1).notify
    assert [(s.to, s.notification) for s in answer] == [(3, Notification(ServerState.LEADING, 1, 0, 1, 1))]


def test_a_follower_updates_its_vote_at_uptodate_only() -> None:
    node = Node(1, (1, 2, 3), Persistent(), TIMING)
    node.start(0.0)
    node.notification(2, Notification(ServerState.LEADING, 2, 0, 1, 0), 0.0)  # joins leader 2 on its ensemble's
    node.notification(3, Notification(ServerState.FOLLOWING, 2, 0, 1, 0), 0.0)  # votes (epoch 0)
    assert node.fle.state is ServerState.FOLLOWING and node.fle.proposed_vote.epoch == 0
    steps = [QuorumPacket(PacketType.LEADERINFO, z(1, 0), payloads.encode_leaderinfo_data(0x10000)),
             pkt(PacketType.DIFF, 0), pkt(PacketType.NEWLEADER, z(1, 0))]
    for packet in steps:
        assert not _fle(node.packet(2, packet, 0.0))
    assert node.core.current_epoch == 1 and node.fle.proposed_vote.epoch == 0  # NEWLEADER: its epoch, not its vote
    effects = node.packet(2, pkt(PacketType.UPTODATE, 0), 0.0)
    assert node.core.zab_state == ZabState.BROADCAST and _fle(effects) == ["UpdateElectionVote"]
    assert node.fle.proposed_vote.leader == 2 and node.fle.proposed_vote.epoch == 1
    assert not _fle(node.tick(0.05))  # once only
