"""A zabref server in one ensemble with real ZooKeeper servers (issue 37, part 2): the election and quorum ports speak
ZooKeeper's wire (`zabref.net.votes`, `zabref.net.wire`, `zabref.net.zkwire`), both ways. The first test has
ZooKeeper servers follow a zabref leader (below); the last has a zabref server follow a ZooKeeper leader (its
docstring).

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
(a zabref leader tracks no sessions). The second test has ZooKeeper clients write through a zabref leader (its
docstring).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import time
from contextlib import contextmanager

import pytest
from kazoo.client import KazooClient

from conformance.zk.ensemble import ZkEnsemble
from zabref.client import ClientError, ZabClient
from zabref.config import parse_config
from zabref.core import zktxn
from zabref.core.packets import ServerState
from zabref.core.zab import ZabState
from zabref.net import peers
from zabref.net.ports import find_free_base_port, release_base_port
from zabref.runtime.drivers import NormalDriver
from zabref.runtime.server import Server


def _zabref_config(e: ZkEnsemble, folder, zk_client_port: int | None = None) -> str:
    """The ensemble as a zabref configuration; the zabref server (id 3) serves ZooKeeper's clients on
    ``zk_client_port`` when given."""
    extra = f"zk_client_port = {zk_client_port}\n" if zk_client_port else ""
    servers = "".join(f"[[server]]\nid = {m.id}\nhost = \"127.0.0.1\"\nquorum_port = {m.quorum_port}\n"
                      f"election_port = {m.election_port}\nclient_port = {m.client_port}\n"
                      f"{extra if m.id == 3 else ''}data_dir = \"{folder}/zabref-{m.id}\"\n" for m in e.members)
    return f"[cluster]\ntick_ms = 200\ninit_limit = 10\nsync_limit = 5\n\n{servers}"


def _log(e: ZkEnsemble, sid: int) -> str:
    path = e.log_of(sid)
    return path.read_text(errors="replace") if path.exists() else ""


async def _zookeeper_2_leads(e: ZkEnsemble) -> None:
    """Start ZooKeeper servers 1 and 2; return once 2 leads in broadcast (bounded wait)."""
    e.start_server(1)
    e.start_server(2)
    await _until(e, "ZooKeeper server 2 leading in broadcast",
                 lambda: "Peer state changed: leading - broadcast" in _log(e, 2), 90, lambda: "")


async def _zabref_follows(e: ZkEnsemble, server: Server, lines) -> None:
    """Return once the zabref server ``server`` follows in broadcast (bounded wait)."""
    await _until(e, "the zabref server following in broadcast",
                 lambda: server.node is not None and server.node.core.state == ServerState.FOLLOWING
                 and server.node.core.zab_state == ZabState.BROADCAST, 60, lambda: lines.lines[-5:])


def _distribution(version: str):
    """None for Debian's 3.8.0; any other version fetched from Maven Central, once into the cache."""
    if version == "3.8.0":
        return None
    from conformance.zk.versions import fetch

    return fetch(version, echo=lambda s: None)


def _kazoo(e: ZkEnsemble, sid: int, work):
    """``work(client)`` with a kazoo client of ZooKeeper server ``sid``, closed after."""
    return kazoo_at(e.member(sid).client_port, work)


@contextmanager
def _ensemble(tmp_path, distribution, local_sessions: bool):
    """Three ZooKeeper servers' ensemble (none started), with local sessions when asked; stopped after, and no
    process of it left."""
    base = find_free_base_port(3)
    extra = ("localSessionsEnabled=true", "localSessionsUpgradingEnabled=false") if local_sessions else ()
    e = ZkEnsemble(tmp_path / "zk", base, 3, tick_time_ms=200, heap_mb=256, distribution=distribution,
                   extra_config=extra)
    try:
        yield e
    finally:
        e.stop()
        release_base_port(base)
    assert not e.leftovers()


def kazoo_at(port: int, work):
    """``work(client)`` with a kazoo client of 127.0.0.1:``port``, closed after."""
    client = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
    client.start(timeout=20)
    try:
        return work(client)
    finally:
        client.stop()
        client.close()


def _synced_from(e: ZkEnsemble, sid: int, leader: int, sync: str) -> bool:
    """ZooKeeper server ``sid`` connected to server ``leader``'s quorum port and took its ``sync`` (how its log names
    a DIFF or a SNAP), NEWLEADER and UPTODATE on one connection (one stretch of its log from that connection to its
    next one)."""
    stretches = _log(e, sid).split("Successfully connected to leader")[1:]
    to_leader = re.escape(f", using address: /127.0.0.1:{e.member(leader).quorum_port}") + r"\D"
    return any(re.match(to_leader, s) and all(
        x in s for x in (sync, "Learner received NEWLEADER message", "Learner received UPTODATE message"))
        for s in stretches)


def _zk_warnings(e: ZkEnsemble, last: int = 6) -> str:
    """The last ``last`` WARN and ERROR lines of each ZooKeeper server's log (a failed wait's evidence: a run in CI
    keeps no folder)."""
    out = []
    for m in e.members:
        found = [x[:240] for x in _log(e, m.id).splitlines()
                 if re.search(r" (WARN|ERROR) |\[(WARN|ERROR)\]", x)]  # logback's form, slf4j-simple's (3.8.0)
        out.append(f"server {m.id}: {found[-last:]}")
    return "; ".join(out)


async def _until(e: ZkEnsemble, what: str, ready, seconds: float, context) -> None:
    """Until ``ready()`` (every 0.1 s, at most ``seconds``); else an AssertionError naming ``what``, ``context()``
    and the ZooKeeper servers' last warnings."""
    for _ in range(int(seconds * 10)):  # a JVM starts within seconds; the election takes a few rounds
        if ready():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not within {seconds} s; {context()}; ZooKeeper: {_zk_warnings(e)}")


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["3.8.0", "3.9.5"])
def test_zookeeper_servers_follow_a_zabref_leader(tmp_path, zk380, lines, version) -> None:
    distribution = _distribution(version)
    with _ensemble(tmp_path, distribution, local_sessions=True) as e:
        config = parse_config(_zabref_config(e, tmp_path), str(tmp_path / "mixed.toml"))

        def synced_from_zabref(sid: int, sync: str) -> bool:
            return _synced_from(e, sid, 3, sync)

        def states() -> list[str]:
            return [x for x in lines.lines if "state ->" in x]

        async def until(what: str, ready, seconds: float) -> None:
            await _until(e, what, ready, seconds, lambda: f"zabref's states: {states()[-5:]}")

        def write(values: list[str]) -> list[int]:
            """Commit ``values`` one at a time through the zabref leader's client port: their zxids."""
            with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                return [client.submit(v) for v in values]

        def read(sid: int, zxids: list[int]) -> list[bytes]:
            """What a ZooKeeper client of server ``sid`` reads at each transaction's node (`zktxn.node_of`),
            waiting (bounded) for the server to apply the last: a follower applies a transaction on its COMMIT."""
            def work(client: KazooClient) -> list[bytes]:
                for _ in range(100):
                    if client.exists(zktxn.node_of(zxids[-1])):
                        break
                    time.sleep(0.1)
                return [client.get(zktxn.node_of(z))[0] for z in zxids]

            return _kazoo(e, sid, work)

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
                # a ZooKeeper client's sync: its follower forwards it to the zabref leader as REQUEST (op 9, its
                # session), which answers SYNC once a quorum confirmed it; then the client reads
                written = await asyncio.to_thread(write, ["mixed-3"])
                synced = await asyncio.to_thread(_kazoo, e, 2, lambda c: (c.sync("/"),
                                                                          c.get(zktxn.node_of(written[0]))[0]))
                assert synced == ("/", b"mixed-3")
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        asyncio.run(run())
        assert len(states()) == 1, f"the zabref server left LEADING ({len(states())} state changes): {states()[:4]}"
        # UpdateElectionVote (ZOOKEEPER-1732): server 2, looking for a leader after server 1 synchronized, heard the
        # zabref leader's vote at the epoch established (1), as it heard server 1's: one vote, on which it joined
        assert re.search(r"n\.sid:3, n\.state:LEADING, n\.leader:3, n\.round:0x\w+, n\.peerEpoch:0x1,", _log(e, 2))
        for sid in (1, 2):  # each ZooKeeper server read the zabref server's vote, and its configuration's text
            log = _log(e, sid)
            assert re.search(r"n\.sid:3, n\.state:(LOOKING|LEADING), n\.leader:3", log), \
                f"server {sid} never heard zabref's vote"
            assert "Something went wrong while processing config" not in log  # zabref's configuration text parses
            # one connection to the leader, one sync, and it held until the zabref server stopped
            assert log.count("Successfully connected to leader") == 1, f"server {sid} connected again"
            assert log.count("Peer state changed: following - broadcast") == 1
            assert "but next pending txn" not in log  # a COMMIT for each transaction, in order (Follower.commit)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["3.8.0", "3.9.5"])
def test_zookeeper_clients_write_through_a_zabref_leader(tmp_path, zk380, lines, version) -> None:
    """A ZooKeeper follower forwards its clients' writes to its leader as REQUEST; a zabref leader proposes the
    transaction ZooKeeper's leader would (`zabref.core.zkprep`, against the tree of its history), and the follower
    answers its client when it applies it. Errors (the node exists, no node, a version that does not match, a multi
    that fails) are ZooKeeper's error transactions, which the follower turns into the client's exceptions. Another
    ZooKeeper server reads it all; the zabref server reads each as its fields. Then server 2 loses its data
    directory and joins again: the zabref leader's SNAP is the tree those transactions made (`zabref.core.zktree`),
    and server 2 serves it. Last, server 2 misses two writes and is synchronized by a DIFF that COMMITs them, and
    applies the next write's COMMIT (a ZooKeeper follower exits on a COMMIT that is not its oldest pending
    transaction: with a sync of PROPOSALs alone it did, UNMATCHED_TXN_COMMIT)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

    with _ensemble(tmp_path, _distribution(version), local_sessions=True) as e:
        config = parse_config(_zabref_config(e, tmp_path), str(tmp_path / "mixed.toml"))

        def writes(c: KazooClient) -> tuple:
            c.create("/k", b"x")
            c.set("/k", b"y")
            seq = [c.create("/q-", b"", sequence=True) for _ in range(2)]
            errors = []
            for call in (lambda: c.create("/k", b"again"), lambda: c.delete("/none"),
                         lambda: c.set("/k", b"z", version=5)):
                try:
                    call()
                except Exception as ex:  # noqa: BLE001 -- the exception's class is what is compared
                    errors.append(type(ex))
            t = c.transaction()
            t.create("/t1", b"1")
            t.create("/t1/c", b"2")
            t.set_data("/t1", b"3", version=0)
            done = t.commit()
            t = c.transaction()
            t.create("/t2", b"")
            t.delete("/t1")
            failed = t.commit()
            return seq, errors, done, [type(r) for r in failed]

        def reads(c: KazooClient) -> tuple:
            c.sync("/")
            return (c.get("/k")[0], c.get("/t1")[0], c.get("/t1/c")[0], c.exists("/t2") is None,
                    sorted(x for x in c.get_children("/") if x.startswith("q-")))

        async def until(what: str, ready, seconds: float) -> None:
            await _until(e, what, ready, seconds, lambda: f"zabref: {lines.lines[-5:]}")

        async def run() -> tuple:
            e.start_server(1)
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                await until("server 1 synchronized from the zabref leader",
                            lambda: _synced_from(e, 1, 3, "Getting a diff from the leader"), 90)
                with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                    own = await asyncio.to_thread(client.submit, "mixed-0")  # /zabref-1-1: the root's cversion 1
                e.start_server(2)
                await until("server 2 synchronized from the zabref leader",
                            lambda: _synced_from(e, 2, 3, "Getting a snapshot from leader"), 60)
                wrote = await asyncio.to_thread(_kazoo, e, 1, writes)
                read = await asyncio.to_thread(_kazoo, e, 2, reads)
                with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                    txns = await asyncio.to_thread(client.read, 0)
                e.kill(2)
                shutil.rmtree(e.store_dir(2) / "version-2")
                e.log_of(2).rename(e.log_of(2).with_suffix(".before"))  # a new start writes a new log
                e.start_server(2)  # empty: the zabref leader's SNAP is the tree of every transaction
                await until("server 2 synchronized again by a SNAP",
                            lambda: _synced_from(e, 2, 3, "Getting a snapshot from leader"), 60)
                again = await asyncio.to_thread(_kazoo, e, 2, reads)
                # server 2 misses two writes and joins again with its log: a DIFF whose PROPOSALs the zabref leader
                # had committed, each followed by its COMMIT (spec/README.md, departure 17); a later write's COMMIT
                # is then the head of its pending transactions (without the sync's COMMITs it exits there)
                e.kill(2)
                await asyncio.to_thread(_kazoo, e, 1, lambda c: [c.create(p, b"d") for p in ("/d1", "/d2")])
                e.log_of(2).rename(e.log_of(2).with_suffix(".snap"))
                e.start_server(2)
                await until("server 2 synchronized by a DIFF",
                            lambda: _synced_from(e, 2, 3, "Getting a diff from the leader"), 60)
                await asyncio.to_thread(_kazoo, e, 1, lambda c: c.create("/d3", b"d"))
                diffed = await asyncio.to_thread(
                    _kazoo, e, 2, lambda c: (c.sync("/"), [c.exists(p) is not None for p in ("/d1", "/d2", "/d3")]))
                return own, wrote, read, txns, again, diffed[1]
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        own, (seq, errors, done, failed), read, txns, again, diffed = asyncio.run(run())
        assert diffed == [True, True, True]
        assert seq == ["/q-0000000002", "/q-0000000003"]  # the root's child version: /zabref-1-1, /k
        assert errors == [NodeExistsError, NoNodeError, BadVersionError]
        assert done[:2] == ["/t1", "/t1/c"] and done[2].version == 1  # setData's answer: the node's stat
        assert failed == [RolledBackError, NotEmptyError]
        assert read == again == (b"y", b"3", b"2", True, ["q-0000000002", "q-0000000003"])
        forms = [v if isinstance(v, str) else (v["zookeeper"], v.get("path"), v.get("err")) for _, v in txns]
        assert forms == ["mixed-0", ("create", "/k", None), ("setData", "/k", None), ("create", "/q-0000000002", None),
                         ("create", "/q-0000000003", None), ("error", None, -110), ("error", None, -101),
                         ("error", None, -103), ("multi", None, None), ("multi", None, None)]
        assert txns[0][0] == own and [z for z, _ in txns] == list(range(own, own + len(txns)))
        assert len([x for x in lines.lines if "state ->" in x]) == 1, "the zabref server left LEADING"
        for sid in (1, 2):
            assert "but next pending txn" not in _log(e, sid)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["3.8.0", "3.9.5"])
def test_a_zabref_follower_serves_zookeeper_clients_through_a_zookeeper_leader(tmp_path, zk380, lines,
                                                                              version) -> None:
    """kazoo connected to a zabref follower of a ZooKeeper leader (`zabref.net.zkclientport`): its writes go to the
    ZooKeeper leader as REQUEST, as a ZooKeeper follower's do, the leader prepares and proposes them, and the zabref
    follower answers its client when it delivers them; a kazoo client of a ZooKeeper server reads them, and the
    zabref follower's client reads what the ZooKeeper server's client wrote. The ZooKeeper servers run with local
    sessions: a session of the zabref server is one its leader does not know."""
    from kazoo.exceptions import NodeExistsError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        zk_port = probe.getsockname()[1]
    with _ensemble(tmp_path, _distribution(version), local_sessions=True) as e:
        config = parse_config(_zabref_config(e, tmp_path, zk_port), str(tmp_path / "mixed.toml"))

        def at_zabref(work):
            return kazoo_at(zk_port, work)

        def zabref_writes(c: KazooClient) -> tuple:
            c.create("/z", b"from-zabref")
            version = c.set("/z", b"again").version
            try:
                c.create("/z", b"")
                exists = None
            except NodeExistsError as ex:
                exists = type(ex)
            return version, exists

        async def run() -> tuple:
            await _zookeeper_2_leads(e)
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                await _zabref_follows(e, server, lines)
                wrote = await asyncio.to_thread(at_zabref, zabref_writes)
                seen = await asyncio.to_thread(_kazoo, e, 1, lambda c: (c.sync("/"), c.get("/z")[0],
                                                                        c.create("/w", b"from-zookeeper")))
                back = await asyncio.to_thread(at_zabref, lambda c: (c.sync("/"), c.get("/w")[0],
                                                                     sorted(c.get_children("/"))))
                return wrote, seen, back
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        wrote, seen, back = asyncio.run(run())
        assert wrote == (1, NodeExistsError)
        assert seen == ("/", b"again", "/w")
        assert back == ("/", b"from-zookeeper", ["w", "z", "zookeeper"])
        assert not [x for x in lines.lines if "protocol error" in x]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("version", ["3.8.0", "3.9.5"])
def test_a_zabref_server_follows_a_zookeeper_leader(tmp_path, zk380, lines, version) -> None:
    """ZooKeeper servers 1 and 2 elect 2; then the zabref server (3) joins. The leader, in broadcast, synchronizes it
    by a SNAP of its tree (the root and /zookeeper: an empty history, `zabref.core.zksnap`), NEWLEADER and
    UPTODATE(-1), which the zabref follower takes as the commit point its sync carried (`Node._zookeeper_sync`).
    A kazoo client of server 1 writes: its session's creation, two creates, a setData and the session's close are
    ZooKeeper's transactions, which the zabref follower logs and ACKs whole (`zktxn.FOREIGN`). Then server 1 is
    killed: the next write commits only with the zabref server's ACK (the quorum is {2, 3}). Server 1 restarts, the
    zabref server stops, a write commits on {1, 2}, and the zabref server starts again on its data directory: the
    leader synchronizes it by a DIFF from its committedLog (each PROPOSAL followed by its COMMIT), and a zabref
    client of server 3 reads every transaction, those read back from its log included, each shown as its fields."""
    with _ensemble(tmp_path, _distribution(version), local_sessions=False) as e:
        config = parse_config(_zabref_config(e, tmp_path), str(tmp_path / "mixed.toml"))

        def read() -> list:
            with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                return client.read(0)

        async def until(what: str, ready, seconds: float) -> None:
            await _until(e, what, ready, seconds, lambda: f"zabref: {lines.lines[-5:]}")

        async def run() -> list:
            e.start_server(1)
            e.start_server(2)
            await until("ZooKeeper server 2 leading in broadcast",
                        lambda: "Peer state changed: leading - broadcast" in _log(e, 2), 90)
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                await until("the zabref server synchronized by ZooKeeper's leader",
                            lambda: server.node is not None and server.node.core.state == ServerState.FOLLOWING
                            and server.node.core.zab_state == ZabState.BROADCAST, 60)
                await asyncio.sleep(1)  # UPTODATE follows NEWLEADER's ACK at once
                await asyncio.to_thread(_kazoo, e, 1, lambda c: [c.create("/a", b"x"), c.create("/b", b"y"),
                                                                c.set("/a", b"z")])
                e.kill(1)
                await asyncio.to_thread(_kazoo, e, 2, lambda c: c.create("/c", b"w"))  # committed on {2, 3}
                await until_read("/c")
                # a zabref client's sync: the zabref follower sends REQUEST (op 9, no session) to ZooKeeper's
                # leader, whose SYNC answers it with everything committed before it
                with ZabClient([("127.0.0.1", e.member(3).client_port)], timeout=20) as client:
                    synced = await asyncio.to_thread(client.sync)
                assert synced == max(z for z, _ in await asyncio.to_thread(read))
                # server 1 back; the zabref server stops (its log is on disk) and misses /d, committed on {1, 2}
                e.start_server(1)
                await asyncio.to_thread(e.wait_serving, [1], 60)
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)
            await asyncio.to_thread(_kazoo, e, 2, lambda c: c.create("/d", b"v"))
            server = Server(config, 3, NormalDriver(0.2))  # the same data directory: rejoins by a DIFF
            task = asyncio.create_task(server.run())
            try:
                return await until_read("/d")
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        async def until_read(path: str) -> list:
            """The zabref server's delivered transactions once they hold ``path``'s create (bounded wait)."""
            txns: list = []
            deadline = asyncio.get_running_loop().time() + 60  # a restart: an election round and a sync
            while asyncio.get_running_loop().time() < deadline:
                try:
                    txns = await asyncio.to_thread(read)
                except (OSError, ClientError):  # the restarted server's client port is not open yet
                    txns = []
                if any(isinstance(v, dict) and v.get("path") == path for _, v in txns):
                    return txns
                await asyncio.sleep(0.1)
            raise AssertionError(f"the zabref server did not deliver {path}'s create: {txns}")

        txns = asyncio.run(run())
        writes = [(v["zookeeper"], v["path"], v["data"]) for _, v in txns if "data" in v]
        assert writes == [("create", "/a", "x"), ("create", "/b", "y"), ("setData", "/a", "z"), ("create", "/c", "w"),
                          ("create", "/d", "v")]
        assert [v["zookeeper"] for _, v in txns].count("createSession") == 3  # one session each client
        assert [z for z, _ in txns] == sorted(z for z, _ in txns) and all(z >> 32 == txns[0][0] >> 32 for z, _ in txns)
        assert not [x for x in lines.lines if "protocol error" in x], "the zabref follower refused a packet"
        states = [x for x in lines.lines if "state ->" in x]
        assert len(states) == 2 and all("FOLLOWING" in x for x in states), states  # once per start
        leader_log = _log(e, 2)
        assert "Sending snapshot last zxid of peer is 0x0" in leader_log  # a SNAP: ZooKeeper's snapshot stream
        assert re.search(r"Sending DIFF zxid=0x[0-9a-f]+ +for peer sid: 3", leader_log)  # PROPOSAL and COMMIT pairs
        assert leader_log.count("Follower sid: 3") == 2  # one sync per start


#: (version, nodes of BIG_VALUE bytes written under /big before the zabref server joins)
SNAP_CASES = [("3.8.0", 0), ("3.9.5", 0), ("3.9.5", 20)]
BIG_VALUE = 900_000  # within ZooKeeper's jute.maxbuffer (1 MiB) for one request


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("version", "big"), SNAP_CASES)
def test_a_zabref_server_that_joins_after_zookeepers_clients_wrote_takes_their_tree_by_snap(tmp_path, zk380, lines,
                                                                                           version, big) -> None:
    """docs/zookeeper.md, item 1 (a): ZooKeeper's clients write, then an empty zabref server joins; ZooKeeper's
    leader synchronizes it by a SNAP of a tree that holds their nodes, which the zabref follower keeps whole as the
    base of its history (`zktxn.SNAPSHOT`). It then ACKs the next writes (server 1 killed: they commit on {2, 3})
    and serves kazoo reads of the nodes from the snapshot, of their data and version, and of those written after.
    With ``big`` nodes of 900 KB the snapshot stream is larger than a quorum packet's data bound (16 MiB,
    `peers.MAX_QUORUM_DATA`): before its own bound (`peers.MAX_SNAPSHOT`) the zabref server refused every SNAP and
    never joined."""
    value = bytes(range(256)) * (BIG_VALUE // 256)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        zk_port = probe.getsockname()[1]
    with _ensemble(tmp_path, _distribution(version), local_sessions=True) as e:
        config = parse_config(_zabref_config(e, tmp_path, zk_port), str(tmp_path / "mixed.toml"))

        async def run() -> tuple:
            await _zookeeper_2_leads(e)
            await asyncio.to_thread(_kazoo, e, 1, lambda c: [c.create("/a", b"x"), c.create("/b", b"y"),
                                                            c.set("/a", b"z")]
                                    + [c.create(f"/big/{k}", value, makepath=True) for k in range(big)])
            server = Server(config, 3, NormalDriver(0.2))
            task = asyncio.create_task(server.run())
            try:
                await _zabref_follows(e, server, lines)
                base = server.node.core.history[0]
                e.kill(1)
                await asyncio.to_thread(_kazoo, e, 2, lambda c: c.create("/c", b"w"))  # committed on {2, 3}
                return base, await asyncio.to_thread(
                    kazoo_at, zk_port, lambda c: (c.sync("/"), c.get("/a")[0], c.get("/a")[1].version,
                                                  c.get("/b")[0], c.get("/c")[0], sorted(c.get_children("/")),
                                                  [c.get(f"/big/{k}")[0] == value for k in range(big)]))
            finally:
                server.stop()
                await asyncio.wait_for(task, 30)

        base, read = asyncio.run(run())
        assert base.value[:1] == zktxn.SNAPSHOT
        assert read == ("/", b"z", 1, b"y", b"w", ["a", "b", *(["big"] if big else []), "c", "zookeeper"],
                        [True] * big)
        assert (len(base.value) > peers.MAX_QUORUM_DATA) == (big > 0)
        assert not [x for x in lines.lines if "protocol error" in x], "the zabref follower refused a packet"
        assert "Sending snapshot last zxid of peer is 0x0" in _log(e, 2)
