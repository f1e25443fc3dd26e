"""Bad input on every port of a live 3-server cluster (`conformance.fuzz`): no crash, no hang, bounded memory, every bad
connection closed with a logged reason, and the cluster keeps committing.

Short mode by default (`SHORT_INPUTS`); ``ZABREF_FUZZ_INPUTS=100000`` runs the long mode (docs/fuzzing.md records
one). tests/test_runtime.py holds the fixed garbage table against a lone server; this file throws generated inputs
at a working cluster, throws the kinds that found bugs (`FOUND_BUGS`, docs/fuzzing.md) in a run of their own, and
holds a regression test for each server crash those bugs caused. A kind with a new open issue gets a
``known_issue`` text in `conformance.fuzz.inputs` and a strict-xfail test here until it is fixed.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import helpers
import pytest

from conformance.fuzz import KINDS, RUNNING, Fuzzer, fuzz_cluster
from conformance.fuzz.frames import hello
from zabref.client import ZabClient
from zabref.core import payloads
from zabref.core.packets import PROTOCOL_VERSION, PacketType, QuorumPacket
from zabref.net import wire, zkwire
from zabref.runtime.cluster import LocalCluster

pytestmark = pytest.mark.slow

SHORT_INPUTS = 1500
#: Most a server's VmRSS may grow over a run: inputs are at most ~1 MiB each and at most WORKERS + MAX_SILENT of
#: them are open at once; the rest is the client writer's history (small values).
RSS_GROWTH_KIB = 64 * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    path = fuzz_cluster(tmp_path_factory.mktemp("fuzz"))
    c = LocalCluster(path)
    try:
        for sid in RUNNING:
            c[sid].start()
        for sid in RUNNING:
            c[sid].wait_ready()
        with ZabClient(c.client_addresses(), attempts=60) as client:
            client.submit("before-fuzz")
        helpers.wait_for("every participant in BROADCAST", lambda: all(
            _state(c, sid)["variables"]["zab_state"] == "BROADCAST" for sid in RUNNING), 30)
        yield c
    finally:
        c.stop()


def _state(cluster: LocalCluster, sid: int) -> dict:
    with cluster[sid].control() as c:
        return c.request("state")


def test_generated_bad_input_on_every_port_leaves_the_cluster_committing(cluster) -> None:
    inputs = int(os.environ.get("ZABREF_FUZZ_INPUTS", SHORT_INPUTS))
    report = Fuzzer(cluster, inputs=inputs, seed=int(os.environ.get("ZABREF_FUZZ_SEED", 0))).run()
    print("\n" + report.summary())
    assert report.problems == []
    assert report.after_zxid is not None
    assert report.writes_ok > 0
    thrown = {kind for kind, n in report.by_kind.items() if n}
    expected = {name for name, k in KINDS.items() if not k.known_issue and k.weight >= 2}
    assert expected <= thrown, f"never thrown: {sorted(expected - thrown)}"
    for sid, before in report.rss_before.items():
        assert report.rss_peak[sid] - before <= RSS_GROWTH_KIB, f"server {sid}: VmRSS {before} -> {report.rss_peak}"



@pytest.mark.parametrize("packet", [
    QuorumPacket(PacketType.LEADERINFO, 1 << 40, payloads.encode_leaderinfo_data(PROTOCOL_VERSION)),
    QuorumPacket(PacketType.COMMIT, (1 << 40) + 1),
], ids=["LEADERINFO", "COMMIT-before-PROPOSAL"])
def test_a_learner_connection_to_a_follower_waits_and_reaches_nothing(cluster, packet) -> None:
    """Seed 000: a follower takes the synchronization and broadcast packets from its leader only. On the wire that
    is structural: every inbound quorum connection opens with a learner's FOLLOWERINFO (ZooKeeper's), which waits at
    a server that does not lead (`ZabCore.held`), and so does whatever follows it; nothing reaches the follower's
    core, it keeps following its leader, and the waiting packets go with the connection."""
    states = {sid: _state(cluster, sid)["variables"] for sid in RUNNING}
    leader = next(s for s, v in states.items() if v["state"] == "LEADING")
    follower, other = sorted(s for s in states if s != leader)
    me = cluster[follower].me
    log = me.data_dir / "server.log"
    seen = len(log.read_text())

    def held() -> dict | None:
        return next((c for c in _state(cluster, follower)["connections"] if c["cid"] == 4242), None)

    with socket.create_connection((me.host, me.quorum_port), timeout=10) as sock:
        sock.sendall(hello(other, cid=4242) + wire.encode_quorum_packet(packet))
        conn = helpers.wait_for("both packets to arrive", lambda: (c := held()) and c["received"] == 2 and c, 10)
        assert (conn["peer"], conn["state"], conn["initiated"]) == (other, "open", False)
        after = _state(cluster, follower)["variables"]
        assert (after["state"], after["leader"], after["zab_state"]) == ("FOLLOWING", leader, "BROADCAST")
    helpers.wait_for("the connection to go", lambda: held() is None, 10)
    assert "not allowed" not in log.read_text()[seen:]
    after = _state(cluster, follower)["variables"]
    assert (after["state"], after["leader"], after["zab_state"]) == ("FOLLOWING", leader, "BROADCAST")


# ------------------------------------------------------------------------------------------------ bugs found

#: The kinds whose inputs servers mishandled until fixed (docs/fuzzing.md, "Issues found"); rare in a weighted run,
#: so thrown here round robin.
FOUND_BUGS = ["quorum-half-frame-learner", "election-negative-votes", "election-last-round", "election-half-frame",
              "control-parser-bombs", "control-half-line"]


@pytest.fixture(scope="module")
def found_bugs_run(cluster):
    """Every kind in FOUND_BUGS, a few inputs each, in one run (their waits overlap)."""
    return Fuzzer(cluster, inputs=3 * len(FOUND_BUGS), seed=1, kinds=FOUND_BUGS).run()


@pytest.mark.parametrize("kind", FOUND_BUGS)
def test_inputs_that_found_bugs_are_handled(found_bugs_run, kind) -> None:
    """Every input of the kind handled as it should be (an inconclusive outcome counts as not handled)."""
    r = found_bugs_run
    handled = r.outcomes[(kind, "answered" if kind == "control-parser-bombs" else "closed")]
    assert r.by_kind[kind] > 0
    assert handled == r.by_kind[kind], [f for f in r.failures if f"({kind} ->" in f]
    assert r.problems == [] or all(f"({kind} ->" not in p for p in r.problems), r.problems


def test_no_kind_has_an_open_issue() -> None:
    """docs/fuzzing.md says none is open: a new one needs its strict-xfail test here and a line there."""
    assert [name for name, k in KINDS.items() if k.known_issue] == []


def test_a_submit_with_a_lone_surrogate_is_refused_and_the_connection_kept(tmp_path: Path) -> None:
    import json

    from zabref.runtime.cluster import cluster_config, find_free_base_port

    c = LocalCluster(cluster_config(tmp_path, 1, find_free_base_port(1)))
    try:
        c[1].start().wait_ready()
        me = c[1].me

        def ask(sock: socket.socket, request: dict) -> dict:
            sock.sendall(wire.frame(json.dumps(request).encode()))
            size = int.from_bytes(_read(sock, 4), "big")
            return json.loads(_read(sock, size))

        with socket.create_connection((me.host, me.client_port), timeout=10) as sock:
            answer = ask(sock, {"op": "submit", "value": "\ud800"})
            assert answer["error"] == '"value" is not valid Unicode text: surrogates not allowed at index 0'
            assert "txns" in ask(sock, {"op": "read", "from_zxid": 0})  # same connection, server untouched
        assert c[1].running
    finally:
        c.stop()


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def test_a_negative_vote_does_not_stop_a_looking_server(tmp_path: Path) -> None:
    """Found by the long run (docs/fuzzing.md): after an election started, wild votes stopped all three servers."""
    from zabref.core.packets import Notification, ServerState
    from zabref.runtime.cluster import cluster_config, find_free_base_port

    c = LocalCluster(cluster_config(tmp_path, 3, find_free_base_port(3)))
    try:
        c[1].start().wait_ready()  # alone: it stays LOOKING in election round 1
        me = c[1].me
        votes = b"".join(wire.frame(wire.encode_notification(Notification(ServerState.LOOKING, 2, 5, r, -1)))
                         for r in (1, 2, 3))
        log = me.data_dir / "server.log"
        with socket.create_connection((me.host, me.election_port), timeout=10) as sock:
            sock.sendall(zkwire.encode_initial(zkwire.Initial(2, zkwire.PROTOCOL_V1, ("127.0.0.1:1",))) + votes)
            assert helpers.closed_by_peer(sock)
        helpers.wait_for("the close line", lambda: "election connection from 2 closed: bad input: notification "
                         "peerEpoch is negative (-1)" in log.read_text(), 10)
        with c[1].control(timeout=5) as ctl:
            assert ctl.request("ping")["sid"] == 1
            assert ctl.request("state")["variables"]["state"] == "LOOKING"
        assert c[1].running
    finally:
        c.stop()


# ------------------------------------------------------------------------------------------------ TLS and quorum auth


def test_a_secured_cluster_takes_every_kind_and_refuses_at_each_gate(tmp_path) -> None:
    """TLS on every port and quorum authentication on: each kind round robin -- the ordinary ones behind a member's
    certificate and the secret's proof, the gate kinds (plain bytes, another CA's certificate, half a TLS hello, a
    wrong or missing proof) at their gate -- with no problem, and the cluster keeps committing."""
    from conformance.fuzz import kind_table
    from conformance.fuzz.command import throwaway_security
    from zabref.config import load_config

    security, stranger = throwaway_security(tmp_path / "security")
    path = fuzz_cluster(tmp_path / "cluster", security=security)
    assert load_config(path).security == security
    table = kind_table(tls=True, auth=True, stranger=True)
    gates = sorted(name for name, k in table.items() if k.gate)
    assert len(gates) == 10
    c = LocalCluster(path)
    try:
        for sid in RUNNING:
            c[sid].start()
        for sid in RUNNING:
            c[sid].wait_ready()
        fuzzer = Fuzzer(c, inputs=3 * len(table), seed=3, kinds=sorted(table), stranger=stranger)
        with ZabClient(c.client_addresses(), attempts=60, tls=fuzzer.member_tls) as client:
            client.submit("before-fuzz")
        report = fuzzer.run()
    finally:
        c.stop()
    print("\n" + report.summary())
    assert report.problems == []
    assert report.after_zxid is not None and report.writes_ok > 0
    for name in gates:  # each thrown 3 times, or more: a kind whose roles no server has then gives way to the first
        # kind for every role in the round robin's order, a gate kind (`conformance.fuzz.harness`)
        assert report.outcomes[(name, "closed")] == report.by_kind[name] >= 3, (name, dict(report.outcomes))
    assert any(port.startswith("quorum") and "TLS handshake failed" in why for port, why in report.reasons)
    assert any("quorum authentication failed" in why for _, why in report.reasons)
