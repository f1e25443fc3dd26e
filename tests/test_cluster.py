"""Three real server processes: normal mode under a leader crash, and seed 004's Figures 3 and 4.

Loopback only; every wait is bounded (polls with a deadline, client attempts bounded by ZabClient).
"""

from __future__ import annotations

import socket
from pathlib import Path

import helpers
import pytest
from helpers import established_leader
from test_control import Driver, establish, z  # tests/ is on sys.path (no package)

from conformance.replay.harness import Cluster
from zabref.client import ZabClient
from zabref.config import ClusterConfig
from zabref.net import clientwire
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port

pytestmark = pytest.mark.slow


def make_cluster(tmp_path: Path) -> LocalCluster:
    path = cluster_config(tmp_path, 3, find_free_base_port(3), ClusterConfig(tick_ms=50, init_limit=20, sync_limit=10))
    return LocalCluster(path).start()


def state(cluster: LocalCluster, sid: int) -> dict:
    with cluster[sid].control() as c:
        return c.request("state")


def wait_for(what: str, predicate, timeout: float = 30.0):
    return helpers.wait_for(what, predicate, timeout)


def delivered(cluster: LocalCluster, sid: int) -> list[tuple[int, str]]:
    """Server sid's delivered sequence, read through its client port (after a sync)."""
    with ZabClient([(cluster[sid].me.host, cluster[sid].me.client_port)], attempts=20) as c:
        c.sync()
        return c.read()


def test_leader_crash_keeps_every_committed_value_once_and_in_order(tmp_path: Path) -> None:
    with make_cluster(tmp_path) as cluster:
        sids = set(cluster.servers)
        old = wait_for("a leader", lambda: established_leader(cluster, sids))
        committed: list[tuple[int, str]] = []
        with ZabClient(cluster.client_addresses()) as client:
            for k in range(1000):
                committed.append((client.submit(f"v{k}"), f"v{k}"))
        assert [zx for zx, _ in committed] == sorted({zx for zx, _ in committed})  # zxids increase, none twice

        cluster[old].kill()  # kill -9 the leader
        live = sids - {old}
        new = wait_for("a new leader", lambda: established_leader(cluster, live))
        assert new != old
        assert state(cluster, new)["variables"]["current_epoch"] > (committed[-1][0] >> 32)
        with ZabClient([(cluster[s].me.host, cluster[s].me.client_port) for s in sorted(live)]) as client:
            for k in range(1000, 1010):
                committed.append((client.submit(f"v{k}"), f"v{k}"))

        for s in live:
            assert delivered(cluster, s) == committed

        cluster[old].start().wait_ready()  # the old leader restarts from its disk and rejoins
        wait_for("the old leader to rejoin", lambda: established_leader(cluster, sids) == new)
        assert delivered(cluster, old) == committed


def test_seed004_fig3_committed_survives_and_fig4_skipped_is_purged(tmp_path: Path) -> None:
    """Seed 004, Figures 3 and 4: leader 1 delivers message 2 but crashes before its COMMIT reaches anyone (it must
    not be forgotten), and holds proposal 3 that no other server saw (it must be skipped, and purged at rejoin)."""
    cluster = Cluster(tmp_path, 3, None)
    try:
        d = Driver(cluster)
        establish(d, 1, [2, 3])
        d.submit(1, "m1")
        for f in (2, 3):
            d.release(f, 1)
            d.release(1, f)
            d.release(f, 1)  # COMMIT of m1
        d.submit(1, "m2")
        d.release(2, 1)
        d.release(3, 1)  # both log m2
        d.release(1, 2)  # ACK from 2: {1, 2} is a quorum: 1 delivers m2; the COMMITs stay in flight
        assert d.var(1, "last_committed") == 2 and d.var(2, "last_committed") == 1
        d.submit(1, "m3")  # proposal 3: nobody else will ever see it
        assert d.var(1, "history")[-1] == [z(1, 3), "m3"]

        d.crash(1)  # Fig. 3: the only server that saw the COMMIT of m2 fails
        assert d.var(1, "history") == [[z(1, 1), "m1"], [z(1, 2), "m2"], [z(1, 3), "m3"]]
        for f in (2, 3):
            assert d.timeout(f, "FollowerTimeout") == ["FollowerTimeout"]  # their leader's connection is gone
        establish(d, 3, [2])  # 3 and 2 elect 3 for epoch 2; m2 is in both logs
        assert d.var(3, "last_committed") == 2  # m2 committed by the new leader: not forgotten
        for v in ("n1", "n2"):
            d.submit(3, v)
            d.release(2, 3)
            d.release(3, 2)
            d.release(2, 3)
        assert d.var(2, "last_committed") == 4

        assert d.decide(1, 3) == ["BecomeFollower"]  # Fig. 4: server 1 comes back; the leader makes it purge m3
        d.release(3, 1)
        d.release(1, 3)
        d.release(3, 1)
        assert [(p["type"], p["zxid"]) for p in d.held(1, 3)] == [
            ("TRUNC", z(1, 2)), ("PROPOSAL", z(2, 1)), ("COMMIT", z(2, 1)), ("PROPOSAL", z(2, 2)), ("COMMIT", z(2, 2)),
            ("NEWLEADER", z(2, 0))]  # both committed by the leader: each PROPOSAL with its COMMIT (departure 17)
        while d.held(1, 3):
            d.release(1, 3)
            if d.held(3, 1):
                d.release(3, 1)
        expected = [[z(1, 1), "m1"], [z(1, 2), "m2"], [z(2, 1), "n1"], [z(2, 2), "n2"]]
        for s in (1, 2, 3):
            assert d.var(s, "history") == expected, (s, d.states[s])

        # The same data dirs in normal mode: m3 stays skipped, every committed message is delivered everywhere.
        for proc in cluster.servers.values():
            proc.stop()
        live = LocalCluster(cluster.servers[1].config_path)
        with live.start():
            leader = wait_for("a leader", lambda: established_leader(live, {1, 2, 3}))
            with ZabClient([(live[leader].me.host, live[leader].me.client_port)]) as client:
                last = client.submit("after")
            want = [(z(1, 1), "m1"), (z(1, 2), "m2"), (z(2, 1), "n1"), (z(2, 2), "n2"), (last, "after")]
            for s in (1, 2, 3):
                assert delivered(live, s) == want
    finally:
        cluster.stop()


def test_a_sync_before_anything_is_committed_answers_zxid_0_at_every_server(tmp_path: Path) -> None:
    """A follower forwards ``sync``; the leader answers its commit point, 0 on a fresh cluster, which every server
    has delivered (the follower used to refuse it as a zxid "a later epoch skipped")."""
    with make_cluster(tmp_path) as cluster:
        sids = set(cluster.servers)
        wait_for("a leader", lambda: established_leader(cluster, sids))
        for s in sorted(sids):
            with ZabClient([(cluster[s].me.host, cluster[s].me.client_port)], attempts=1) as c:
                assert c.sync() == 0


def test_requests_pipelined_on_one_connection_are_answered_in_order_and_a_read_sees_the_submits_before_it(
        tmp_path: Path) -> None:
    """zabref's client port takes requests written together (`zabref.net.pipeline`), at the leader and at a
    follower: submits and a sync go to the node as they are read, and the answers come back in request order; a read
    behind two submits is made at its turn and sees both; a sync is answered in its place (with what the leader had
    committed when it reached the leader, which may be before the submits ahead of it: docs/runtime.md); a bad value
    is answered with its error in its place."""
    with make_cluster(tmp_path) as cluster:
        sids = set(cluster.servers)
        leader = wait_for("a leader", lambda: established_leader(cluster, sids))
        for sid in (leader, min(sids - {leader})):
            me = cluster[sid].me
            requests = [{"op": "submit", "value": f"a{sid}"}, {"op": "submit", "value": f"b{sid}"},
                        {"op": "read", "from_zxid": 0}, {"op": "sync"}, {"op": "submit", "value": 7},
                        {"op": "read", "from_zxid": 0}]
            with socket.create_connection((me.host, me.client_port), timeout=10) as sock:
                sock.sendall(b"".join(clientwire.encode(r) for r in requests))
                first, second, read, synced, bad, again = (clientwire.read_answer(sock) for _ in requests)
            assert first["zxid"] < second["zxid"] and isinstance(synced["zxid"], int), (first, second, synced)
            assert read["txns"][-2:] == [[first["zxid"], f"a{sid}"], [second["zxid"], f"b{sid}"]], read
            assert bad == {"error": '"value" must be text', "retry": False}
            assert again["txns"][-2:] == read["txns"][-2:]
