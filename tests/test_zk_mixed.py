"""A zabref server in one ensemble with real ZooKeeper servers (issue 37, part 2): the election and quorum ports speak
ZooKeeper's wire (`zabref.net.votes`, `zabref.net.wire`, `zabref.net.zkwire`), both ways.

Two unmodified ZooKeeper servers (ids 1, 2; Debian's 3.8.0, and 3.9.5 from Maven Central) and a zabref server
(id 3), all empty. ZooKeeper server 1 starts
alone (no quorum), then the zabref server: FastLeaderElection ranks equal votes by id, so server 1 must come to vote
for 3 by hearing the zabref server's vote, and the zabref server decides LEADING on the quorum {1, 3}. (Starting both
ZooKeeper servers first lets them elect 2 between themselves on a busy machine before the zabref server's vote counts:
a race this test must not depend on.) Server 1 decides FOLLOWING 3 (its own log says so), connects to the zabref
server's quorum port and synchronizes from it: FOLLOWERINFO, LEADERINFO, ACKEPOCH, DIFF, NEWLEADER, UPTODATE, then
ZooKeeper's ACK of UPTODATE, which the zabref leader drops as ZooKeeper's leader does (`zabref.core.node`).

Then zabref's client writes values through the zabref leader, one at a time. Each PROPOSAL carries its transaction
as ZooKeeper's create of the transaction's own node (`zabref.core.zktxn`); each ZooKeeper follower logs and ACKs it,
the zabref leader commits on that quorum and COMMITs, and the follower applies it to its data tree. Two values are
committed on {1, 3}; then server 2 starts, learns the leader from the others' notifications and joins: its last
zxid precedes the leader's whole history, so the zabref leader sends a SNAP, ZooKeeper's snapshot stream of the
tree of those transactions (`zabref.core.zksnap`), which server 2 takes ("Getting a snapshot from leader"). The
ensemble then stays whole: each ZooKeeper learner takes the zabref leader's PINGs and answers them, and nobody
elects again. A third value is written, and a ZooKeeper client (kazoo) of each ZooKeeper server reads the three at
``/zabref-<epoch>-<counter>``. The
ZooKeeper servers run with local sessions, so that the client's session is not a transaction forwarded to the leader
(REQUEST, which a zabref leader does not take yet).
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from kazoo.client import KazooClient

from conformance.zk.ensemble import ZkEnsemble
from zabref.client import ZabClient
from zabref.config import parse_config
from zabref.core import zktxn
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.server import Server


@pytest.fixture
def zk380():
    from conformance.zk.versions import find_classpath

    if find_classpath() is None:
        pytest.skip("needs Debian's zookeeper package (zabref zk fetch 3.8.0 installs it)")


def _zabref_config(e: ZkEnsemble, folder) -> str:
    servers = "".join(f"[[server]]\nid = {m.id}\nhost = \"127.0.0.1\"\nquorum_port = {m.quorum_port}\n"
                      f"election_port = {m.election_port}\nclient_port = {m.client_port}\n"
                      f"data_dir = \"{folder}/zabref-{m.id}\"\n" for m in e.members)
    return f"[cluster]\ntick_ms = 200\ninit_limit = 10\nsync_limit = 5\n\n{servers}"


def _log(e: ZkEnsemble, sid: int) -> str:
    path = e.log_of(sid)
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["3.8.0", "3.9.5"])
def test_zookeeper_servers_follow_a_zabref_leader(tmp_path, zk380, lines, version) -> None:
    distribution = None  # Debian's 3.8.0
    if version != "3.8.0":
        from conformance.zk.versions import fetch

        distribution = fetch(version, echo=lambda s: None)  # from Maven Central, once into the cache
    base = find_free_base_port(3)
    # local sessions: a ZooKeeper client's session stays at its server (no createSession forwarded as REQUEST, which
    # a zabref leader does not take yet)
    e = ZkEnsemble(tmp_path / "zk", base, 3, tick_time_ms=200, heap_mb=256, distribution=distribution,
                   extra_config=("localSessionsEnabled=true", "localSessionsUpgradingEnabled=false"))
    try:
        config = parse_config(_zabref_config(e, tmp_path), str(tmp_path / "mixed.toml"))
        connected = f"Successfully connected to leader, using address: /127.0.0.1:{e.member(3).quorum_port}"

        def synced_from_zabref(sid: int, sync: str) -> bool:
            """ZooKeeper server ``sid`` connected to the zabref server's quorum port and took its ``sync`` (how its
            log names a DIFF or a SNAP), NEWLEADER and UPTODATE on one connection (one stretch of its log from that
            connection to its next one)."""
            stretches = _log(e, sid).split("Successfully connected to leader")[1:]
            to_zabref = re.escape(connected.split("leader", 1)[1]) + r"\D"
            return any(re.match(to_zabref, s) and all(
                x in s for x in (sync, "Learner received NEWLEADER message", "Learner received UPTODATE message"))
                for s in stretches)

        def states() -> list[str]:
            return [x for x in lines.lines if "state ->" in x]

        async def until(what: str, ready, seconds: float) -> None:
            for _ in range(int(seconds * 10)):  # a JVM starts within seconds; the election takes a few rounds
                if ready():
                    return
                await asyncio.sleep(0.1)
            raise AssertionError(f"{what} not within {seconds} s; zabref's states: {states()[-5:]}")

        def write(values: list[str]) -> list[int]:
            """Commit ``values`` one at a time through the zabref leader's client port: their zxids."""
            with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                return [client.submit(v) for v in values]

        def read(sid: int, zxids: list[int]) -> list[bytes]:
            """What a ZooKeeper client of server ``sid`` reads at each transaction's node (`zktxn.node_of`),
            waiting (bounded) for the server to apply the last: a follower applies a transaction on its COMMIT."""
            client = KazooClient(hosts=f"127.0.0.1:{e.member(sid).client_port}", timeout=10)
            client.start(timeout=20)
            try:
                for _ in range(100):
                    if client.exists(zktxn.node_of(zxids[-1])):
                        break
                    time.sleep(0.1)
                return [client.get(zktxn.node_of(z))[0] for z in zxids]
            finally:
                client.stop()
                client.close()

        async def run() -> None:
            e.start_server(1)
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                await until("server 1 synchronized from the zabref leader",
                            lambda: synced_from_zabref(1, "Getting a diff from the leader 0x0")
                            and any("state -> LEADING" in x for x in states()), 90)
                zxids = await asyncio.to_thread(write, ["mixed-0", "mixed-1"])  # committed on {1, 3}
                e.start_server(2)
                # server 2's last zxid (0) precedes the leader's whole history: a SNAP, ZooKeeper's stream of the tree
                await until("server 2 synchronized from the zabref leader by a SNAP",
                            lambda: synced_from_zabref(2, f"Getting a snapshot from leader 0x{zxids[-1]:x}"), 60)
                await asyncio.sleep(3)  # 15 ticks: three times a learner's syncLimit (5 ticks) without a PING
                zxids += await asyncio.to_thread(write, ["mixed-2"])
                for sid in (1, 2):
                    assert await asyncio.to_thread(read, sid, zxids) == [b"mixed-0", b"mixed-1", b"mixed-2"], sid
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        asyncio.run(run())
        assert len(states()) == 1, f"the zabref server left LEADING ({len(states())} state changes): {states()[:4]}"
        for sid in (1, 2):  # each ZooKeeper server read the zabref server's vote, and its configuration's text
            log = _log(e, sid)
            assert re.search(r"n\.sid:3, n\.state:(LOOKING|LEADING), n\.leader:3", log), \
                f"server {sid} never heard zabref's vote"
            assert "Something went wrong while processing config" not in log  # zabref's configuration text parses
            # one connection to the leader, one sync, and it held until the zabref server stopped
            assert log.count("Successfully connected to leader") == 1, f"server {sid} connected again"
            assert log.count("Peer state changed: following - broadcast") == 1
            assert "but next pending txn" not in log  # a COMMIT for each transaction, in order (Follower.commit)
    finally:
        e.stop()
        release_base_port(base)
    assert not e.leftovers()
