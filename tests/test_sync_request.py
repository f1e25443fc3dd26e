"""A client's sync at a follower takes spec/ZabSync.tla's steps on the quorum connection, in ZooKeeper's packets: the
follower sends REQUEST of op sync (ClientSync), the leader keeps it until what it had proposed is committed and a
quorum confirmed its leadership (LeaderProcessREQUEST, the PING round), answers SYNC after the COMMITs
(LeaderSendSYNC), and the follower answers its oldest waiting client (FollowerProcessSYNC)."""

from __future__ import annotations

import struct

import pytest
from helpers import decide
from test_core import ackepoch, followerinfo, pkt, z

from zabref.core import jute, payloads, zktxn
from zabref.core.effects import Effects, Timing
from zabref.core.node import Node
from zabref.core.packets import PacketType, QuorumPacket, ServerState
from zabref.core.zab import LearnerPhase, Persistent, ZabState
from zabref.errors import CodecError, RemoteProtocolError

PING = pkt(PacketType.PING)  # a learner's answer to a keepalive PING
STEP = QuorumPacket(PacketType.PING, payloads.PING_STEP, b"")  # its answer to a step PING of a sync's round
SYNC = pkt(PacketType.SYNC)
TIMING = Timing(tick_s=0.05, init_limit=10, sync_limit=5)


def sync_request(session: int = 0x10000A, cxid: int = 3, op: int = payloads.OP_SYNC) -> QuorumPacket:
    """A learner's REQUEST as ZooKeeper's Learner.request writes one: zxid -1, the header, the record."""
    return QuorumPacket(PacketType.REQUEST, -1, payloads.encode_request_data(session, cxid, op, "/a"))


def _sent(eff: Effects) -> list[tuple[int, PacketType]]:
    return [(peer, p.type) for peer, p in eff.send]


def _actions(eff: Effects) -> list[str]:
    """The spec actions an input took, as `Module.Name`."""
    return [f"{a.module}.{a.name}" for a in eff.actions]


def _leader(timing: Timing = TIMING) -> Node:
    """Leader 1 of three, epoch 1 established with learners 2 and 3 (both UPTODATE), nothing proposed."""
    node = Node(1, (1, 2, 3), Persistent(), timing)
    node.start(0.0)
    decide(node, 1, 0.0)
    for f in (2, 3):
        node.connection_opened(f, inbound=True)
        node.packet(f, followerinfo(f, 0), 0.0)
    for f in (2, 3):
        node.packet(f, ackepoch(0, 0), 0.0)
    for f in (2, 3):
        node.packet(f, pkt(PacketType.ACK, z(1, 0)), 0.0)
    core = node.core
    assert core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST
    assert all(core.learner_phase[f] == LearnerPhase.UPTODATE for f in (2, 3))
    return node


def _follower() -> Node:
    """Server 1 of three, following leader 2 of epoch 1 in broadcast, its history empty."""
    node = Node(1, (1, 2, 3), Persistent(), TIMING)
    node.start(0.0)
    decide(node, 2, 0.0)
    node.packet(2, QuorumPacket(PacketType.LEADERINFO, z(1, 0), payloads.encode_leaderinfo_data(0x10000)), 0.0)
    node.packet(2, pkt(PacketType.DIFF, 0), 0.0)
    node.packet(2, pkt(PacketType.NEWLEADER, z(1, 0)), 0.0)
    node.packet(2, pkt(PacketType.UPTODATE, 0), 0.0)
    assert node.core.state == ServerState.FOLLOWING and node.core.zab_state == ZabState.BROADCAST
    return node


# ------------------------------------------------------------------------------------------------ the follower


def test_a_followers_sync_is_zookeepers_request_and_syncs_are_answered_in_order() -> None:
    node = _follower()
    eff = node.client_sync(7, 0.1)
    assert not eff.answers and not eff.forwards and _sent(eff) == [(2, PacketType.REQUEST)]
    request = eff.send[0][1]
    # Learner.request: zxid -1, long sessionId, int cxid, int type (9: sync), then SyncRequest's ustring path
    assert request.zxid == -1 and request.data == struct.pack(">qiii", 0, 0, 9, 1) + b"/"
    assert _actions(eff) == ["ZabSync.ClientSync"]
    node.client_sync(8, 0.2)
    eff = node.packet(2, SYNC, 0.3)
    assert eff.answers == ((7, {"zxid": 0}),) and _actions(eff) == ["ZabSync.FollowerProcessSYNC"]
    assert node.packet(2, SYNC, 0.4).answers == ((8, {"zxid": 0}),)
    with pytest.raises(RemoteProtocolError, match="SYNC from 2 with no sync of this server waiting"):
        node.packet(2, SYNC, 0.5)


def test_a_follower_answers_every_ping_of_its_leader_echoing_its_zxid() -> None:
    """As ZooKeeper's Learner.ping: the answer carries the PING's zxid, so that the leader knows a step PING's answer
    (FollowerProcessPING); a keepalive's answer is no step of the spec."""
    node = _follower()
    eff = node.packet(2, QuorumPacket(PacketType.PING, payloads.PING_STEP), 0.1)
    assert eff.send == ((2, STEP),) and _actions(eff) == ["ZabSync.FollowerProcessPING"]
    eff = node.packet(2, QuorumPacket(PacketType.PING, z(1, 4)), 0.2)
    assert eff.send == ((2, QuorumPacket(PacketType.PING, z(1, 4), b"")),) and not eff.actions
    assert node.packet(3, QuorumPacket(PacketType.PING, payloads.PING_STEP), 0.3) == Effects()  # not its leader


def test_a_sync_answered_after_commits_reads_them() -> None:
    """The COMMITs before the SYNC on the connection were taken first: the answer names what they delivered."""
    node = _follower()
    node.client_sync(7, 0.1)
    value = payloads.encode_proposal_data(z(1, 1), b"v")
    node.packet(2, pkt(PacketType.PROPOSAL, z(1, 1), value), 0.2)
    node.packet(2, pkt(PacketType.COMMIT, z(1, 1)), 0.3)
    assert node.packet(2, SYNC, 0.4).answers == ((7, {"zxid": z(1, 1)}),)


def test_an_expired_sync_keeps_its_place_for_the_leaders_answer() -> None:
    node = _follower()
    node.client_sync(7, 0.0)
    node.client_sync(8, 0.5 * TIMING.submit_timeout_s)
    node.packet(2, PING, TIMING.submit_timeout_s)  # the leader is heard: no FollowerTimeout
    eff = node.tick(TIMING.submit_timeout_s + 0.01)  # 7 expires, 8 not yet
    assert [rid for rid, a in eff.answers if a.get("retry")] == [7]
    assert node.core.state == ServerState.FOLLOWING
    later = TIMING.submit_timeout_s + 0.02
    assert node.packet(2, SYNC, later).answers == ()  # the leader's answer to 7: nobody waits for it now
    assert node.packet(2, SYNC, later).answers == ((8, {"zxid": 0}),)


def test_a_follower_that_stops_following_refuses_its_waiting_syncs() -> None:
    node = _follower()
    node.client_sync(7, 0.1)
    eff = node.connection_closed(2, 0.2, inbound=False)
    eff = node.tick(0.3)  # FollowerTimeout: the connection to the leader is gone
    assert node.core.state == ServerState.LOOKING
    assert [(rid, a["retry"]) for rid, a in eff.answers] == [(7, True)]
    assert not node.follower_syncs


# ------------------------------------------------------------------------------------------------ the leader


def test_the_leader_answers_a_learners_sync_once_a_quorum_confirmed() -> None:
    node = _leader()
    eff = node.packet(2, sync_request(), 0.1)
    assert _sent(eff) == [(2, PacketType.PING), (3, PacketType.PING)]  # PingAll, nothing committed to wait for
    assert {p.zxid for _, p in eff.send} == {payloads.PING_STEP} and _actions(eff) == ["ZabSync.LeaderProcessREQUEST"]
    assert node.pending_syncs[0][0] == 2
    eff = node.packet(2, STEP, 0.2)
    assert _sent(eff) == [(2, PacketType.SYNC)]  # 2's answer confirms: {1, 2} is a quorum
    assert _actions(eff) == ["ZabSync.LeaderProcessPING", "ZabSync.LeaderSendSYNC"]  # in the one input
    assert not node.pending_syncs


def test_an_answer_to_a_ping_older_than_the_sync_confirms_nothing() -> None:
    node = _leader()
    eff = node.tick(0.05)  # the tick's keepalive PINGs to 2 and 3, before the sync: no step of the spec
    assert {p.zxid for _, p in eff.send} == {0} and not eff.actions
    node.packet(2, sync_request(), 0.1)
    assert _sent(node.packet(2, PING, 0.2)) == [] and _sent(node.packet(3, PING, 0.2)) == []  # the tick's
    assert not node.packet(2, PING, 0.2).actions  # an answer to a keepalive is no step either
    assert _sent(node.packet(3, STEP, 0.3)) == [(2, PacketType.SYNC)]


def test_only_answers_to_step_pings_confirm_a_learners_sync() -> None:
    """As in the spec, whose PINGs are the round's only: an answer to a keepalive confirms nothing (counting every
    PING, this one would have met 3's mark); and an answer to a step PING the leader did not send is the
    connection's error."""
    node = _leader()
    node.packet(2, sync_request(), 0.1)
    node.tick(0.15)  # keepalives after the sync
    assert _sent(node.packet(3, PING, 0.2)) == [] and node.pending_syncs
    assert _sent(node.packet(3, STEP, 0.2)) == [(2, PacketType.SYNC)]
    with pytest.raises(RemoteProtocolError, match="answer from 3 to a PING of the sync's round that this leader "
                                                  "did not send"):
        node.packet(3, STEP, 0.3)
    assert node.step_pings[3] == [1, 1] and node.pings[3] == [2, 2]  # nothing counted


def test_the_leader_sends_sync_only_after_the_commit_of_what_it_had_proposed() -> None:
    node = _leader()
    node.client_submit(1, b"x", 0.1)  # ClientRequest: <<1, 1>> proposed, not committed
    eff = node.packet(3, sync_request(), 0.2)
    assert _sent(eff) == [(2, PacketType.PING), (3, PacketType.PING)]
    assert node.packet(2, STEP, 0.3).send == () and node.packet(3, STEP, 0.3).send == ()  # confirmed, not committed
    eff = node.packet(2, pkt(PacketType.ACK, z(1, 1)), 0.4)  # a quorum logged <<1, 1>>: COMMIT, then SYNC to 3
    assert _sent(eff) == [(2, PacketType.COMMIT), (3, PacketType.COMMIT), (3, PacketType.SYNC)]
    assert _actions(eff) == ["Zab.LeaderProcessACK", "ZabSync.LeaderSendSYNC"]
    assert eff.send[-1][1] == QuorumPacket(PacketType.SYNC, 0)  # ZooKeeper's Leader.sendSync: zxid 0, no data


def test_syncs_are_answered_oldest_first() -> None:
    """LeaderSendSYNC answers the head of pendingSyncs: a later sync confirmed first waits behind an older one."""
    node = _leader()
    node.client_submit(1, b"x", 0.05)
    node.packet(3, sync_request(), 0.1)  # marks {2: 1, 3: 1}
    node.packet(2, sync_request(), 0.2)  # marks {2: 2, 3: 2}
    assert [s[0] for s in node.pending_syncs] == [3, 2]
    for _ in range(2):
        assert _sent(node.packet(2, STEP, 0.3)) == []  # both confirmed by {1, 2}, neither committed
    eff = node.packet(2, pkt(PacketType.ACK, z(1, 1)), 0.4)
    assert _sent(eff) == [(2, PacketType.COMMIT), (3, PacketType.COMMIT), (3, PacketType.SYNC), (2, PacketType.SYNC)]


def test_a_learners_syncs_go_with_its_connection() -> None:
    """SyncsDropped: a learner whose connection closes loses its waiting syncs; another learner's sync it was to
    confirm needs one answer on a new connection."""
    node = _leader()
    node.packet(2, sync_request(), 0.1)
    node.packet(3, sync_request(), 0.2)
    node.connection_closed(2, 0.3, inbound=True)
    assert [s[0] for s in node.pending_syncs] == [3]
    assert _sent(node.packet(3, STEP, 0.4)) == []  # 3 answered its first PING: the sync's mark is its second
    assert _sent(node.packet(3, STEP, 0.5)) == [(3, PacketType.SYNC)]


def test_a_learner_that_connects_again_is_sent_a_step_ping_at_the_next_tick() -> None:
    """LeaderSendPING: learner 2's connection closed and opened again while 3's sync waits for a confirmation it
    can give only on the new connection; once 2's sync is sent (not before: ZabSync.tla's Pinged), the next tick's
    PINGs are step PINGs (and only while one is needed)."""
    node = _leader()
    node.packet(3, sync_request(), 0.1)
    node.connection_closed(2, 0.15, inbound=True)
    node.connection_opened(2, inbound=True)
    node.packet(2, followerinfo(2, 0), 0.16)
    eff = node.tick(0.17)  # 2 is to answer LEADERINFO: neither a step PING nor a keepalive goes to it
    assert not eff.actions and _sent(eff) == [(3, PacketType.PING)] and {p.zxid for _, p in eff.send} == {0}
    node.packet(2, ackepoch(0, 0), 0.18)  # its sync is sent
    eff = node.tick(0.2)
    assert _actions(eff) == ["ZabSync.LeaderSendPING"] and {p.zxid for _, p in eff.send} == {payloads.PING_STEP}
    assert _sent(eff) == [(2, PacketType.PING), (3, PacketType.PING)]
    eff = node.tick(0.25)  # 2 owes that answer now: a keepalive
    assert not eff.actions and {p.zxid for _, p in eff.send} == {0}


def test_keepalives_go_only_to_learners_whose_sync_was_sent() -> None:
    """ZooKeeper's LearnerHandler.ping sends nothing before its learner's sync is under way, and a ZooKeeper learner
    that reads a PING where it waits for LEADERINFO or its sync's head leaves (after ACKEPOCH it exits the JVM,
    "Got unexpected packet from leader: PING"; a mixed ensemble's test met it, 1 run in 6): a zabref leader's
    keepalive skips a learner before its NEWLEADER, in discovery as in broadcast."""
    node = Node(1, (1, 2, 3), Persistent(), TIMING)
    node.start(0.0)
    decide(node, 1, 0.0)
    for f in (2, 3):
        node.connection_opened(f, inbound=True)
    assert _sent(node.tick(0.05)) == []  # neither sent FOLLOWERINFO
    node.packet(2, followerinfo(2, 0), 0.06)
    assert node.core.learner_phase[2] == LearnerPhase.LEADERINFO  # {1, 2}: the epoch's quorum
    assert _sent(node.tick(0.1)) == []  # 2 is to answer LEADERINFO
    node.packet(2, ackepoch(0, 0), 0.11)  # its DIFF and NEWLEADER go out
    assert _sent(node.tick(0.15)) == [(2, PacketType.PING)]
    node.packet(3, followerinfo(3, 0), 0.16)
    assert _sent(node.tick(0.2)) == [(2, PacketType.PING)]
    node.packet(3, ackepoch(0, 0), 0.21)
    assert _sent(node.tick(0.22)) == [(2, PacketType.PING), (3, PacketType.PING)]
    node.connection_closed(2, 0.23, inbound=True)  # 2 joins again while the leader is in broadcast
    node.connection_opened(2, inbound=True)
    node.packet(2, followerinfo(2, 0), 0.21)
    assert node.core.learner_phase[2] == LearnerPhase.LEADERINFO and _sent(node.tick(0.25)) == [(3, PacketType.PING)]
    node.packet(2, ackepoch(0, 0), 0.26)  # its sync is sent with LeaderProcessACKEPOCH
    assert _sent(node.tick(0.3)) == [(2, PacketType.PING), (3, PacketType.PING)]


def test_a_late_transaction_of_a_session_and_cxid_never_answers_a_newer_request() -> None:
    """kazoo numbers each connection's requests from 1, so one session's cxid comes again. A create of session s,
    cxid 1, times out (outcome unknown) while its transaction <<1, 1>> waits; the client, on a new connection, sends
    another create as cxid 1, proposed as <<1, 2>>. Both commit at one ACK: the new request is answered with its own
    transaction, not the old one's (a random mixed run on 3.9.5 once acknowledged 'c1-104' as the zxid of 'c1-97')."""
    node = _leader(Timing(tick_s=0.05, init_limit=10, sync_limit=5, submit_timeout_s=0.1))
    s = 0x300000000000002

    def create(path: str) -> bytes:
        return jute.ustring("path", path) + jute.buffer("data", b"") + zktxn.WORLD_ANYONE_ALL + jute.INT.pack(0)

    assert [p.zxid for _, p in node.zk_write(1, s, 1, 1, create("/old"), 0.0).send] == [z(1, 1), z(1, 1)]
    (answer,) = node.tick(0.15).answers
    assert answer[0] == 1 and "outcome unknown" in answer[1]["error"]
    assert [p.zxid for _, p in node.zk_write(2, s, 1, 1, create("/new"), 0.16).send] == [z(1, 2), z(1, 2)]
    (answer,) = node.packet(2, pkt(PacketType.ACK, z(1, 2)), 0.17).answers
    assert answer[0] == 2 and answer[1]["zk"]["zxid"] == z(1, 2) and answer[1]["zk"]["path"] == "/new"


@pytest.mark.parametrize("op, name", [(-10, "createSession"), (-11, "closeSession")])
def test_the_leader_refuses_a_sessions_request(op: int, name: str) -> None:
    """A zabref leader tracks no sessions: a ZooKeeper follower with global sessions forwards their creation and
    close, which it refuses as the connection's error, proposing nothing."""
    node = _leader()
    before = node.core.variables()
    with pytest.raises(RemoteProtocolError, match=rf"REQUEST of op {op} from 2: {name}: a zabref leader tracks no "
                                                  "sessions; run ZooKeeper with localSessionsEnabled=true"):
        node.packet(2, sync_request(op=op), 0.1)
    assert not node.pending_syncs and node.core.variables() == before


def test_a_forwarded_write_is_a_client_request_of_zookeepers_transaction() -> None:
    """A ZooKeeper follower's REQUEST of a create is ClientRequest at the leader: PROPOSAL of the transaction
    ZooKeeper's leader would propose (the request's session and cxid in its header, the next zxid), to every
    learner; an op no leader prepares is proposed as ZooKeeper's error transaction (UNIMPLEMENTED)."""
    node = _leader()
    record = jute.ustring("path", "/k") + jute.buffer("data", b"v") + zktxn.WORLD_ANYONE_ALL + jute.INT.pack(0)
    eff = node.packet(2, QuorumPacket(PacketType.REQUEST, -1, struct.pack(">qii", 0x10000A, 7, 1) + record), 0.1)
    assert _actions(eff) == ["Zab.ClientRequest"] and _sent(eff) == [(2, PacketType.PROPOSAL), (3, PacketType.PROPOSAL)]
    txn = zktxn.decode_txn(eff.send[0][1].data, "PROPOSAL")
    assert (txn["op"], txn["session"], txn["cxid"], txn["zxid"], txn["path"], txn["data"]) == \
        ("create", "0x10000a", 7, z(1, 1), "/k", b"v")
    assert txn["parentCVersion"] == 1 and node.core.history[-1].value[:1] == zktxn.FOREIGN
    eff = node.packet(2, QuorumPacket(PacketType.REQUEST, -1, struct.pack(">qii", 0x10000A, 8, 99)), 0.1)
    txn = zktxn.decode_txn(eff.send[0][1].data, "PROPOSAL")
    assert (txn["op"], txn["zxid"], txn["err"]) == ("error", z(1, 2), -6)


@pytest.mark.parametrize("data, offset, reason", [
    (None, 0, "data is null"),
    (struct.pack(">qi", 0, 0), 12, "type needs 4 bytes"),
    (struct.pack(">qiii", 0, 0, 9, 5) + b"/a", 16, "path length is 5 but only 2 bytes remain"),
    (struct.pack(">qiii", 0, 0, 9, 1) + b"/x", 21, "1 trailing bytes"),
])
def test_a_garbled_sync_request_is_an_error_naming_its_offset(data: bytes | None, offset: int, reason: str) -> None:
    node = _leader()
    with pytest.raises(CodecError, match=rf"REQUEST data.*{offset}.*{reason}"):
        node.packet(2, QuorumPacket(PacketType.REQUEST, -1, data), 0.1)
    assert not node.pending_syncs and node.learner_conns == {2, 3}


def test_a_request_at_a_server_that_does_not_lead_is_refused() -> None:
    node = _follower()
    with pytest.raises(RemoteProtocolError, match="REQUEST from 2, but no established leadership"):
        node.packet(2, sync_request(), 0.1)


def test_the_action_log_leaves_a_syncs_packets_out_of_a_zab_steps_sends() -> None:
    """A LeaderProcessACK that makes a sync due sends SYNC in its input; its line (spec/Zab.tla's step, whose channels
    have no SYNC) lists the COMMITs only, and ZabSync's actions get no line (`zabref validate` judges Zab's)."""
    import io
    import json

    from zabref.runtime.actionlog import ActionLog

    node = _leader()
    node.client_submit(1, b"x", 0.1)
    node.packet(3, sync_request(), 0.2)
    node.packet(2, STEP, 0.3)
    node.packet(3, STEP, 0.3)
    eff = node.packet(2, pkt(PacketType.ACK, z(1, 1)), 0.4)
    assert (3, PacketType.SYNC) in _sent(eff)
    out = io.BytesIO()
    ActionLog(out, 1).step(node, eff, lambda peer: 7)
    [line] = [json.loads(raw) for raw in out.getvalue().splitlines()]
    assert line["action"] == "LeaderProcessACK" and [p["type"] for _, p in line["sends"]] == ["COMMIT", "COMMIT"]



def test_a_leader_answers_revalidate_that_no_session_is_a_global_one() -> None:
    """A ZooKeeper learner's REVALIDATE (a client reconnected to it with a session it does not hold): a zabref
    leader holds no global session, so it answers "not valid" on the same connection, as ZooKeeper's leader answers
    of a local session, and changes nothing; a follower, or bytes that are not ``long, int``, get the connection's
    error (until 2026-12-01 every REVALIDATE closed the learner's connection, and a mixed ensemble elected again)."""
    node = _leader()
    before = node.core.variables()
    eff = node.packet(3, QuorumPacket(PacketType.REVALIDATE, -1, struct.pack(">qi", 0x2000001F, 4000)), 0.1)
    assert [(to, p.type, p.zxid, p.data) for to, p in eff.send] == [
        (3, PacketType.REVALIDATE, -1, struct.pack(">q", 0x2000001F) + b"\x00")]
    assert not eff.actions and node.core.variables() == before
    with pytest.raises(CodecError, match="REVALIDATE data"):
        node.packet(3, QuorumPacket(PacketType.REVALIDATE, -1, struct.pack(">q", 1)), 0.1)
    follower = _follower()
    with pytest.raises(RemoteProtocolError, match="REVALIDATE from 2, which is not a learner"):
        follower.packet(2, QuorumPacket(PacketType.REVALIDATE, -1, struct.pack(">qi", 1, 4000)), 0.1)
