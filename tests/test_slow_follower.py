"""A stalled follower does not grow its leader's memory without bound, and catches up once it runs again.

The follower is SIGSTOPped while the leader keeps committing with the other follower. The leader's socket to it
fills (the kernel's buffers first, then asyncio's write buffer); `peers.SEND_BUFFER_LIMIT` closes the connection
once more than that many bytes wait unsent ("peer is not reading"), so that buffer -- the only per-follower memory
that grows with the leader's writes -- stays bounded. After SIGCONT the follower finds its leader connection closed,
goes back to election, rejoins the same leader and is synchronized (DIFF) up to the leader's commit point.

syncLimit is set high (30 s) so that the leader's silence timeout does not close the connection first: the test is
about the send-buffer bound. Figures (RSS, bytes written before the close) are printed; docs/fuzzing.md records them.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import helpers
import pytest

from conformance.fuzz import rss_kib
from zabref.client import ZabClient
from zabref.config import ClusterConfig
from zabref.net import peers
from zabref.runtime.cluster import LocalCluster, cluster_config, find_free_base_port

pytestmark = pytest.mark.slow

VALUE = 512 * 1024  # bytes per committed value (client frames are at most 1 MiB)


def _sysctl_max(name: str, default: int) -> int:
    """The largest buffer the kernel gives one TCP socket (the third field of /proc/sys/net/ipv4/<name>)."""
    try:
        return int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        return default


#: Most bytes the leader may commit before the stalled connection is closed: the limit, plus what the kernel's
#: buffers absorb first (the leader's send buffer and the stalled follower's receive buffer, at their maxima on this
#: machine), plus one value in flight.
CLOSE_WITHIN = (peers.SEND_BUFFER_LIMIT + _sysctl_max("tcp_wmem", 4 << 20) + _sysctl_max("tcp_rmem", 6 << 20)
                + 2 * VALUE)

def _state(cluster: LocalCluster, sid: int) -> dict:
    with cluster[sid].control() as c:
        return c.request("state")


def _leader(cluster: LocalCluster) -> int | None:
    states = {sid: _state(cluster, sid)["variables"] for sid in cluster.servers}
    leaders = [s for s, v in states.items() if v["state"] == "LEADING" and v["zab_state"] == "BROADCAST"]
    if len(leaders) == 1 and all(v["zab_state"] == "BROADCAST" for v in states.values()):
        return leaders[0]
    return None


def _cut(cluster: LocalCluster, leader: int, stalled: int) -> bool:
    """Whether the leader has no open connection to ``stalled`` any more."""
    return all(c["peer"] != stalled for c in _state(cluster, leader)["connections"])


@pytest.fixture(scope="module")
def stall(tmp_path_factory) -> dict:
    """Run the scenario once: stall a follower, commit until the leader cuts it, resume it, wait for the resync."""
    folder = tmp_path_factory.mktemp("stall")
    path = cluster_config(folder, 3, find_free_base_port(3), ClusterConfig(tick_ms=100, init_limit=10,
                                                                             sync_limit=300))
    with LocalCluster(path).start() as cluster:
        leader = helpers.wait_for("an established leader", lambda: _leader(cluster), 30)
        stalled = min(s for s in cluster.servers if s != leader)
        me = cluster[leader].me
        pid, leader_pid = cluster[stalled].proc.pid, cluster[leader].proc.pid
        out = {"leader": leader, "stalled": stalled, "written": 0, "rss_before": rss_kib(leader_pid)}
        value = "x" * VALUE
        os.kill(pid, signal.SIGSTOP)
        try:
            with ZabClient([(me.host, me.client_port)], timeout=30, attempts=5) as client:
                while not _cut(cluster, leader, stalled) and out["written"] <= CLOSE_WITHIN:
                    for _ in range(4):
                        client.submit(value)
                        out["written"] += VALUE
                out["cut"] = _cut(cluster, leader, stalled)
                out["rss_at_cut"] = rss_kib(leader_pid)
                for _ in range(8):  # the leader keeps committing with the other follower
                    client.submit(value)
                out["rss_after_more"] = rss_kib(leader_pid)
        finally:
            os.kill(pid, signal.SIGCONT)
        target = _state(cluster, leader)["committed_zxid"]
        started = time.monotonic()
        try:
            helpers.wait_for("the stalled follower to catch up",
                             lambda: _state(cluster, stalled)["committed_zxid"] >= target, 90)
            out["caught_up_s"] = time.monotonic() - started
        except AssertionError:
            out["caught_up_s"] = None
        out["variables"] = _state(cluster, stalled)["variables"]
        out["rss_after_resync"] = rss_kib(leader_pid)
        out["leader_log"] = (me.data_dir / "server.log").read_text()
        stalled_log = (cluster[stalled].me.data_dir / "server.log").read_text()
        out["resync_attempts"] = stalled_log.count(f"quorum connection with {leader} closed")
        out["stalled_log_tail"] = "\n".join(stalled_log.splitlines()[-12:])
    print(f"\nslow follower: {out['written'] / 2**20:.1f} MiB committed until the cut (limit "
          f"{peers.SEND_BUFFER_LIMIT / 2**20:.0f} MiB); leader VmRSS before {out['rss_before'] / 1024:.1f} MiB, at "
          f"the cut {out['rss_at_cut'] / 1024:.1f} MiB, after 4 MiB more {out['rss_after_more'] / 1024:.1f} MiB, "
          f"after the resync {out['rss_after_resync'] / 1024:.1f} MiB; caught up after {out['caught_up_s']} s and "
          f"{out['resync_attempts']} closed leader connections")
    return out


def test_a_stalled_follower_is_cut_off_within_the_send_buffer_limit(stall: dict) -> None:
    assert stall["cut"], f"{stall['written']} bytes committed and the stalled connection is still open"
    assert stall["written"] <= CLOSE_WITHIN
    # The leader holds every committed value in its in-memory history and at most one send buffer's worth for the
    # cut connection; the rest is the interpreter (and copies it has not returned to the OS).
    assert (stall["rss_at_cut"] - stall["rss_before"]) * 1024 <= 2 * stall["written"] + peers.SEND_BUFFER_LIMIT \
        + 64 * 2**20


def test_the_stalled_follower_catches_up_after_sigcont(stall: dict) -> None:
    assert stall["caught_up_s"] is not None, (f"not caught up within 90 s; {stall['resync_attempts']} closed leader "
                                              f"connections; the follower's log ends:\n{stall['stalled_log_tail']}")
    assert stall["variables"]["state"] == "FOLLOWING" and stall["variables"]["leader"] == stall["leader"]
    assert stall["variables"]["zab_state"] == "BROADCAST"


def test_the_cut_is_logged_with_its_reason(stall: dict) -> None:
    assert f"quorum connection with {stall['stalled']} closed: peer is not reading" in stall["leader_log"]


# ------------------------------------------------------------------------------------------------ a large resync

#: What the restarted follower misses: enough that the catch-up burst overflows SEND_BUFFER_LIMIT even after the
#: kernel's buffers (at most tcp_wmem + tcp_rmem) took their share -- before the fix every attempt was cut.
MISSED = peers.SEND_BUFFER_LIMIT + _sysctl_max("tcp_wmem", 4 << 20) + _sysctl_max("tcp_rmem", 6 << 20) + (8 << 20)


@pytest.fixture(scope="module", params=["DIFF", "SNAP"])
def resync(request, tmp_path_factory) -> dict:
    """A follower down while the leader commits more than SEND_BUFFER_LIMIT bytes, then restarted. DIFF: it had the
    first transaction, so the leader sends it the missed PROPOSALs; SNAP: it went down before any, so its last zxid
    precedes the leader's whole history and the leader sends it all as one snapshot stream, more than a quorum
    packet's data bound (`peers.MAX_QUORUM_DATA`; the stream's own is `peers.MAX_SNAPSHOT`).

    initLimit is 10 s: the follower must read and persist the whole catch-up and ACK NEWLEADER within it (as in
    ZooKeeper, initLimit is what a large sync needs).
    """
    folder = tmp_path_factory.mktemp("resync")
    path = cluster_config(folder, 3, find_free_base_port(3), ClusterConfig(tick_ms=100, init_limit=100,
                                                                             sync_limit=20))
    with LocalCluster(path).start() as cluster:
        leader = helpers.wait_for("an established leader", lambda: _leader(cluster), 30)
        behind = min(s for s in cluster.servers if s != leader)
        me = cluster[leader].me
        with ZabClient([(me.host, me.client_port)], timeout=30, attempts=5) as client:
            if request.param == "DIFF":
                client.submit("shared")  # both have it: the leader sends DIFF
                helpers.wait_for("the follower to have it", lambda: _state(cluster, behind)["committed_zxid"] > 0, 30)
            cluster[behind].stop()
            value, written = "y" * VALUE, 0
            while written < MISSED:
                client.submit(value)
                written += VALUE
        target = _state(cluster, leader)["committed_zxid"]
        seen = len((me.data_dir / "server.log").read_text())
        behind_log = cluster[behind].me.data_dir / "server.log"
        opened = f"quorum connection to leader {leader} open"
        before = behind_log.read_text().count(opened)
        cluster[behind].start().wait_ready()
        started = time.monotonic()
        helpers.wait_for("the restarted follower to catch up",
                         lambda: _state(cluster, behind)["committed_zxid"] >= target, 120)
        out = {"sync": request.param, "leader": leader, "behind": behind, "written": written,
               "seconds": time.monotonic() - started,
               "variables": _state(cluster, behind)["variables"],
               "leader_log": (me.data_dir / "server.log").read_text()[seen:],
               "connections": behind_log.read_text().count(opened) - before}
    print(f"\nlarge resync ({request.param}): {written / 2**20:.1f} MiB missed "
          f"(limit {peers.SEND_BUFFER_LIMIT / 2**20:.0f} MiB); "
          f"caught up after {out['seconds']:.1f} s over {out['connections']} connection(s)")
    return out


def test_a_resync_larger_than_the_send_buffer_limit_is_not_cut(resync: dict) -> None:
    """The catch-up burst is exempt from SEND_BUFFER_LIMIT while the learner is not UPTODATE (peers docstring);
    before, the leader cut every attempt whose burst did not happen to fit, and the follower retried hundreds of
    times. A SNAP's stream that large is read whole: before, it was held to a packet's 16 MiB and every attempt was
    refused ("the snapshot stream is longer than 16777216 bytes") -- a stalled follower that had nothing yet never
    caught up (a CI run of test_the_stalled_follower_catches_up_after_sigcont on a loaded machine)."""
    assert resync["written"] > peers.SEND_BUFFER_LIMIT
    assert "peer is not reading" not in resync["leader_log"]
    assert 1 <= resync["connections"] <= 2, resync["leader_log"][-3000:]  # before the fix: hundreds
    assert resync["variables"]["state"] == "FOLLOWING" and resync["variables"]["leader"] == resync["leader"]
    assert resync["variables"]["zab_state"] == "BROADCAST"

