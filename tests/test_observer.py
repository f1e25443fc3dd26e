"""Observers (implementation only: the spec has none): the core, the election, the config, and real processes.

The core tests join ZabCores by FIFO channels (as tests/test_core.py does) with servers 1-3 participants and 4 an
observer. The process tests run real servers on loopback in normal mode; every wait is bounded.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from pathlib import Path

import pytest

import helpers
import test_core  # tests/ is on sys.path (no package)
from test_core import sent
from zabref import wire
from zabref.client import ClientError, ZabClient
from zabref.cluster import LocalCluster, cluster_config, find_free_base_port
from zabref.config import ClusterConfig, load_config, parse_config, render_config, write_config
from zabref.core import (
    HANDLERS,
    IMPLEMENTATION_ONLY,
    OBSERVER_HANDLERS,
    AppendTxns,
    LearnerPhase,
    ObserverPhase,
    Output,
    Persistent,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    Txn,
    ZabCore,
    ZabState,
)
from zabref.election import Decision, ObserverElection, Vote
from zabref.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from zabref.packets import PROTOCOL_VERSION, LearnerInfo, Notification, PacketType, QuorumPacket, ServerState, make_zxid

P = PacketType
PARTICIPANTS = (1, 2, 3)
OBSERVER = 4


def z(e: int, c: int) -> int:
    return make_zxid(e, c)


def t(e: int, c: int) -> Txn:
    return Txn(z(e, c), b"%d.%d" % (e, c))


def hello(kind: PacketType, sid: int, zxid: int) -> QuorumPacket:
    return QuorumPacket(kind, zxid, wire.encode_followerinfo_data(LearnerInfo(PROTOCOL_VERSION, sid)))


def inform(txn: Txn) -> QuorumPacket:
    return QuorumPacket(P.INFORM, txn.zxid, wire.encode_proposal_data(txn.value))


class Net(test_core.Net):
    """Participants 1..n and observers, joined by FIFO channels; `drain` delivers in a fixed order until quiet.
    Records what each server delivered."""

    def __init__(self, participants=PARTICIPANTS, observers=(OBSERVER,), history: tuple[Txn, ...] = ()) -> None:
        self.all = (*participants, *observers)
        e = history[-1].zxid >> 32 if history else 0
        self.core = {s: ZabCore(s, participants, Persistent(history, e, e), observers=observers) for s in self.all}
        self.ch = {(a, b): deque() for a in self.all for b in self.all if a != b}
        self.delivered: dict[int, list[Txn]] = {s: [] for s in self.all}

    def do(self, s: int, out: Output) -> Output:
        self.delivered[s] += out.deliver
        return super().do(s, out)

    def held(self, j: int, i: int) -> list[tuple[PacketType, int]]:
        return [(p.type, p.zxid) for p in self.ch[j, i]]


def established(history: tuple[Txn, ...] = (), observe: bool = True) -> Net:
    """Leader 3 elected by 2 and 3 in BROADCAST (1 stays LOOKING); the observer joined it if ``observe``."""
    net = Net(history=history)
    for s in (2, 3):
        net.do(s, net.core[s].elect_leader(3, (2, 3)))
    if observe:
        net.do(OBSERVER, net.core[OBSERVER].join_leader(3))
    net.drain()
    assert net.core[3].zab_state == ZabState.BROADCAST
    return net


# ---------------------------------------------------------------------------------------------- names


def test_observer_handlers_are_listed_as_implementation_only_and_kept_out_of_the_spec_table():
    routed = {h.__name__ for table in OBSERVER_HANDLERS.values() for h in table.values()}
    assert routed | {"observer_timeout"} == IMPLEMENTATION_ONLY
    spec_routed = {h.__name__ for table in HANDLERS.values() for h in table.values()}
    assert not spec_routed & IMPLEMENTATION_ONLY
    for name in IMPLEMENTATION_ONLY:
        assert "spec has no such action" in " ".join(getattr(ZabCore, name).__doc__.split()), name


def test_spec_variables_stay_over_the_participants():
    leader = established().core[3]
    v = leader.variables()
    assert set(v["learner_phase"]) == set(v["ack_index"]) == set(PARTICIPANTS)
    assert leader.observer_variables() == {"observer_phase": {OBSERVER: "UPTODATE"},
                                           "observer_last_zxid": {OBSERVER: 0}}


# ---------------------------------------------------------------------------------------------- quorums


def test_observerinfo_does_not_complete_a_quorum_of_followerinfo():
    """Leader 1 of participants {1, 2, 3}: itself plus observer 4 is no quorum, so no epoch is chosen."""
    net = Net()
    net.do(1, net.core[1].elect_leader(1, (1, 2)))
    leader = net.core[1]
    out = leader.receive(OBSERVER, hello(P.OBSERVERINFO, OBSERVER, 0))
    assert out == Output()
    assert (leader.zab_state, leader.accepted_epoch, leader.new_epoch) == (ZabState.DISCOVERY, 0, 1)
    assert set(leader.learner_phase.values()) == {LearnerPhase.NONE}
    assert leader.observer_phase[OBSERVER] == ObserverPhase.OBSERVERINFO
    assert leader.leader_timeout_enabled()  # a connected observer does not keep a leader alive either


def test_observer_waits_for_the_established_epoch_then_syncs_like_a_late_learner():
    net = Net(history=(t(1, 1), t(1, 2)))
    net.do(OBSERVER, net.core[OBSERVER].join_leader(3))  # OBSERVERINFO reaches leader 3 while it is in DISCOVERY
    for s in (2, 3):
        net.do(s, net.core[s].elect_leader(3, (2, 3)))
    net.step(OBSERVER, 3)
    assert net.ch[3, OBSERVER] == deque()
    net.step(2, 3)  # FOLLOWERINFO: quorum {2, 3}
    net.step(3, 2)
    net.step(2, 3)  # ACKEPOCH: SYNCHRONIZATION; the observer still waits
    assert net.core[3].zab_state == ZabState.SYNCHRONIZATION and net.ch[3, OBSERVER] == deque()
    net.step(3, 2)  # DIFF
    net.step(3, 2)  # NEWLEADER
    out = net.step(2, 3)  # ACK of NEWLEADER from 2 completes the quorum: BROADCAST, and now the observer is synced
    assert (OBSERVER, P.DIFF, z(1, 2)) in sent(out) and (OBSERVER, P.NEWLEADER, z(2, 0)) in sent(out)
    assert net.core[3].observer_phase[OBSERVER] == ObserverPhase.NEWLEADER
    net.drain()
    obs = net.core[OBSERVER]
    assert (obs.state, obs.zab_state, obs.leader) == (ServerState.OBSERVING, ZabState.BROADCAST, 3)
    assert (obs.accepted_epoch, obs.current_epoch, obs.last_committed) == (2, 2, 2)
    assert net.core[3].observer_phase[OBSERVER] == ObserverPhase.UPTODATE


def test_observer_ack_counts_toward_no_newleader_quorum():
    """An observer is synced only once the epoch is established, so while the leader waits for its quorum of ACKs
    of NEWLEADER an ACK from an observer is out of phase: rejected, and nothing changes."""
    net = Net()
    for s in (2, 3):
        net.do(s, net.core[s].elect_leader(3, (2, 3)))
    net.do(OBSERVER, net.core[OBSERVER].join_leader(3))
    net.step(OBSERVER, 3)  # OBSERVERINFO: waits
    net.step(2, 3), net.step(3, 2), net.step(2, 3)  # FOLLOWERINFO, LEADERINFO, ACKEPOCH: SYNCHRONIZATION
    leader = net.core[3]
    assert leader.zab_state == ZabState.SYNCHRONIZATION
    before = (leader.variables(), leader.observer_variables())
    with pytest.raises(RemoteProtocolError, match="no NEWLEADER to ACK"):
        leader.receive(OBSERVER, QuorumPacket(P.ACK, z(1, 0)))
    assert (leader.variables(), leader.observer_variables()) == before


def test_observer_ack_of_a_transaction_is_ignored():
    """Leader 3, follower 2 and observer 4: an ACK from the observer would make {3, 4} a majority of 4 servers, but
    the observer is not a voter, so nothing commits until participant 2 ACKs."""
    net = established()
    leader = net.core[3]
    net.do(3, leader.client_request(b"x"))
    assert net.held(3, OBSERVER) == []  # observers get no PROPOSAL
    ack_index = dict(leader.ack_index)
    assert leader.receive(OBSERVER, QuorumPacket(P.ACK, z(1, 1))) == Output()
    assert leader.ack_index == ack_index and leader.last_committed == 0
    net.step(3, 2)
    out = net.step(2, 3)
    assert out.deliver == (Txn(z(1, 1), b"x"),)
    assert sent(out) == [(2, P.COMMIT, z(1, 1)), (OBSERVER, P.INFORM, z(1, 1))]


# ---------------------------------------------------------------------------------------------- broadcast


def test_inform_delivers_in_order_and_is_logged_first():
    net = established()
    obs = net.core[OBSERVER]
    values = [b"a", b"b", b"c"]
    for v in values:
        net.do(3, net.core[3].client_request(v))
    net.step(3, 2), net.step(3, 2), net.step(3, 2)
    net.step(2, 3), net.step(2, 3)  # two ACKs: a and b committed
    assert net.held(3, OBSERVER) == [(P.INFORM, z(1, 1)), (P.INFORM, z(1, 2))]
    out = net.step(3, OBSERVER)
    assert out.persist == (AppendTxns((Txn(z(1, 1), b"a"),)),) and out.deliver == (Txn(z(1, 1), b"a"),)
    assert out.send == ()  # nothing to ACK
    net.drain()
    expected = [Txn(z(1, k + 1), v) for k, v in enumerate(values)]
    assert net.delivered[OBSERVER] == net.delivered[3] == net.delivered[2] == expected
    assert obs.history == expected and obs.last_committed == 3


def test_late_observer_gets_only_the_committed_prefix_then_informs():
    """An observer joining while a proposal is in flight is synced up to the commit point; the proposal reaches it
    as INFORM once committed, never as an uncommitted entry of its log."""
    net = established(history=(t(1, 1),), observe=False)
    net.do(3, net.core[3].client_request(b"p"))  # z(2, 1), not yet ACKed
    net.do(OBSERVER, net.core[OBSERVER].join_leader(3))
    out = net.step(OBSERVER, 3)
    assert sent(out) == [(OBSERVER, P.DIFF, z(1, 1)), (OBSERVER, P.NEWLEADER, z(2, 0))]
    net.drain()
    obs = net.core[OBSERVER]
    assert obs.history == [t(1, 1), Txn(z(2, 1), b"p")] and obs.last_committed == 2


def test_observer_with_an_empty_log_gets_a_snap():
    net = established(history=(t(1, 1), t(1, 2)), observe=False)
    net.core[OBSERVER] = ZabCore(OBSERVER, PARTICIPANTS, observers=(OBSERVER,))
    net.do(OBSERVER, net.core[OBSERVER].join_leader(3))
    out = net.step(OBSERVER, 3)
    assert sent(out) == [(OBSERVER, P.SNAP, z(1, 2)), (OBSERVER, P.NEWLEADER, z(2, 0))]
    net.drain()
    assert net.core[OBSERVER].history == [t(1, 1), t(1, 2)] and net.delivered[OBSERVER] == [t(1, 1), t(1, 2)]


def test_observer_newleader_persists_accepted_epoch_history_then_current_epoch():
    obs = ZabCore(OBSERVER, PARTICIPANTS, Persistent((t(1, 1),), 1, 1), observers=(OBSERVER,))
    assert sent(obs.join_leader(3)) == [(3, P.OBSERVERINFO, z(1, 1))]
    obs.receive(3, QuorumPacket(P.DIFF, z(1, 1)))
    obs.receive(3, QuorumPacket(P.PROPOSAL, z(1, 2), b"1.2"))
    out = obs.receive(3, QuorumPacket(P.NEWLEADER, z(2, 0)))
    assert out.persist == (SetAcceptedEpoch(2), AppendTxns((t(1, 2),)), SetCurrentEpoch(2))
    assert sent(out) == [(3, P.ACK, z(2, 0))]


def test_observer_goes_back_to_election_on_a_deposed_leaders_newleader():
    obs = ZabCore(OBSERVER, PARTICIPANTS, Persistent((t(3, 1),), 3, 3), observers=(OBSERVER,))
    obs.join_leader(1)
    obs.receive(1, QuorumPacket(P.DIFF, 0))
    out = obs.receive(1, QuorumPacket(P.NEWLEADER, z(2, 0)))
    assert out.role == ServerState.LOOKING and out.persist == () and out.close == (1, 2, 3)
    assert obs.history == [t(3, 1)]


def test_killing_the_observer_does_not_stop_commits():
    net = established()
    net.core[3].connection_closed(OBSERVER)
    assert net.core[3].observer_phase[OBSERVER] == ObserverPhase.NONE
    net.do(3, net.core[3].client_request(b"y"))
    net.step(3, 2)
    out = net.step(2, 3)
    assert out.deliver == (Txn(z(1, 1), b"y"),) and sent(out) == [(2, P.COMMIT, z(1, 1))]


def test_participant_going_looking_closes_observer_connections_too():
    out = established().core[3].go_looking()
    assert out.close == (1, 2, OBSERVER)


# ---------------------------------------------------------------------------------------------- misuse and garbage


def test_an_observer_never_leads():
    obs = ZabCore(OBSERVER, PARTICIPANTS, observers=(OBSERVER,))
    with pytest.raises(LocalProtocolError, match="observer never votes"):
        obs.elect_leader(OBSERVER, (1, 2, OBSERVER))
    with pytest.raises(LocalProtocolError, match="participants"):
        ZabCore(1, PARTICIPANTS, observers=(OBSERVER,)).join_leader(OBSERVER)
    with pytest.raises(LocalProtocolError, match="ObserverTimeout"):
        obs.observer_timeout()
    with pytest.raises(LocalProtocolError, match="both participant and observer"):
        ZabCore(1, PARTICIPANTS, observers=(3,))


def _leader_broadcast() -> ZabCore:
    return established().core[3]


def _leader_discovery() -> ZabCore:
    c = ZabCore(3, PARTICIPANTS, observers=(OBSERVER,))
    c.elect_leader(3, (2, 3))
    return c


def _observer_in(phase: ZabState) -> ZabCore:
    obs = ZabCore(OBSERVER, PARTICIPANTS, observers=(OBSERVER,))
    obs.join_leader(3)
    if phase == ZabState.BROADCAST:
        obs.receive(3, QuorumPacket(P.DIFF, 0))
        obs.receive(3, QuorumPacket(P.NEWLEADER, z(1, 0)))
    assert obs.zab_state == phase
    return obs


def _follower() -> ZabCore:
    f = ZabCore(2, PARTICIPANTS, observers=(OBSERVER,))
    f.join_leader(3)
    return f


@pytest.mark.parametrize(
    "make, frm, packet, message",
    [
        (_leader_broadcast, OBSERVER, hello(P.OBSERVERINFO, OBSERVER, 0), "already sent OBSERVERINFO"),
        (_leader_discovery, OBSERVER, QuorumPacket(P.OBSERVERINFO, 0, b"\x01"), "OBSERVERINFO"),
        (_leader_discovery, OBSERVER, hello(P.OBSERVERINFO, 2, 0), "names server 2"),
        (_leader_discovery, OBSERVER, hello(P.FOLLOWERINFO, OBSERVER, 0), "from an observer"),
        (_leader_discovery, 2, hello(P.OBSERVERINFO, 2, 0), r"takes FOLLOWERINFO, ACKEPOCH, ACK \["),
        (_leader_discovery, OBSERVER, QuorumPacket(P.ACK, z(1, 0)), "no NEWLEADER to ACK"),
        (_leader_discovery, OBSERVER, QuorumPacket(P.ACKEPOCH, 0, wire.encode_ackepoch_data(0)), "from an observer"),
        (_leader_broadcast, OBSERVER, QuorumPacket(P.ACK, z(1, 0)), "no NEWLEADER to ACK"),
        (_follower, OBSERVER, hello(P.OBSERVERINFO, OBSERVER, 0), "FOLLOWING server takes no packet from an observer"),
        (lambda: _observer_in(ZabState.SYNCHRONIZATION), 3, inform(t(1, 1)), "observer takes it only in BROADCAST"),
        (lambda: _observer_in(ZabState.SYNCHRONIZATION), 3, QuorumPacket(P.LEADERINFO, z(1, 0)), "OBSERVING server"),
        (lambda: _observer_in(ZabState.SYNCHRONIZATION), 2, QuorumPacket(P.DIFF, 0), "not this observer's leader"),
        (lambda: _observer_in(ZabState.SYNCHRONIZATION), 3, QuorumPacket(P.NEWLEADER, z(1, 5)), "e << 32"),
        (lambda: _observer_in(ZabState.BROADCAST), 3, QuorumPacket(P.PROPOSAL, z(1, 1), b"x"), "only in SYNC"),
        (lambda: _observer_in(ZabState.BROADCAST), 3, QuorumPacket(P.COMMIT, z(1, 1)), "OBSERVING server takes"),
        (lambda: _observer_in(ZabState.BROADCAST), 3, QuorumPacket(P.INFORM, z(1, 1)), "data is null"),
        (lambda: _observer_in(ZabState.BROADCAST), 3, inform(t(1, 0)), "counter above 0"),
        (lambda: _observer_in(ZabState.BROADCAST), 3, QuorumPacket(P.UPTODATE, z(1, 7)), "not in this follower"),
        (lambda: _observer_in(ZabState.BROADCAST), 2, inform(t(1, 1)), "not this observer's leader"),
    ],
    ids=["observerinfo-twice", "observerinfo-garbage", "observerinfo-wrong-sid", "followerinfo-from-observer",
         "observerinfo-from-participant", "ack-before-sync", "ackepoch-from-observer", "ack-newleader-twice",
         "observer-to-follower", "inform-in-sync", "leaderinfo-to-observer", "sync-from-non-leader",
         "newleader-bad-zxid", "proposal-after-sync", "commit-to-observer", "inform-no-data", "inform-counter-0",
         "uptodate-unknown-zxid", "inform-from-non-leader"],
)
def test_garbage_and_out_of_phase_packets_raise_and_change_nothing(make, frm, packet, message):
    core = make()
    before = (core.variables(), core.observer_variables(), list(core.staged_history))
    with pytest.raises(RemoteProtocolError, match=message) as e:
        core.receive(frm, packet)
    assert e.value.peer == frm
    assert (core.variables(), core.observer_variables(), list(core.staged_history)) == before


# ---------------------------------------------------------------------------------------------- election


def n(state: ServerState, leader: int, peer_epoch: int = 1, rnd: int = 1) -> Notification:
    return Notification(state, leader, 0, rnd, peer_epoch)


def test_observer_election_asks_every_voter_and_decides_on_an_established_quorum():
    oe = ObserverElection(OBSERVER, frozenset(PARTICIPANTS))
    step = oe.start_election(0, 0)
    assert [s.to for s in step.sends] == [1, 2, 3]
    assert {s.notification.state for s in step.sends} == {ServerState.OBSERVING}
    assert oe.receive(2, n(ServerState.FOLLOWING, 3)).decision is None  # one voter
    assert oe.receive(1, n(ServerState.LOOKING, 1)).decision is None  # LOOKING answers are no decision
    assert oe.receive(1, n(ServerState.FOLLOWING, 3, peer_epoch=0)).decision is None  # another vote
    step = oe.receive(3, n(ServerState.LEADING, 3))  # {2, 3} follow/lead 3 and 3 says LEADING
    assert step.decision == Decision(ServerState.OBSERVING, 3, 1, Vote(3, 0, 1), frozenset({2, 3}), frozenset())
    assert oe.state == ServerState.OBSERVING
    assert oe.receive(1, n(ServerState.LEADING, 1)).decision is None  # decided: ignored until it looks again


def test_observer_election_needs_the_leader_itself_to_say_leading_and_withdraws_looking_answers():
    oe = ObserverElection(OBSERVER, frozenset(PARTICIPANTS))
    oe.start_election(0, 0)
    oe.receive(1, n(ServerState.FOLLOWING, 3))
    assert oe.receive(2, n(ServerState.FOLLOWING, 3)).decision is None  # a quorum, but 3 never said LEADING
    oe.receive(1, n(ServerState.LOOKING, 1))  # 1 is looking again: its answer no longer counts
    oe.receive(2, n(ServerState.LOOKING, 2))
    assert oe.answers == {}
    assert oe.receive(3, n(ServerState.LEADING, 3)).decision is None  # the leader alone is no quorum
    assert oe.receive(1, n(ServerState.FOLLOWING, 3)).decision.quorum == {1, 3}


def test_observer_election_rejects_non_voters_and_observing_voters():
    oe = ObserverElection(OBSERVER, frozenset(PARTICIPANTS))
    oe.start_election(0, 0)
    with pytest.raises(RemoteProtocolError, match="not a voting member"):
        oe.receive(5, n(ServerState.LEADING, 3))
    with pytest.raises(RemoteProtocolError, match="never says OBSERVING"):
        oe.receive(1, n(ServerState.OBSERVING, 1))
    with pytest.raises(LocalProtocolError, match="is a voter"):
        ObserverElection(1, frozenset(PARTICIPANTS))


# ---------------------------------------------------------------------------------------------- config

BASE = """
[[server]]
id = {sid}
host = "127.0.0.1"
quorum_port = {p0}
election_port = {p1}
client_port = {p2}
control_port = {p3}
data_dir = "d{sid}"
"""


def config_text(roles: dict[int, str | None]) -> str:
    out = []
    for sid, role in roles.items():
        p = 20000 + 10 * sid
        out.append(BASE.format(sid=sid, p0=p, p1=p + 1, p2=p + 2, p3=p + 3))
        if role is not None:
            out.append(f'role = "{role}"\n')
    return "".join(out)


def test_config_roles_default_to_participant_and_render_back():
    cfg = parse_config(config_text({1: None, 2: "participant", 3: "observer"}), "c.toml", Path("/x"))
    assert (cfg.participants, cfg.observers, cfg.sids) == ((1, 2), (3,), (1, 2, 3))
    again = parse_config(render_config(cfg.cluster, cfg.servers), "again.toml", Path("/x"))
    assert again.servers == cfg.servers
    assert 'role = "observer"' in render_config(cfg.cluster, cfg.servers)
    assert "role" not in render_config(cfg.cluster, cfg.servers[:2])


@pytest.mark.parametrize(
    "roles, message",
    [({1: "leader"}, r"c.toml: \[\[server\]\] #1 \(id 1\): role: 'leader' is not one of"),
     ({1: "observer", 2: "observer"}, "every \\[\\[server\\]\\] is an observer")],
    ids=["unknown-role", "no-participant"],
)
def test_config_role_errors_name_file_and_key(roles, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(config_text(roles), "c.toml", Path("/x"))


# ---------------------------------------------------------------------------------------------- processes


def wait_for(what: str, predicate, timeout: float = 40.0):
    return helpers.wait_for(what, predicate, timeout)


def variables(cluster: LocalCluster, sid: int) -> dict:
    with cluster[sid].control() as c:
        return c.request("state")["variables"]


def observer_cluster(tmp_path: Path, participants: int, observers: int) -> LocalCluster:
    total = participants + observers
    path = cluster_config(tmp_path, total, find_free_base_port(total),
                          ClusterConfig(tick_ms=50, init_limit=20, sync_limit=10))
    cfg = load_config(path)
    servers = [dataclasses.replace(s, role="observer") if s.id > participants else s for s in cfg.servers]
    write_config(path, render_config(cfg.cluster, servers))
    return LocalCluster(path)


def established_leader(cluster: LocalCluster, participants, observers) -> int | None:
    """A leader in BROADCAST whose live participants follow it and whose observers observe it, all in BROADCAST."""
    vs = {s: variables(cluster, s) for s in (*participants, *observers)}
    leaders = [s for s in participants if vs[s]["state"] == "LEADING" and vs[s]["zab_state"] == "BROADCAST"]
    if len(leaders) != 1:
        return None
    ok = all(vs[s]["zab_state"] == "BROADCAST" and vs[s]["leader"] == leaders[0] for s in vs)
    ok = ok and all(vs[s]["state"] == "OBSERVING" for s in observers)
    return leaders[0] if ok else None


def delivered_at(cluster: LocalCluster, sid: int) -> list[tuple[int, str]]:
    v = variables(cluster, sid)
    return [(zx, value) for zx, value in v["history"][: v["last_committed"]]]


def client(cluster: LocalCluster, sids, attempts: int = 40) -> ZabClient:
    return ZabClient([(cluster[s].me.host, cluster[s].me.client_port) for s in sorted(sids)], attempts=attempts)


@pytest.mark.slow
def test_three_participants_and_an_observer_deliver_the_same_sequence(tmp_path: Path) -> None:
    with observer_cluster(tmp_path, 3, 1).start() as cluster:
        leader = wait_for("a leader observed by 4", lambda: established_leader(cluster, (1, 2, 3), (4,)))
        assert variables(cluster, 4)["leader"] == leader
        committed = []
        with client(cluster, (1, 2, 3)) as c:
            for k in range(100):
                committed.append((c.submit(f"v{k}"), f"v{k}"))
        wait_for("the observer to deliver 100 values", lambda: len(delivered_at(cluster, 4)) >= 100)
        assert delivered_at(cluster, 4) == committed
        assert variables(cluster, 4)["state"] == "OBSERVING"

        cluster[4].kill()  # the observer dies: commits go on
        with client(cluster, (1, 2, 3)) as c:
            for k in range(100, 110):
                committed.append((c.submit(f"v{k}"), f"v{k}"))
        for s in (1, 2, 3):
            wait_for(f"server {s} to deliver 110 values", lambda s=s: len(delivered_at(cluster, s)) >= 110)
            assert delivered_at(cluster, s) == committed

        cluster[4].start().wait_ready()  # it restarts from its disk and catches up
        wait_for("the observer to catch up", lambda: len(delivered_at(cluster, 4)) >= 110)
        assert delivered_at(cluster, 4) == committed


@pytest.mark.slow
def test_two_participants_and_an_observer_make_no_progress_with_one_participant_down(tmp_path: Path) -> None:
    """Observers are not in quorums: with participant 2 of {1, 2} down, the leader loses its quorum although the
    observer is connected, goes back to election, and no value commits until 2 returns."""
    with observer_cluster(tmp_path, 2, 1).start() as cluster:
        leader = wait_for("a leader observed by 3", lambda: established_leader(cluster, (1, 2), (3,)))
        with client(cluster, (1, 2)) as c:
            first = c.submit("before")
        wait_for("the observer to deliver", lambda: delivered_at(cluster, 3) == [(first, "before")])
        other = 3 - leader
        cluster[other].kill()
        wait_for("the leader to give up", lambda: variables(cluster, leader)["state"] == "LOOKING")
        with client(cluster, (leader,), attempts=3) as c, pytest.raises(ClientError):
            c.submit("during")
        assert variables(cluster, leader)["state"] == "LOOKING"
        assert delivered_at(cluster, 3) == [(first, "before")]
        assert all(value != "during" for _, value in delivered_at(cluster, leader))

        cluster[other].start().wait_ready()  # the quorum is back: progress resumes, the observer follows
        wait_for("a leader again", lambda: established_leader(cluster, (1, 2), (3,)))
        with client(cluster, (1, 2)) as c:
            second = c.submit("after")
        wait_for("the observer to deliver again", lambda: len(delivered_at(cluster, 3)) >= 2)
        assert delivered_at(cluster, 3) == [(first, "before"), (second, "after")]
