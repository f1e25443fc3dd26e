"""Control mode with three real server processes: the conformance driver's view of zabref.

Each test drives spec actions by hand through the control sockets (elect = ElectLeader, release = the Process*
action that takes the head packet of one channel, client_request = ClientRequest, timeout = *Timeout, SIGKILL +
restart = Crash) and checks every server's state after the step against what spec/Zab.tla says that step does.
Loopback only; every wait is bounded (`settle` polls at most 10 s).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from zabref.cluster import LocalCluster, cluster_config, find_free_base_port
from zabref.config import ClusterConfig
from zabref.control import ControlClient, ControlError, settle

pytestmark = pytest.mark.slow

E1 = 1 << 32  # zxid <<1, 0>>


def z(epoch: int, counter: int) -> int:
    return epoch << 32 | counter


class Driver:
    """A hand-held conformance driver: one step, then wait until every packet sent has arrived."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.ctl: dict[int, ControlClient] = {}
        for sid in cluster.servers:
            self.ctl[sid] = cluster[sid].control()
        self.states: dict[int, dict] = {}

    def step(self, sid: int, op: str, **fields) -> dict:
        answer = self.ctl[sid].request(op, **fields)
        self.states = settle(self.ctl)
        return answer

    def release(self, at: int, frm: int) -> dict:
        return self.step(at, "release", **{"from": frm})["released"]

    def var(self, sid: int, name: str):
        return self.states[sid]["variables"][name]

    def held(self, at: int, frm: int) -> list[dict]:
        return self.states[at]["held"].get(str(frm), [])

    def crash(self, sid: int) -> None:
        """Crash(i): SIGKILL, restart from the same data dir, in control mode."""
        self.ctl[sid].close()
        self.cluster[sid].kill()
        self.cluster[sid].start(control=True).wait_ready()
        self.ctl[sid] = self.cluster[sid].control()
        self.states = settle(self.ctl)

    def close(self) -> None:
        for c in self.ctl.values():
            c.close()


def make_cluster(tmp_path: Path, control: bool = True) -> LocalCluster:
    path = cluster_config(tmp_path, 3, find_free_base_port(3), ClusterConfig(tick_ms=50, init_limit=20, sync_limit=10))
    return LocalCluster(path).start(control=control)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Driver]:
    with make_cluster(tmp_path) as cluster:
        d = Driver(cluster)
        try:
            yield d
        finally:
            d.close()


def establish(d: Driver, leader: int, followers: list[int]) -> None:
    """ElectLeader(leader, {leader} + followers), then discovery and sync, one release at a time, to BROADCAST."""
    quorum = [leader, *followers]
    for sid in quorum:
        d.step(sid, "elect", leader=leader, quorum=quorum)
    for f in followers:
        d.release(leader, f)  # FOLLOWERINFO
    for f in followers:
        d.release(f, leader)  # LEADERINFO
        d.release(leader, f)  # ACKEPOCH
    for f in followers:
        while d.held(f, leader):  # sync packets, NEWLEADER (and UPTODATE for a late ACK)
            d.release(f, leader)
            if d.held(leader, f):
                d.release(leader, f)  # ACK of NEWLEADER
    for f in followers:
        while d.held(f, leader):
            d.release(f, leader)  # UPTODATE
    assert d.var(leader, "zab_state") == "BROADCAST"
    for f in followers:
        assert d.var(f, "zab_state") == "BROADCAST"


def test_discovery_and_synchronization_step_by_step(driver: Driver) -> None:
    d = driver
    # ElectLeader(3, {1, 2, 3}): the leader proposes acceptedEpoch + 1; followers connect and send FOLLOWERINFO.
    for sid in (3, 1, 2):
        d.step(sid, "elect", leader=3, quorum=[1, 2, 3])
    assert (d.var(3, "state"), d.var(3, "zab_state"), d.var(3, "new_epoch")) == ("LEADING", "DISCOVERY", 1)
    for f in (1, 2):
        assert (d.var(f, "state"), d.var(f, "zab_state"), d.var(f, "leader")) == ("FOLLOWING", "DISCOVERY", 3)
        assert d.held(3, f) == [{"type": "FOLLOWERINFO", "zxid": 0, "data": f}]

    # LeaderProcessFOLLOWERINFO(3, 1): {3, 1} is a quorum: acceptedEpoch = 1, LEADERINFO(1) to 1 only.
    d.release(3, 1)
    assert d.var(3, "accepted_epoch") == 1
    assert d.var(3, "learner_phase") == {"1": "LEADERINFO", "2": "NONE", "3": "NONE"}
    assert d.held(1, 3) == [{"type": "LEADERINFO", "zxid": E1, "data": 0x10000}]
    assert d.held(2, 3) == []
    # LeaderProcessFOLLOWERINFO(3, 2): the epoch is chosen, the late learner gets LEADERINFO at once.
    d.release(3, 2)
    assert d.var(3, "learner_phase")["2"] == "LEADERINFO"
    assert d.held(2, 3) == [{"type": "LEADERINFO", "zxid": E1, "data": 0x10000}]

    # FollowerProcessLEADERINFO(1, 3): acceptedEpoch = 1 (on disk), ACKEPOCH(lastZxid 0, currentEpoch 0).
    d.release(1, 3)
    assert (d.var(1, "accepted_epoch"), d.var(1, "zab_state")) == (1, "SYNCHRONIZATION")
    assert d.held(3, 1) == [{"type": "ACKEPOCH", "zxid": 0, "data": 0}]
    # LeaderProcessACKEPOCH(3, 1): quorum of ACKEPOCH: currentEpoch = 1, DIFF + NEWLEADER to 1.
    d.release(3, 1)
    assert (d.var(3, "current_epoch"), d.var(3, "zab_state")) == (1, "SYNCHRONIZATION")
    assert d.var(3, "learner_phase")["1"] == "NEWLEADER"
    assert [(p["type"], p["zxid"]) for p in d.held(1, 3)] == [("DIFF", 0), ("NEWLEADER", E1)]

    d.release(1, 3)  # FollowerProcessDIFF: stage the history as it is; nothing else changes
    assert (d.var(1, "current_epoch"), d.var(1, "zab_state")) == (0, "SYNCHRONIZATION")
    d.release(1, 3)  # FollowerProcessNEWLEADER: currentEpoch = 1, BROADCAST, ACK(<<1, 0>>)
    assert (d.var(1, "current_epoch"), d.var(1, "zab_state")) == (1, "BROADCAST")
    assert d.held(3, 1) == [{"type": "ACK", "zxid": E1, "data": None}]
    d.release(3, 1)  # LeaderProcessACKNEWLEADER: quorum: BROADCAST, UPTODATE(0) to 1
    assert d.var(3, "zab_state") == "BROADCAST"
    assert d.var(3, "learner_phase")["1"] == "UPTODATE"
    assert d.held(1, 3) == [{"type": "UPTODATE", "zxid": 0, "data": None}]
    d.release(1, 3)

    # ClientRequest(3): logged at the leader, PROPOSAL to the forwarding list (1 only: 2 is still in LEADERINFO).
    zxid = d.step(3, "client_request", value="a")["zxid"]
    assert zxid == z(1, 1)
    assert d.var(3, "history") == [[z(1, 1), "a"]]
    assert d.held(1, 3) == [{"type": "PROPOSAL", "zxid": z(1, 1), "data": "a"}]
    assert d.held(2, 3) == [{"type": "LEADERINFO", "zxid": E1, "data": 0x10000}]
    d.release(1, 3)  # FollowerProcessPROPOSAL: logged and synced, then ACK
    assert d.var(1, "history") == [[z(1, 1), "a"]]
    assert d.held(3, 1) == [{"type": "ACK", "zxid": z(1, 1), "data": None}]
    d.release(3, 1)  # LeaderProcessACK: {3, 1} ACKed: deliver, COMMIT
    assert d.var(3, "last_committed") == 1
    assert d.held(1, 3) == [{"type": "COMMIT", "zxid": z(1, 1), "data": None}]
    d.release(1, 3)
    assert d.var(1, "last_committed") == 1

    # The late follower 2: its lastZxid 0 precedes the leader's whole history, so SyncPackets is SNAP, then NEWLEADER.
    d.release(2, 3)
    d.release(3, 2)
    assert d.held(2, 3) == [{"type": "SNAP", "zxid": z(1, 1), "data": [[z(1, 1), "a"]]},
                            {"type": "NEWLEADER", "zxid": E1, "data": None}]
    for _ in range(2):
        d.release(2, 3)
    assert d.var(2, "history") == [[z(1, 1), "a"]]
    d.release(3, 2)  # a late ACK of NEWLEADER: UPTODATE(commit point) at once
    assert d.held(2, 3) == [{"type": "UPTODATE", "zxid": z(1, 1), "data": None}]
    d.release(2, 3)
    assert d.var(2, "last_committed") == 1


def test_crash_keeps_history_and_epochs_and_closes_both_ends(driver: Driver) -> None:
    d = driver
    establish(d, 3, [1, 2])
    d.step(3, "client_request", value="x")
    d.release(1, 3)  # 1 logs x, its ACK is now held at 3
    assert d.held(3, 1) == [{"type": "ACK", "zxid": z(1, 1), "data": None}]

    d.crash(1)
    # Crash(1): history, acceptedEpoch, currentEpoch survive; everything volatile is back to Init.
    assert d.var(1, "history") == [[z(1, 1), "x"]]
    assert (d.var(1, "accepted_epoch"), d.var(1, "current_epoch")) == (1, 1)
    assert (d.var(1, "state"), d.var(1, "zab_state"), d.var(1, "leader")) == ("LOOKING", "ELECTION", 0)
    # GoLooking(1) at the leader: 1 is forgotten and the packets in flight from 1 are gone.
    assert d.var(3, "learner_phase")["1"] == "NONE"
    assert d.held(3, 1) == []
    assert [c["peer"] for c in d.states[3]["connections"]] == [2]
    assert d.var(3, "last_committed") == 0  # x was never committed: only 3 ACKed it

    # JoinLeader(1, 3): 1 rejoins the established leader and is synced with a DIFF.
    d.step(1, "join", leader=3)
    assert d.held(3, 1) == [{"type": "FOLLOWERINFO", "zxid": E1, "data": 1}]
    d.release(3, 1)
    d.release(1, 3)  # LEADERINFO(1) with acceptedEpoch 1 already: ACKEPOCH(-1)
    assert d.held(3, 1) == [{"type": "ACKEPOCH", "zxid": z(1, 1), "data": -1}]


def test_timeouts_close_connections_at_both_ends(driver: Driver) -> None:
    d = driver
    establish(d, 3, [1, 2])
    d.step(2, "timeout", kind="follower")  # FollowerTimeout(2)
    assert d.var(2, "state") == "LOOKING"
    assert d.var(3, "learner_phase")["2"] == "NONE"
    assert d.var(3, "state") == "LEADING"  # {3, 1} is still a quorum
    with pytest.raises(ControlError, match="LeaderTimeout"):
        d.step(3, "timeout", kind="leader")
    d.step(1, "timeout", kind="follower")
    d.step(3, "timeout", kind="leader")  # LeaderTimeout(3): no quorum of learners left
    assert [d.var(s, "state") for s in (1, 2, 3)] == ["LOOKING"] * 3
    assert all(s["connections"] == [] for s in d.states.values())


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"op": "release", "from": 2}, "no packet held from server 2"),
        ({"op": "elect", "leader": 1, "quorum": [1]}, "must be a quorum"),
        ({"op": "elect", "leader": 1}, "quorum"),
        ({"op": "timeout", "kind": "follower"}, "FollowerTimeout not enabled"),
        ({"op": "timeout", "kind": "sideways"}, "kind"),
        ({"op": "client_request", "value": "v"}, "ClientRequest not enabled"),
        ({"op": "join", "leader": 1}, "JoinLeader not enabled"),
        ({"op": "fly"}, "unknown op"),
        ({"nope": 1}, "op"),
    ],
)
def test_bad_control_requests_answer_an_error_and_the_server_keeps_serving(driver: Driver, request_, error) -> None:
    c = driver.ctl[1]
    answer = c.raw(request_)
    assert error in answer["error"]
    assert c.request("state")["variables"]["state"] == "LOOKING"
    assert c.request("ping")["sid"] == 1
