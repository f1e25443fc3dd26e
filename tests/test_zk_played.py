"""A real ZooKeeper server with the other servers played by the driver through zabref.net.zkwire
(conformance/zk/played.py; issue 37, part 3's first step): it elects the played leader, syncs by DIFF, logs and
acknowledges a proposal, applies it only at the commit."""

from __future__ import annotations

import asyncio
import time

import pytest

from conformance.zk.disk import log_files, read_epochs, read_txn_log
from conformance.zk.ensemble import ZkEnsemble, four_letter
from conformance.zk.payloads import decode_data
from conformance.zk.played import ElectionLink, PlayedLeader, newleader_config, txn_create
from conformance.zk.txns import decode_txn
from zabref.net.ports import find_free_base_port, release_base_port

EPOCH = 1 << 32


@pytest.fixture
def zk380():
    from conformance.zk.versions import find_classpath

    if find_classpath() is None:
        pytest.skip("needs Debian's zookeeper package (zabref zk fetch 3.8.0 installs it)")


def _srvr(port: int) -> dict[str, str]:
    text = four_letter(port, "srvr")
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


async def _dial(e: ZkEnsemble, sid: int) -> ElectionLink:
    for _ in range(150):  # the JVM starts listening within seconds
        try:
            return await ElectionLink.dial(e.member(1), sid, f"127.0.0.1:{e.member(sid).election_port}")
        except OSError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"ZooKeeper server 1 never listened on its election port {e.member(1).election_port}")


async def _follow_a_played_leader(e: ZkEnsemble) -> dict:
    seen: dict = {}
    zk = e.member(1)
    config = newleader_config(e.members)
    leader = await PlayedLeader(e.member(2).quorum_port, 2).start()
    links = {}
    try:
        # the election: 2 says it leads round 1, 3 that it follows 2; the real server 1 votes for itself first
        for sid, state in ((2, "LEADING"), (3, "FOLLOWING")):
            links[sid] = await _dial(e, sid)
            links[sid].send(state, 2, 0, 1, 1, config)
        seen["vote"] = await links[2].recv()
        # discovery and a DIFF sync, as a 3.8 leader does it (LEADERINFO's data: the protocol version)
        q = await leader.learner()
        seen["followerinfo"] = await q.recv()
        q.send("LEADERINFO", EPOCH, (0x10000).to_bytes(4, "big"))
        seen["ackepoch"] = await q.recv()
        q.send("DIFF", 0)
        q.send("NEWLEADER", EPOCH, config.encode())
        seen["ack_newleader"] = await q.recv()
        q.send("UPTODATE", -1)
        seen["ack_uptodate"] = await q.recv()
        # broadcast: a proposal is logged and acknowledged, and applied only at its commit
        z = EPOCH + 1
        q.send("PROPOSAL", z, txn_create(z, "/played", b"hello", time_ms=int(time.time() * 1000)))
        seen["ack_proposal"] = await q.recv()
        seen["before_commit"] = _srvr(zk.client_port)
        q.send("COMMIT", z)
        leader.zxid = z
        for _ in range(50):
            seen["after_commit"] = _srvr(zk.client_port)
            if seen["after_commit"].get("Zxid") == hex(z):
                break
            await asyncio.sleep(0.1)
        return seen
    finally:
        await leader.close()
        for link in links.values():
            link.close()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_real_zookeeper_follows_a_played_leader_through_election_diff_and_a_commit(tmp_path, zk380) -> None:
    base = find_free_base_port(3)
    e = ZkEnsemble(tmp_path / "zk", base, 3, tick_time_ms=200, heap_mb=256)
    try:
        e.start_server(1)
        seen = asyncio.run(asyncio.wait_for(_follow_a_played_leader(e), 120))
        data_dir = e.data_dir(1)
        epochs = read_epochs(data_dir)
        logs = [read_txn_log(p) for p in log_files(data_dir)]
    finally:
        e.stop()
        release_base_port(base)
    vote = seen["vote"]
    assert (vote.state, vote.leader, vote.election_epoch, vote.version) == (0, 1, 1, 2)  # LOOKING, for itself
    name, p = seen["followerinfo"]
    info = decode_data(p.type, p.data, False, "FOLLOWERINFO")
    assert name == "FOLLOWERINFO" and info["sid"] == 1 and info["protocolVersion"] == "0x10000"
    name, p = seen["ackepoch"]
    assert name == "ACKEPOCH" and p.zxid == 0 and decode_data(p.type, p.data, False, "ACKEPOCH") == {"currentEpoch": 0}
    assert [(n, p.zxid) for n, p in (seen["ack_newleader"], seen["ack_uptodate"])] == [("ACK", EPOCH)] * 2
    assert seen["ack_proposal"][0] == "ACK" and seen["ack_proposal"][1].zxid == EPOCH + 1
    # the follower logged the proposal before its ACK, and applied it only at the COMMIT
    assert seen["before_commit"]["Mode"] == "follower" and int(seen["before_commit"]["Zxid"], 16) < EPOCH + 1
    assert seen["after_commit"]["Zxid"] == hex(EPOCH + 1)
    assert int(seen["after_commit"]["Node count"]) == int(seen["before_commit"]["Node count"]) + 1
    assert epochs == {"acceptedEpoch": 1, "currentEpoch": 1}
    records = [r.txn for log in logs for r in log.records]
    assert [(t["zxid"], t["op"], t.get("path")) for t in records] == [(EPOCH + 1, "create", "/played")]


def test_a_played_proposal_is_a_transaction_zookeepers_decoder_reads() -> None:
    data = txn_create(EPOCH + 7, "/a/b", b"xyz", time_ms=5, session=9, cxid=3, parent_cversion=2)
    t = decode_txn(data, "PROPOSAL")
    assert (t["op"], t["zxid"], t["path"], t["data"], t["acl"], t["ephemeral"], t["parentCVersion"], t["cxid"],
            t["session"]) == ("create", EPOCH + 7, "/a/b", "xyz", ["world:anyone:31"], False, 2, 3, "0x9")
    assert "digest" not in t  # ZooKeeper reads a digest only when bytes follow the record
