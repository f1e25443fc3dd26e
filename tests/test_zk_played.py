"""A real ZooKeeper server with the other servers played by the driver through zabref.net.zkwire
(conformance/zk/played.py; issue 37, part 3's first step): it elects the played leader, syncs by DIFF, logs and
acknowledges a proposal, applies it only at the commit."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from pathlib import Path

import pytest

from conformance.zk.disk import log_files, read_epochs, read_txn_log
from conformance.zk.ensemble import ZkEnsemble, four_letter
from conformance.zk.payloads import decode_data
from conformance.zk.played import ElectionLink, PlayedLeader, newleader_config
from conformance.zk.txns import decode_txn
from zabref.core.packets import Notification, ServerState
from zabref.core.zktxn import encode_create
from zabref.net import wire, zkwire
from zabref.net.ports import find_free_base_port, release_base_port

EPOCH = 1 << 32


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
        leader.ping(q)
        seen["ack_uptodate"] = await q.recv()
        # broadcast: a proposal is logged and acknowledged, and applied only at its commit
        z = EPOCH + 1
        q.send("PROPOSAL", z, encode_create(z, "/played", b"hello", time_ms=int(time.time() * 1000)))
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
    # the real server's bytes (the reader's inverse gives them back) are a notification a zabref server reads
    assert wire.decode_notification(zkwire.encode_notification(vote)[4:]) == Notification(
        ServerState.LOOKING, 1, vote.zxid, 1, vote.peer_epoch)
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


def test_a_create_transaction_is_one_zookeepers_decoder_reads() -> None:
    data = encode_create(EPOCH + 7, "/a/b", b"xyz", time_ms=5, session=9, cxid=3, parent_cversion=2)
    t = decode_txn(data, "PROPOSAL")
    assert (t["op"], t["zxid"], t["path"], t["data"], t["acl"], t["ephemeral"], t["parentCVersion"], t["cxid"],
            t["session"]) == ("create", EPOCH + 7, "/a/b", "xyz", ["world:anyone:31"], False, 2, 3, "0x9")
    assert "digest" not in t  # ZooKeeper reads a digest only when bytes follow the record


# ------------------------------------------------------------------------ spec traces against a real follower


REGRESSION = Path(__file__).resolve().parent.parent / "traces" / "regression"


def _replay(trace, tmp_path, sut: int | None = None, distribution=None):
    from conformance.zk.conform import replay_trace

    base = find_free_base_port(3)
    try:
        return replay_trace(trace, tmp_path / "zk", base, sut=sut, distribution=distribution)
    finally:
        release_base_port(base)


def _mutated(trace, index: int, change) -> object:
    """``trace`` with step ``index``'s state changed by ``change(state)`` (a deep copy)."""
    steps = list(trace.steps)
    state = copy.deepcopy(steps[index].state)
    change(state)
    steps[index] = dataclasses.replace(steps[index], state=state)
    return dataclasses.replace(trace, steps=tuple(steps))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spec_traces_drive_a_real_zookeeper_follower_step_by_step(tmp_path, zk380) -> None:
    from conformance.graph.traces import read_trace

    # election, discovery, DIFF and NEWLEADER, then the leader takes in another server by SNAP: every step followed
    o = _replay(read_trace(REGRESSION / "join-established-leader.jsonl.gz"), tmp_path / "a")
    assert (o.verdict, o.done, o.steps) == ("followed", 15, 15), o.line()
    # UPTODATE (ZooKeeper's extra ACK of it, decided), a proposal logged and acknowledged, the leader's crash, the
    # follower's timeout; then the real server leads, a played follower joins, and the proposal survives
    fig3 = read_trace(REGRESSION / "fig3-committed-survives-leader-crash.jsonl.gz")
    o = _replay(fig3, tmp_path / "b")
    assert (o.verdict, o.done) == ("followed", 22), o.line()
    assert o.decided == ["FollowerProcessUPTODATE: ACK 0x100000000"]
    # the real server crashes, leads, and sends a stale follower the TRUNC the spec's leader sends
    o = _replay(read_trace(REGRESSION / "sync-trunc.jsonl.gz"), tmp_path / "c")
    assert (o.verdict, o.done) == ("followed", 24), o.line()
    # client requests to the real leader (a local session): its PROPOSALs and COMMITs to the played followers
    o = _replay(read_trace(REGRESSION / "sync-trunc-then-proposals.jsonl.gz"), tmp_path / "d")
    assert (o.verdict, o.done) == ("followed", 32), o.line()
    # the real leader syncs a follower by SNAP while a proposal of its epoch is outstanding: ZooKeeper's SNAP is of
    # its committed state, the proposal follows it; the spec's SNAP carries both; the follower ends the same
    o = _replay(read_trace(REGRESSION / "sync-snap.jsonl.gz"), tmp_path / "s")
    assert (o.verdict, o.done) == ("followed", 28), o.line()
    assert o.synced[-1] == "SNAP as SNAP 0x200000000 + 1 PROPOSAL", o.synced


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_real_server_in_other_seats_takes_a_trunc_and_a_snap_and_departs_where_zookeeper_truncates(
        tmp_path, zk380) -> None:
    """Every seat (`zabref conform --every-seat`): the real server in the seat of the follower a TRUNC is sent to
    follows a ci trace; in the seat of the follower whose SNAP carries an outstanding proposal, it follows (the SNAP
    played as ZooKeeper's leader sends one: its committed state, then the proposal). Two things ZooKeeper's follower
    does that ci's does not are departures at their step (docs/zookeeper.md, "Every seat"): it truncates its log
    when it takes TRUNC, before NEWLEADER (what the model cizk admits: spec/README.md, departure 11; these are ci's
    traces, the seed's follower); and a TRUNC to a zxid its log does not hold keeps the first transaction above it
    (FileTxnLog.truncate stops after the first record at or above the zxid: finding 2, not decided)."""
    from conformance.graph.cache import ensure_traces
    from conformance.graph.traces import read_trace

    def truncated(t) -> int | None:
        """The follower of ``t``'s first FollowerProcessTRUNC, or None."""
        return next((s.params["i"] for s in t.steps[1:] if s.action == "FollowerProcessTRUNC"), None)

    trunc, seat = next((t, i) for p in sorted(ensure_traces("ci").glob("*.jsonl.gz"))
                       if (i := truncated(t := read_trace(p))) is not None)
    o = _replay(trunc, tmp_path / "t", sut=seat)
    assert (o.verdict, o.done) == ("followed", len(trunc.steps) - 1) and o.sut == seat, o.line()
    assert any(label.startswith("FollowerProcessTRUNC") for label in o.own), o.own
    snap = read_trace(REGRESSION / "sync-snap.jsonl.gz")
    o = _replay(snap, tmp_path / "s", sut=2)
    # ZOOKEEPER-4685 (3.8.0): the learner's SyncRequestProcessor logs the SNAP's outstanding proposal and may ACK it
    # before the QuorumPeer thread ACKs NEWLEADER -- a race inside the server (seen in the suite on a loaded
    # machine); the driver notes that order and compares the ACK at UPTODATE (`EARLY_ACK`), so both orders follow
    assert (o.verdict, o.done) == ("followed", 28), o.line()
    early = read_trace(REGRESSION / "sync-trunc-to-prefix.jsonl.gz")
    o = _replay(early, tmp_path / "e", sut=2)
    assert (o.verdict, o.action) == ("departed", "FollowerProcessTRUNC"), o.line()
    assert "the files hold ['0x100000001'], the spec's history ['0x100000001', '0x100000002']" in o.why, o.line()
    absent = read_trace(REGRESSION / "sync-trunc.jsonl.gz")
    o = _replay(absent, tmp_path / "a", sut=2)
    assert (o.verdict, o.action) == ("departed", "FollowerProcessNEWLEADER"), o.line()
    assert "the files hold ['0x100000001'], the spec's history []" in o.why, o.line()
    trunc_step = next(s for s in absent.steps[1:o.at] if s.action == "FollowerProcessTRUNC" and s.params["i"] == 2)
    assert trunc_step.state["stagedHistory"][1] == []  # a TRUNC to <<0, 0>>: a zxid no log holds


@pytest.fixture
def zk395():
    """ZooKeeper 3.9.5 from Maven Central, fetched once into the cache (`zabref zk fetch 3.9.5`)."""
    from conformance.zk.versions import fetch

    return fetch("3.9.5", echo=lambda s: None)


def _deferring_seat(trace) -> int:
    """The server whose NEWLEADER leaves transactions staged in a cizk39 trace (NewLeaderDefers)."""
    return next(s.params["i"] for s in trace.steps[1:]
                if s.action == "FollowerProcessNEWLEADER" and s.state["stagedHistory"][s.params["i"] - 1])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_39_follower_logs_the_uncommitted_proposals_of_its_sync_at_uptodate_as_newleader_defers_says(
        tmp_path, zk380, zk395) -> None:
    """ZooKeeper 3.9.3+ persists at NEWLEADER only what its sync COMMITted and logs the rest after UPTODATE (spec
    /README.md, departure 12: `NewLeaderDefers`, model cizk39). Its traces in traces/zookeeper: 3.9.5 follows both
    (the played leader's DIFF COMMITs what it had committed, as ZooKeeper's leader sends its committedLog); 3.8.0,
    which logs them at NEWLEADER, departs there; and ci's sync-diff, whose follower logs the proposal at NEWLEADER,
    is a departure of 3.9.5 at that step. The same scenario in cizk39 without the deferral is a choice of the spec
    no ZooKeeper leader makes a 3.9.3+ follower take: the replay stops there; 3.8.0 follows it."""
    from conformance.graph.traces import read_trace
    from conformance.replay.regress import ZOOKEEPER_DIR

    defers = read_trace(ZOOKEEPER_DIR / "sync-newleader-defers.jsonl.gz")
    seat = _deferring_seat(defers)
    o = _replay(defers, tmp_path / "a", seat, zk395)
    assert (o.verdict, o.done) == ("followed", len(defers.steps) - 1), o.line()
    behind = read_trace(ZOOKEEPER_DIR / "sync-newleader-defers-then-proposal.jsonl.gz")
    o = _replay(behind, tmp_path / "b", _deferring_seat(behind), zk395)
    assert (o.verdict, o.done) == ("followed", len(behind.steps) - 1), o.line()
    o = _replay(defers, tmp_path / "c", seat)  # Debian's 3.8.0
    assert (o.verdict, o.action) == ("departed", "FollowerProcessNEWLEADER"), o.line()
    assert "the spec's history []" in o.why and "the files hold ['0x100000001']" in o.why, o.line()
    o = _replay(read_trace(REGRESSION / "sync-diff.jsonl.gz"), tmp_path / "d", None, zk395)
    assert (o.verdict, o.action) == ("departed", "FollowerProcessNEWLEADER"), o.line()
    assert "the files hold ['0x100000001'], the spec's history ['0x100000001', '0x100000002']" in o.why, o.line()
    no_deferral = read_trace(ZOOKEEPER_DIR / "sync-diff.jsonl.gz")
    o = _replay(no_deferral, tmp_path / "e", None, zk395)
    assert (o.verdict, o.action) == ("stopped", "FollowerProcessNEWLEADER"), o.line()
    assert "leaves 0 transaction(s) staged; a ZooKeeper leader's sync leaves a 3.9.3+ follower 1" in o.why
    o = _replay(no_deferral, tmp_path / "f")  # 3.8.0 logs it at NEWLEADER, as this trace does: followed
    assert (o.verdict, o.done) == ("followed", len(no_deferral.steps) - 1), o.line()


def _one_commit(trace, at: int) -> object:
    """``trace`` cut after step ``at + 1``, with the spec's form before 2026-11-30 from step ``at`` on: where one
    ACK commits two transactions, its leader sends one COMMIT of the last, which the follower takes at step at + 1."""
    def merged(state: dict) -> None:
        for row in state["msgs"]:
            for ch in row:
                if [m["type"] for m in ch[-2:]] == ["COMMIT", "COMMIT"]:
                    del ch[-2]

    out = _mutated(trace, at, merged)
    taken = copy.deepcopy(trace.steps[at + 2].state)  # both COMMITs taken: the follower has delivered both
    taken["msgs"] = out.steps[at].state["msgs"]
    taken["msgs"][1][0] = []
    last = dataclasses.replace(trace.steps[at + 1], state=taken)
    return dataclasses.replace(out, steps=out.steps[:at + 1] + (last,))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_follower_takes_one_commit_per_transaction_of_an_ack_that_commits_two_and_resets_on_one(
        tmp_path, zk380) -> None:
    """traces/zookeeper's ack-commits-two-at-once: a follower synced by SNAP ACKs its last proposal at UPTODATE,
    which commits two at once, and the real server (server 1, behind on both) takes COMMIT(<<1, 1>>) and COMMIT(<<1,
    2>>) in order (spec/Zab.tla's `Commits` since 2026-11-30). Given one COMMIT of the last instead (the spec's form
    before), it resets the connection: ZooKeeper's follower applies a COMMIT only to its oldest pending transaction
    (docs/zookeeper.md, mixed ensembles, item 3)."""
    from conformance.graph.traces import read_trace
    from conformance.replay.regress import ZOOKEEPER_DIR

    trace = read_trace(ZOOKEEPER_DIR / "ack-commits-two-at-once.jsonl.gz")
    assert [s.action for s in trace.steps[-3:]] == ["LeaderProcessACK", "FollowerProcessCOMMIT",
                                                    "FollowerProcessCOMMIT"]
    o = _replay(trace, tmp_path / "a", 1)
    assert (o.verdict, o.done) == ("followed", len(trace.steps) - 1), o.line()
    one = _one_commit(trace, len(trace.steps) - 3)
    o = _replay(one, tmp_path / "b", 1)
    assert (o.verdict, o.action, o.done) == ("departed", "FollowerProcessCOMMIT", len(one.steps) - 2), o.line()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_follower_holding_an_outstanding_proposal_is_truncated_sent_it_again_and_commits_it(tmp_path, zk380) -> None:
    """traces/zookeeper's sync-outstanding-sent-again: the real server logs a proposal, crashes before its leader
    commits it and joins the same leader again, which TRUNCs it to its commit point and sends the proposal again
    (spec/Zab.tla's SyncPackets since 2026-12-01, as ZooKeeper's own leader syncs); it then takes that proposal's
    COMMIT. With the spec's sync before (DIFF from the proposal it holds), a ZooKeeper follower exits at that COMMIT:
    it commits only what came on its connection (docs/zookeeper.md, mixed ensembles, item 8)."""
    from conformance.graph.traces import read_trace
    from conformance.replay.regress import ZOOKEEPER_DIR

    trace = read_trace(ZOOKEEPER_DIR / "sync-outstanding-sent-again.jsonl.gz")
    names = [s.action for s in trace.steps]
    assert names.index("FollowerProcessTRUNC") == names.index("LeaderProcessACKEPOCH", names.index("Crash")) + 1
    assert names[-1] == "FollowerProcessCOMMIT" and trace.steps[-1].params["i"] == 1
    o = _replay(trace, tmp_path / "a", 1)
    assert (o.verdict, o.done) == ("followed", len(trace.steps) - 1), o.line()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_follower_that_leaves_between_newleader_and_uptodate_leads_with_a_data_tree_behind_its_log(
        tmp_path, zk380) -> None:
    """A ci trace, the real server in the seat of a follower synced by a SNAP with outstanding proposals (played
    as ZooKeeper's leader sends them: after the snapshot), which leaves before UPTODATE and then leads: ZooKeeper
    3.8.0 logged the proposals at NEWLEADER but applied none, and a server started without serving skips
    `fastForwardDataBase` when it shuts down, so its data tree stays at the SNAP's zxid; as leader it refuses a
    follower whose ACKEPOCH names one of those proposals ("Follower is ahead of the leader"), where the spec's
    leader, whose history holds them, goes on (docs/zookeeper.md, "Every seat": the 4394 family, fixed in 3.9.3)."""
    from conformance.graph.cache import ensure_traces
    from conformance.graph.traces import read_trace
    from conformance.zk.conform import seats_of

    def left_then_led(t, sut: int) -> int | None:
        """The index of ``sut``'s first LeaderProcessACKEPOCH after it took such a SNAP and NEWLEADER, timed out
        before UPTODATE and led."""
        if (k := _snap_then_newleader(t, sut, outstanding=True)) is None:
            return None
        mine = [(n, s.action) for n, s in enumerate(t.steps[k + 1:], k + 1) if s.params.get("i") == sut]
        names = [a for _, a in mine]
        if names[:3] != ["FollowerProcessNEWLEADER", "FollowerTimeout", "BecomeLeader"]:
            return None
        return next((n for n, a in mine if a == "LeaderProcessACKEPOCH"), None)

    trace, sut, at = next((t, sut, n) for p in sorted(ensure_traces("ci").glob("*.jsonl.gz"))
                          for t in [read_trace(p)] for sut in seats_of(t) if (n := left_then_led(t, sut)))
    o = _replay(trace, tmp_path / "a", sut)
    assert (o.verdict, o.at) == ("departed", at) and "closed the connection" in o.why, o.line()
    log = (tmp_path / "a" / "zk" / "1" / "server.log").read_text(errors="replace")
    assert "Follower is ahead of the leader" in log


def _snap_then_newleader(trace, sut: int, outstanding: bool = False) -> int | None:
    """The index of the step at which server ``sut`` of ``trace`` takes a SNAP, if its NEWLEADER follows, and the
    SNAP's leader had (``outstanding``) or had not proposals it had not committed (ZooKeeper's leader sends those as
    PROPOSALs after its snapshot: `_send_snap`)."""
    seen = None
    for k, step in enumerate(trace.steps[1:], 1):
        if step.params.get("i") is not None and int(step.params["i"]) == sut:
            if step.action == "FollowerProcessSNAP":
                j, before = int(step.params["j"]), trace.steps[k - 1].state
                sent = before["msgs"][j - 1][sut - 1][0]["data"]
                pending = (before["zabState"][j - 1] == "BROADCAST" and before["lastCommitted"][j - 1] < len(sent))
                seen = k if pending == outstanding else None
            elif step.action == "FollowerProcessNEWLEADER" and seen is not None:
                return seen
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_played_snap_leaves_the_real_follower_with_the_trees_transactions(tmp_path, zk380) -> None:
    """A played leader's SNAP: the data tree in ZooKeeper's wire format, a node a transaction. The real follower
    takes it and writes it to a snapshot at NEWLEADER (its txnlog holds none of them); a tree that leaves out a
    transaction is a departure at the NEWLEADER that persists it."""
    from conformance.graph.cache import ensure_traces
    from conformance.graph.traces import read_trace
    from conformance.zk.disk import snapshot_files
    from conformance.zk.snapshot import read_snapshot_file

    from conformance.zk.conform import seats_of

    traces = [read_trace(p) for p in sorted(ensure_traces("ci").glob("*.jsonl.gz"))]
    trace, sut, at = next((t, sut, k) for t in traces for sut in seats_of(t)
                          if (k := _snap_then_newleader(t, sut)) is not None)
    o = _replay(trace, tmp_path / "a", sut)
    assert (o.verdict, o.done) == ("followed", len(trace.steps) - 1), o.line()
    snap = next(m for ch in trace.steps[at - 1].state["msgs"] for msgs in ch for m in msgs if m["type"] == "SNAP")
    assert snap["data"], "a SNAP of no transaction shows little"
    name = f"snapshot.{snap['zxid'][0] << 32 | snap['zxid'][1]:x}"
    written = [p for p in snapshot_files(tmp_path / "a" / "zk" / "1") if p.name == name]
    assert written, f"the follower wrote no {name}"
    held = sorted(z for z in read_snapshot_file(written[0])["czxids"].values() if z)
    assert held == [t["zxid"][0] << 32 | t["zxid"][1] for t in snap["data"]]

    def short(state):  # the step before: the played leader's SNAP leaves out its last transaction
        for ch in state["msgs"]:
            for msgs in ch:
                for m in msgs:
                    if m["type"] == "SNAP":
                        m["data"] = m["data"][:-1]

    o = _replay(_mutated(trace, at - 1, short), tmp_path / "b", sut)
    newleader = next(k for k in range(at + 1, len(trace.steps)) if trace.steps[k].action == "FollowerProcessNEWLEADER")
    assert (o.verdict, o.at) == ("departed", newleader), o.line()
    assert "the files hold" in o.why and "the spec's history" in o.why, o.line()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_real_zookeeper_that_does_otherwise_than_the_trace_is_a_departure_at_that_step(tmp_path, zk380) -> None:
    """Each comparison shown able to fail: the trace, not ZooKeeper, is changed at one step."""
    from conformance.graph.traces import read_trace

    fig3 = read_trace(REGRESSION / "fig3-committed-survives-leader-crash.jsonl.gz")

    def ack_of_another_zxid(state):  # step 11, FollowerProcessPROPOSAL: the spec's ACK says zxid (1, 2)
        state["msgs"][0][1][-1]["zxid"] = [1, 2]

    def epoch_on_disk(state):  # step 4, FollowerProcessLEADERINFO: the spec's follower accepts epoch 2
        state["acceptedEpoch"][0] = 2

    def ackepoch_data(state):  # step 4: the spec's ACKEPOCH says currentEpoch 3
        state["msgs"][0][1][-1]["data"] = 3

    def history(state):  # step 11: the spec's follower logged nothing
        state["history"][0] = []

    for index, change, why in [(11, ack_of_another_zxid, "the spec sends ACK zxid [1, 2]; ZooKeeper sent ACK "
                                                         "0x100000001"),
                               (4, epoch_on_disk, "acceptedEpoch on disk is 1, the spec's 2"),
                               (4, ackepoch_data, "ACKEPOCH says currentEpoch 0, the spec 3"),
                               (11, history, "the files hold ['0x100000001'], the spec's history []")]:
        o = _replay(_mutated(fig3, index, change), tmp_path / f"{index}-{change.__name__}")
        assert (o.verdict, o.at, o.done) == ("departed", index, index - 1), o.line()
        assert why in o.why, o.line()
    # the real server as leader: the spec's leader would send a DIFF where ZooKeeper sends TRUNC (step 20,
    # LeaderProcessACKEPOCH, in sync-trunc)

    def diff_not_trunc(state):
        state["msgs"][0][1][0]["type"] = "DIFF"

    o = _replay(_mutated(read_trace(REGRESSION / "sync-trunc.jsonl.gz"), 20, diff_not_trunc), tmp_path / "trunc")
    assert (o.verdict, o.at) == ("departed", 20), o.line()
    assert ("the spec's DIFF leaves the follower with [0x100000001] at NEWLEADER [2, 0]; ZooKeeper's TRUNC 0x0 "
            "(+0 packets) with [] at NEWLEADER [2, 0]") in o.why, o.line()
    # sync-snap (step 24): ZooKeeper's SNAP of its committed state and the outstanding proposal after it leave the
    # follower with the spec's SNAP's history; a spec whose SNAP stops short of that proposal, or names another new
    # epoch, is a departure there

    def snap_short(state):
        state["msgs"][0][1][0]["zxid"] = [2, 0]

    def other_epoch(state):
        state["msgs"][0][1][-1]["zxid"] = [3, 0]

    snap = read_trace(REGRESSION / "sync-snap.jsonl.gz")
    for change, why in [(snap_short, "the spec's SNAP leaves the follower with [] at NEWLEADER [2, 0]; ZooKeeper's "
                                     "SNAP 0x200000000 (+1 packets) with [0x200000001]"),
                        (other_epoch, "with [0x200000001] at NEWLEADER [3, 0]; ZooKeeper's SNAP")]:
        o = _replay(_mutated(snap, 24, change), tmp_path / f"snap-{change.__name__}")
        assert (o.verdict, o.at, o.done) == ("departed", 24, 23), o.line()
        assert why in o.why, o.line()


def test_a_synchronization_is_compared_by_the_history_it_leaves_the_follower_with() -> None:
    from conformance.zk.conform import sync_result

    def txns(*zs):
        return [{"zxid": list(z), "value": 0} for z in zs]

    def pk(kind, z):
        return {"type": kind, "zxid": list(z)}

    follower, leader = txns((1, 1), (1, 2)), txns((1, 1), (2, 1), (2, 2))
    nl = pk("NEWLEADER", (3, 0))
    assert sync_result([pk("DIFF", (0, 0)), pk("PROPOSAL", (2, 1)), nl], follower, leader) == [
        1 << 32 | 1, 1 << 32 | 2, 2 << 32 | 1]
    assert sync_result([pk("TRUNC", (1, 1)), pk("PROPOSAL", (2, 1)), pk("PROPOSAL", (2, 2)), nl], follower,
                       leader) == [1 << 32 | 1, 2 << 32 | 1, 2 << 32 | 2]
    # ZooKeeper's SNAP of the committed state, then the outstanding proposal; the spec's SNAP of the whole history
    zk = sync_result([pk("SNAP", (2, 1)), pk("PROPOSAL", (2, 2)), nl], follower, leader)
    assert zk == sync_result([pk("SNAP", (2, 2)), nl], follower, leader) == [1 << 32 | 1, 2 << 32 | 1, 2 << 32 | 2]
    assert sync_result([pk("SNAP", (2, 1)), nl], follower, leader) != zk  # the proposal left out: not the same
    assert sync_result([pk("TRUNC", (1, 0)), nl], follower, leader) == []
    with pytest.raises(ValueError, match="not a synchronization: PROPOSAL"):
        sync_result([pk("PROPOSAL", (2, 1)), nl], follower, leader)


def test_early_acks_are_read_as_zookeeper_4685_only_on_the_versions_whose_follower_races() -> None:
    from conformance.zk.versions import SUPPORTED, acks_before_newleader

    racing = [v for v in SUPPORTED if acks_before_newleader(v)]
    assert racing == ["3.8.0", "3.8.3", "3.8.4", "3.9.0", "3.9.1"]  # Learner.syncWithLeader's logRequest loop
    assert not acks_before_newleader("3.8.0-SNAPSHOT")  # not a release number: compared as it is


def test_an_ack_that_overtakes_the_ack_of_newleader_is_decided_as_zookeeper_4685_and_compared_at_uptodate() -> None:
    """`_Replay._expect` on a quorum connection fed as a racing 3.8.0 follower writes it: the ACK of the sync's
    proposal 0x100000001, then the ACK of NEWLEADER. With the follower's history as ``early`` the first is noted
    and handed back for UPTODATE's step; without (a version whose follower does not race), or for a zxid the
    follower does not hold, it is a departure at NEWLEADER; an ACK handed back that the next step does not send
    is one there."""
    from conformance.zk.conform import EARLY_ACK, Outcome, _Departure, _Replay
    from conformance.zk.played import QuorumLink

    def ack(z: int) -> bytes:
        return zkwire.encode_quorum_packet(zkwire.RawPacket(3, z, None))

    def replay(*zxids: int) -> tuple[_Replay, QuorumLink]:
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(ack(z) for z in zxids))
        r = object.__new__(_Replay)
        r.outcome, r.version = Outcome("t", 4), "3.8.0"
        return r, QuorumLink(reader, None, "test")  # type: ignore[arg-type]

    newleader, uptodate = [{"type": "ACK", "zxid": [1, 0]}], [{"type": "ACK", "zxid": [1, 1]}]

    async def run(early, then=uptodate, zxids=(EPOCH | 1, EPOCH), step="FollowerProcessUPTODATE") -> Outcome:
        r, link = replay(*zxids)
        await r._expect(newleader, "FollowerProcessNEWLEADER", link, early=early)
        await r._expect(then, step, link)
        return r.outcome

    o = asyncio.run(run({EPOCH | 1}))
    assert o.decided == [f"FollowerProcessNEWLEADER: ACK 0x100000001 before the ACK of NEWLEADER 0x100000000 "
                         f"({EARLY_ACK}, 3.8.0)"]
    for early in (frozenset(), {EPOCH | 2}):
        with pytest.raises(_Departure, match="the spec sends ACK zxid \\[1, 0\\]; ZooKeeper sent ACK 0x100000001"):
            asyncio.run(run(early))
    with pytest.raises(_Departure, match="the spec sends ACK zxid \\[1, 2\\]; ZooKeeper sent ACK 0x100000001"):
        asyncio.run(run({EPOCH | 1}, then=[{"type": "ACK", "zxid": [1, 2]}], step="FollowerProcessPROPOSAL"))
    o = asyncio.run(run({EPOCH | 1}, zxids=(EPOCH, EPOCH | 1)))  # the order the spec sends: nothing to decide
    assert o.decided == []


def test_a_trace_in_which_no_server_follows_stops_before_any_server_runs(tmp_path) -> None:
    from conformance.graph.traces import read_trace
    from conformance.zk.conform import replay_trace, sut_of

    fle = read_trace(REGRESSION / "fle-split-vote-better-vote-ends-finalize.jsonl.gz")
    assert sut_of(fle) is None
    assert sut_of(read_trace(REGRESSION / "sync-trunc.jsonl.gz")) == 1  # the first that follows (later it leads)
    o = replay_trace(fle, tmp_path / "zk", 10000)
    assert (o.verdict, o.at, o.done) == ("stopped", 1, 0) and "no server follows" in o.why
    assert not (tmp_path / "zk").exists()


def test_a_trace_whose_model_spec_does_not_hold_is_refused_naming_the_trace(tmp_path, zk380) -> None:
    """The driver asks the trace's model whether NEWLEADER may defer (`model_switch`): a model spec/ does not hold
    is a clear error naming the trace, before the server under test is asked anything."""
    from conformance.errors import SpecFormatError
    from conformance.graph.traces import read_trace
    from conformance.zk.conform import _Replay

    trace = read_trace(REGRESSION / "sync-diff.jsonl.gz")
    stray = dataclasses.replace(trace, header=dataclasses.replace(trace.header, config="nope"))
    e = ZkEnsemble(tmp_path / "zk", 10000, 3)
    with pytest.raises(SpecFormatError, match=r"trace \S+ names its model 'nope': no model 'nope'"):
        _Replay(stray, e, 1)
    assert _Replay(trace, e, 1).defers is False  # ci's follower logs everything at NEWLEADER


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_conform_command_replays_traces_against_zookeeper_and_exits_1_on_a_departure(tmp_path, zk380) -> None:
    import json

    from click.testing import CliRunner

    from zabref.cli import main

    runner = CliRunner()
    report = tmp_path / "report"
    ok = runner.invoke(main, ["conform", "--system", "zookeeper", str(REGRESSION / "join-established-leader.jsonl.gz"),
                              "--report", str(report)])
    assert ok.exit_code == 0, ok.output
    assert "traces=1 followed=1 stopped=0 departed=0 steps=15/15" in ok.output
    saved = json.loads((report / "zookeeper.json").read_text())
    assert saved["system"] == "zookeeper@3.8.0" and saved["traces"][0]["verdict"] == "followed"
    # what it reached: every step, the real server's own among them; no manifest names ci's whole graph here
    assert "coverage ci: traces=1 steps=15/15 action_instances=15 " in ok.output, ok.output
    assert saved["coverage"][0]["own_instances"] > 0 and saved["second_run"] == []
    # a departure: the trace's follower accepts epoch 2 at step 4 (written as a changed copy of the file)
    import gzip

    lines = gzip.decompress((REGRESSION / "join-established-leader.jsonl.gz").read_bytes()).decode().splitlines()
    step = json.loads(lines[5])
    assert step["index"] == 4 and step["action"] == "FollowerProcessLEADERINFO"
    step["state"]["acceptedEpoch"][0] = 2
    lines[5] = json.dumps(step)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress("\n".join(lines).encode()))
    departed = runner.invoke(main, ["conform", "--system", "zookeeper", str(bad), "--report", str(report)])
    assert departed.exit_code == 1 and "departed 3/15 steps at step 4" in departed.output, departed.output


def test_the_conform_command_refuses_a_system_it_does_not_know_and_zabref_only_options() -> None:
    from click.testing import CliRunner

    from zabref.cli import main

    trace = str(REGRESSION / "join-established-leader.jsonl.gz")
    bad = CliRunner().invoke(main, ["conform", "--system", "etcd", trace])
    assert bad.exit_code == 2 and "zabref, zookeeper or zookeeper@VERSION" in bad.output
    mixed = CliRunner().invoke(main, ["conform", "--system", "zookeeper", "--bug", "no_trunc", trace])
    assert mixed.exit_code == 2 and "--bug, --minimize and --master are for zabref's servers" in mixed.output
    seats = CliRunner().invoke(main, ["conform", "--every-seat", trace])
    assert seats.exit_code == 2 and "--every-seat is for --system zookeeper" in seats.output
