"""A zabref server in one ensemble with real ZooKeeper servers (issue 37, part 2): the election and quorum ports speak
ZooKeeper's wire (`zabref.net.votes`, `zabref.net.wire`, `zabref.net.zkwire`), both ways.

Two unmodified ZooKeeper 3.8.0 servers (ids 1, 2) and a zabref server (id 3) start empty together. FastLeaderElection
ranks equal votes by id, so each must come to vote for 3: the ZooKeeper servers by hearing the zabref server's vote,
and all of them decide only on a quorum of notifications in which the others' count. The zabref server decides
LEADING; ZooKeeper's servers decide FOLLOWING 3 (their own log says so), connect to its quorum port and synchronize
from it: FOLLOWERINFO, LEADERINFO, ACKEPOCH, DIFF, NEWLEADER, UPTODATE, each ZooKeeper learner logging what it
received. What follows UPTODATE is not interoperable yet: a ZooKeeper learner acknowledges UPTODATE with ACK(e << 32)
(Learner.syncWithLeader), which seed 000 and spec/Zab.tla do not have, so the zabref leader closes the connection as
a protocol error and the servers elect again.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from conformance.zk.ensemble import ZkEnsemble
from zabref.config import parse_config
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
@pytest.mark.timeout(180)
def test_two_zookeeper_servers_elect_a_zabref_server_and_synchronize_from_it(tmp_path, zk380, lines) -> None:
    base = find_free_base_port(3)
    e = ZkEnsemble(tmp_path / "zk", base, 3, tick_time_ms=200, heap_mb=256)
    try:
        config = parse_config(_zabref_config(e, tmp_path), str(tmp_path / "mixed.toml"))
        e.start_server(1)
        e.start_server(2)

        connected = f"Successfully connected to leader, using address: /127.0.0.1:{e.member(3).quorum_port}"

        def synced_from_zabref(sid: int) -> bool:
            """ZooKeeper server ``sid`` connected to the zabref server's quorum port and took its DIFF, NEWLEADER and
            UPTODATE on one connection (one stretch of its log from that connection to its next one). Any such
            connection counts: after UPTODATE the servers elect again (the module docstring), and on a busy machine
            one learner may reach UPTODATE only in a later round."""
            stretches = _log(e, sid).split("Successfully connected to leader")[1:]
            to_zabref = re.escape(connected.split("leader", 1)[1]) + r"\D"
            return any(re.match(to_zabref, s) and all(
                x in s for x in ("Getting a diff from the leader 0x0", "Learner received NEWLEADER message",
                                 "Learner received UPTODATE message")) for s in stretches)

        async def run() -> None:
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                for _ in range(600):  # the JVMs start within seconds; the election takes a few rounds
                    synced = [sid for sid in (1, 2) if synced_from_zabref(sid)]
                    if synced == [1, 2] and any("state -> LEADING" in line for line in lines.lines):
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"no mixed ensemble within 60 s: ZooKeeper servers that synchronized from 3: "
                                     f"{synced}; zabref's lines: {[x for x in lines.lines if 'state ->' in x][-5:]}")
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        asyncio.run(run())
        for sid in (1, 2):  # each ZooKeeper server read the zabref server's vote, and its configuration's text
            log = _log(e, sid)
            assert re.search(r"n\.sid:3, n\.state:LOOKING, n\.leader:3", log), f"server {sid} never heard zabref's vote"
            assert "Something went wrong while processing config" not in log  # zabref's configuration text parses
    finally:
        e.stop()
        release_base_port(base)
    assert not e.leftovers()
