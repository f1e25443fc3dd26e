"""`zabref edges`: every edge of the tiny model's state graph (in this process) and of the ci model's (on Spark)
taken on the sans-IO core (conformance/replay/edges.py).

The graph comes from `ensure_traces("tiny")` (cached under .cache/traces/; generated with TLC and Spark, about a
minute, on a machine without the cache).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from conformance.graph.cache import ensure_traces
from conformance.graph.traces import read_trace
from conformance.replay import mapping
from conformance.replay.edges import HEADS, EdgeError, check_edge, check_heads
from conformance.replay.edges_graph import check_graph, check_rows
from conformance.replay.edges_report import edges_command, report, shortest_paths
from conformance.replay.inverse import InverseError, World
from conformance.replay.regress import load_graph
from zabref.core.packets import PacketType, QuorumPacket
from zabref.core.types import ZabState
from zabref.core.zab import Output, ZabCore

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny() -> Path:
    return ensure_traces("tiny") / "graph.parquet"


@pytest.fixture(scope="module")
def nodes(tiny: Path) -> dict[int, str]:
    table = pq.read_table(tiny / "nodes", columns=["id", "state_json"]).to_pydict()
    return dict(zip(table["id"], table["state_json"]))


@pytest.fixture(scope="module")
def edges(tiny: Path) -> list[tuple[int, int, str, str, str]]:
    t = pq.read_table(tiny / "edges", columns=["src", "dst", "label", "action", "params_json"]).to_pydict()
    return list(zip(t["src"], t["dst"], t["label"], t["action"], t["params_json"]))


def _rows(edges, nodes, action: str):
    return [(s, d, lab, a, p, nodes[s], nodes[d]) for s, d, lab, a, p in edges if a == action]


# ---- (a) the inverse mapping ------------------------------------------------------------------------------------

def test_every_tiny_state_maps_to_cores_and_back_to_itself(nodes) -> None:
    failures, kinds = [], Counter()
    for node, text in nodes.items():
        state = json.loads(text)
        for row in state["msgs"]:
            for channel in row:
                kinds.update(p["type"] for p in channel)
        names = [k for k in state if k not in mapping.NOT_MAPPED]
        diffs = mapping.differences(state, World.from_spec(state).to_spec(), names)
        if diffs:
            failures.append((node, sorted(diffs)))
    assert len(nodes) > 10_000 and not failures, failures[:5]
    # the graph exercised every packet's data encoding, not just empty channels
    assert {"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "SNAP", "PROPOSAL", "NEWLEADER", "ACK"} <= set(kinds)


def test_the_inverse_refuses_a_variable_no_server_holds_and_not_listed_as_not_mapped(nodes) -> None:
    state = json.loads(next(iter(nodes.values())))
    with pytest.raises(InverseError, match="spec variable.*mystery"):
        World.from_spec({**state, "mystery": [0, 0, 0]})
    assert set(mapping.NOT_MAPPED) <= set(state)  # what the graph has and no server holds is skipped, not refused
    World.from_spec(state)


def test_packets_get_the_data_their_sender_encodes(nodes) -> None:
    state = json.loads(next(t for t in nodes.values() if '"SNAP"' in t and '"FOLLOWERINFO"' not in t))
    world = World.from_spec(state)
    snaps = [p for ch in world.channels.values() for p in ch if p.type == PacketType.SNAP]
    assert snaps and all(p.data for p in snaps)  # a serialized history, decoded by the follower's core as it is sent
    state["msgs"][0][1] = [{"type": "DIFF", "zxid": [0, 0], "data": 7}]
    with pytest.raises(InverseError, match="DIFF packet carries no data"):
        World.from_spec(state)


# ---- (b) every edge of the tiny graph --------------------------------------------------------------------------

def _heads(state_json: str) -> int:
    return sum(1 for row in json.loads(state_json)["msgs"] for channel in row if channel)


def test_every_edge_of_the_tiny_graph_agrees_in_process(tiny, edges, nodes) -> None:
    started = time.monotonic()
    summary = check_graph(tiny)
    wall = time.monotonic() - started
    print(f"tiny in-process: {summary.edges} edges in {wall:.1f}s = {summary.edges / wall:.0f} edges/s")
    assert {a: k for a, k in summary.checked.items() if a != HEADS} == Counter(a for _, _, _, a, _ in edges)
    assert summary.edges == len(edges) > 30_000
    # and every packet at the head of a channel in every state: taken now exactly when the spec takes it
    assert summary.heads == sum(_heads(text) for text in nodes.values()) > 20_000
    assert summary.disagreed == 0, {a: [d.diff for d in ds] for a, ds in summary.shown.items()}


@pytest.mark.deep
def test_every_edge_of_the_two_server_graph_agrees_and_a_quorum_test_wrong_for_even_n_is_caught(monkeypatch) -> None:
    """`two` (spec/MC_two.cfg), the one model with an even N: a quorum test right for every odd N and wrong for even
    ones (2 * |S| >= N, the mutant is_quorum__mutmut_3 of docs/traces.md's mutation score) departs only here."""
    two = ensure_traces("two") / "graph.parquet"
    summary = check_graph(two)
    assert summary.edges > 200 and summary.disagreed == 0, {a: [d.diff for d in ds] for a, ds in summary.shown.items()}
    assert "LeaderProcessACK" in summary.checked  # a commit needs both servers' ACKs
    from zabref.core.state import CoreState

    monkeypatch.setattr(CoreState, "is_quorum",
                        lambda self, m: 2 * len(set(m) & set(self.servers)) >= len(self.servers))
    assert check_graph(two).disagreed > 0


@pytest.mark.slow
@pytest.mark.long
def test_every_edge_of_the_ci_graph_agrees_on_spark_local() -> None:
    """Every ci edge (684,707) and channel head on Spark, as a campaign runs it; the per-action counts are the graph's
    own. The longer command's (scripts/test-long.sh): 311 s beside two other workers on a fresh clone, where the test
    command checks every edge of tiny and two in process."""
    from conformance.graph.spark import session

    ci = ensure_traces("ci") / "graph.parquet"
    session()  # started apart, so the figure below is the job's
    summary = check_graph(ci, spark=True)
    print(f"ci on Spark local: {summary.edges} edges in {summary.seconds:.1f}s = "
          f"{summary.edges / summary.seconds:.0f} edges/s")
    counts = Counter(pq.read_table(ci / "edges", columns=["action"]).column("action").to_pylist())
    assert {a: k for a, k in summary.checked.items() if a != HEADS} == counts and summary.edges > 400_000
    assert summary.heads > 200_000  # every channel head of every state, on Spark too
    assert {"FollowerProcessTRUNC", "FollowerProcessPROPOSALInSync", "FollowerProcessSNAP"} <= set(counts)
    assert summary.disagreed == 0, {a: [d.diff for d in ds] for a, ds in summary.shown.items()}


# ---- (c) seeded bugs are caught --------------------------------------------------------------------------------

def _mutant(monkeypatch, name: str, fn) -> None:
    """ZabCore's handler ``name`` replaced by ``fn`` under the same name (the node reports a handler's spec action
    by its name: zabref.core.zab.SPEC_ACTIONS)."""
    fn.__name__ = name
    monkeypatch.setattr(ZabCore, name, fn)


def _proposal_not_logged(self, j, packet):
    """FollowerProcessPROPOSAL that ACKs without appending the transaction (nor writing it)."""
    self._require(j, packet, ZabState.BROADCAST)
    txn = self._proposal(j, packet, self.history)
    return Output(send=((j, QuorumPacket(PacketType.ACK, txn.zxid)),))


def test_a_follower_that_does_not_log_a_proposal_disagrees_on_exactly_those_edges(tiny, edges, monkeypatch,
                                                                                   tmp_path) -> None:
    _mutant(monkeypatch, "follower_process_proposal", _proposal_not_logged)
    summary = check_graph(tiny, heads=False)
    by_action = Counter(a for _, _, _, a, _ in edges)
    assert summary.checked == by_action
    assert summary.agreed.get("FollowerProcessPROPOSAL", 0) == 0
    assert summary.disagreed == by_action["FollowerProcessPROPOSAL"] > 0  # no other action is blamed
    rep = report(summary, tiny, "in-process")
    first = rep["disagreements"][0]
    assert first["action"] == "FollowerProcessPROPOSAL" and "history" in first["differences"]
    assert "--- spec: history" in first["diff"] and "+++ zabref: history" in first["diff"]
    assert first["command"].endswith(f"--edge={first['src']}:{first['dst']}")

    # the command: the report, the re-check of one edge, and a trace that ends with that edge
    out = tmp_path / "out"
    result = CliRunner().invoke(edges_command, ["--graph", str(tiny), "--in-process", "--out", str(out),
                                                f"--edge={first['src']}:{first['dst']}"])
    assert result.exit_code == 1, result.output
    assert "DISAGREE FollowerProcessPROPOSAL" in result.output and "spec: history" in result.output
    written = json.loads((out / "report.json").read_text())
    assert written["edges"] >= 1 and written["disagreed"] == written["edges"]
    trace = read_trace(Path(written["disagreements"][0]["trace"]))
    graph = load_graph(tiny)
    assert trace.steps[0].node in graph.initial and trace.steps[-1].label == first["label"]
    assert (trace.steps[-2].node, trace.steps[-1].node) == (first["src"], first["dst"])
    for before, step in zip(trace.steps, trace.steps[1:]):  # a path of the graph, step by step
        assert (step.node, step.label) in {(d, lab) for d, lab, _, _ in graph.out[before.node]}
        assert step.state == graph.state(step.node)
    assert len(trace.steps) - 1 == len(shortest_paths(graph, {first["src"]})[first["src"]])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["traces"][0]["steps"] == len(trace.steps) - 1  # the manifest counts the trace's steps


def _ack_quorum_without_the_leader(self, j, packet):
    """LeaderProcessACK that does not count the leader itself in the quorum of ACKs."""
    self._require_leading(j, packet)
    self.ack_index[j] = max(self.ack_index[j], self.index_of(self.history, packet.zxid))
    need = len(self.servers) // 2 + 1
    others = sorted((self.ack_index[f] for f in self.servers if f != self.sid), reverse=True)
    c = others[need - 1] if need <= len(others) else 0
    if c <= self.last_committed:
        return Output()
    delivered = self._deliver(c)
    commit = QuorumPacket(PacketType.COMMIT, self.history[c - 1].zxid)
    return Output(send=tuple((f, commit) for f in self._forwarding()), deliver=delivered)


def test_a_leader_that_counts_a_quorum_of_acks_wrongly_is_caught(edges, nodes, monkeypatch) -> None:
    _mutant(monkeypatch, "leader_process_ack", _ack_quorum_without_the_leader)
    rows = _rows(edges, nodes, "LeaderProcessACK")
    summary = check_rows(rows)
    assert summary.checked["LeaderProcessACK"] == len(rows) > 0
    assert 0 < summary.disagreed < len(rows)  # only where one follower's ACK made the quorum
    found = summary.shown["LeaderProcessACK"][0]
    assert {"lastCommitted", "msgs", "deliver"} <= set(found.differences)  # no COMMIT, nothing delivered
    assert "spec: lastCommitted" in found.diff


def test_a_leader_that_counts_a_learner_in_discovery_as_keeping_it_alive_wrongly_is_caught(edges, nodes,
                                                                                          monkeypatch) -> None:
    """`counted` decides whether a leader's timeout is a fault (the runtime's timeout decision); the spec's
    LeaderTimeout says so in `faults`. Seeded: a learner whose ACKEPOCH(-1) is held counts in DISCOVERY."""
    rows = _rows(edges, nodes, "LeaderTimeout")
    assert check_rows(rows).disagreed == 0
    monkeypatch.setattr(ZabCore, "counted", lambda self, f, head=None: self.learner_phase.get(f) is not None
                        and self.learner_phase[f].name != "NONE")
    summary = check_rows(rows)
    assert 0 < summary.disagreed < summary.edges == len(rows)  # only where a held or late learner decides it
    assert set(summary.shown["LeaderTimeout"][0].differences) == {"faults (Counted)"}


def test_a_proposal_logged_in_memory_but_not_on_disk_is_caught_on_the_durable_variables(edges, nodes,
                                                                                        monkeypatch) -> None:
    original = ZabCore.follower_process_proposal

    def not_persisted(self, j, packet):
        out = original(self, j, packet)
        return Output(send=out.send)  # the history grew, the AppendTxns is dropped

    _mutant(monkeypatch, "follower_process_proposal", not_persisted)
    summary = check_rows(_rows(edges, nodes, "FollowerProcessPROPOSAL"))
    assert summary.disagreed == summary.edges > 0
    assert set(summary.shown["FollowerProcessPROPOSAL"][0].differences) == {"history (durable)"}


def test_a_packet_the_core_refuses_where_the_spec_takes_it_is_a_disagreement(edges, nodes) -> None:
    src, dst, _, action, params = next(e for e in edges if e[3] == "FollowerProcessCOMMIT")
    before, after = json.loads(nodes[src]), json.loads(nodes[dst])
    assert check_edge(before, action, json.loads(params), after) == {}
    i, j = json.loads(params)["i"], json.loads(params)["j"]
    before["msgs"][j - 1][i - 1][0]["zxid"] = [9, 9]  # a COMMIT of a zxid the follower does not hold
    diffs = check_edge(before, action, json.loads(params), after)
    assert list(diffs) == ["error"] and "RemoteProtocolError" in diffs["error"][1]


@pytest.mark.deep
@pytest.mark.parametrize("bug", ["minus_one_ack_counts", "followerinfo_not_held"])
def test_a_core_that_takes_a_packet_the_spec_leaves_waiting_disagrees_at_that_head(tiny, nodes, monkeypatch,
                                                                                   tmp_path, bug) -> None:
    """The edge check hands the core only packets the spec takes; these two bugs are in what the core takes when
    the spec does not. minus_one_ack_counts: a leader in DISCOVERY takes an ACKEPOCH(-1) (the old departure 1,
    spec/README.md), so one learner's two answers can establish two leaders of an epoch; followerinfo_not_held: a
    server that does not lead refuses a FOLLOWERINFO, closing the connection, where the spec keeps it waiting until
    the server leads. Every edge that takes a packet still agrees; the channel heads disagree, each with a state to
    replay (and minus_one_ack_counts also counts that learner as keeping its leader alive: LeaderTimeout's
    `faults (Counted)` disagrees too)."""
    if bug == "minus_one_ack_counts":
        monkeypatch.setattr(ZabCore, "acks_again", lambda self, j, packet: False)
        packet, got = "ACKEPOCH", "taken now, by leader_process_ackepoch"
    else:
        monkeypatch.setattr(ZabCore, "held", lambda self, j, packet: ZabCore.acks_again(self, j, packet))
        packet, got = "FOLLOWERINFO", "refused (the connection closes)"
    summary = check_graph(tiny, show=10_000)
    wrong = summary.shown.get(HEADS, [])
    timeouts = summary.shown.get("LeaderTimeout", [])
    assert summary.disagreed == len(wrong) + len(timeouts) and wrong and set(summary.shown) <= {HEADS, "LeaderTimeout"}
    assert all(set(d.differences) == {"faults (Counted)"} for d in timeouts)
    assert bool(timeouts) == (bug == "minus_one_ack_counts")
    for d in wrong:
        (where, (want, actual)), = d.differences.items()
        assert where.startswith(f"{packet} at the head") and want.startswith("held") and actual.startswith(got)
    state = json.loads(nodes[wrong[0].src])
    assert check_heads(state, []) and wrong[0].src == wrong[0].dst
    out = tmp_path / "out"
    result = CliRunner().invoke(edges_command, ["--graph", str(tiny), "--in-process", f"--edge={wrong[0].src}:"
                                                f"{wrong[0].src}", "--out", str(out)])
    assert result.exit_code == 1 and f"DISAGREE {HEADS}" in result.output, result.output
    rep = json.loads((out / "report.json").read_text())
    trace = read_trace(Path(rep["disagreements"][0]["trace"]))
    assert trace.steps[-1].node == wrong[0].src  # the shortest path to the state, for zabref conform


# ---- (d) bad input -----------------------------------------------------------------------------------------------

def test_a_missing_graph_folder_is_bad_input_naming_it(tmp_path) -> None:
    missing = tmp_path / "nowhere" / "graph.parquet"
    result = CliRunner().invoke(edges_command, ["--graph", str(missing), "--in-process", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3
    assert str(missing) in result.output and "no nodes/ and no edges/" in result.output


def _write_graph(folder: Path, nodes: dict[int, str], rows: list[tuple[int, int, str, str, str]]) -> Path:
    (folder / "nodes").mkdir(parents=True)
    (folder / "edges").mkdir()
    pq.write_table(pa.table({"id": list(nodes), "state_json": list(nodes.values()),
                             "initial": [k == 0 for k in range(len(nodes))]}), folder / "nodes" / "part-0.parquet")
    cols = list(zip(*rows))
    pq.write_table(pa.table({"src": list(cols[0]), "dst": list(cols[1]), "label": list(cols[2]),
                             "action": list(cols[3]), "params_json": list(cols[4])}), folder / "edges" / "p.parquet")
    return folder


def test_an_edge_whose_action_is_unknown_is_bad_input_naming_the_graph_and_edge(tmp_path, edges, nodes) -> None:
    src, dst, *_ = edges[0]
    graph = _write_graph(tmp_path / "g.parquet", {src: nodes[src], dst: nodes[dst]},
                         [(src, dst, "Teleport__1", "Teleport", '{"i": 1}')])
    result = CliRunner().invoke(edges_command, ["--graph", str(graph), "--in-process", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3
    assert str(graph) in result.output and f"edge {src}:{dst}" in result.output
    assert "unknown action 'Teleport'" in result.output
    with pytest.raises(EdgeError, match="parameter 'j' must be a server in 1..3"):
        check_edge(json.loads(nodes[src]), "BecomeFollower", {"i": 1, "j": 7}, json.loads(nodes[dst]))


def test_unreadable_parquet_and_conflicting_options_are_refused(tmp_path) -> None:
    graph = tmp_path / "bad.parquet"
    for part in ("nodes", "edges"):
        (graph / part).mkdir(parents=True)
        (graph / part / "part-0.parquet").write_bytes(b"not parquet")
    result = CliRunner().invoke(edges_command, ["--graph", str(graph), "--in-process", "--out", str(tmp_path / "o")])
    assert result.exit_code == 3 and str(graph) in result.output and "not a readable graph" in result.output
    result = CliRunner().invoke(edges_command, ["--graph", str(graph), "--config", "tiny"])
    assert result.exit_code == 2 and "exactly one of --graph" in result.output


def test_the_command_checks_a_prefix_and_reports_per_action(tiny, tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(edges_command, ["--graph", str(tiny), "--in-process", "--limit", "400",
                                                "--out", str(out)])
    assert result.exit_code == 0, result.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["edges"] == 400 == sum(row["checked"] for row in rep["actions"].values())
    assert rep["disagreed"] == 0 and rep["disagreements"] == []
    assert "edges: checked=400 heads=0 agreed=400 disagreed=0" in result.output  # --limit: edges only
    result = CliRunner().invoke(edges_command, ["--graph", str(tiny), "--in-process", "--edge=-1:-2",
                                                "--out", str(out)])
    assert result.exit_code == 3 and "no edge -1:-2" in result.output


def test_the_command_is_registered_as_a_zabref_plugin(monkeypatch) -> None:
    import tomllib
    from importlib.metadata import EntryPoint

    from zabref import cli

    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["zabref.commands"]
    assert entry["edges"] == "conformance.replay.edges_report:edges_command"
    # as `zabref` loads it once the package is installed again
    eps = {**cli.plugin_entry_points(), "edges": EntryPoint("edges", entry["edges"], cli.PLUGIN_GROUP)}
    monkeypatch.setattr(cli, "plugin_entry_points", lambda: eps)
    result = CliRunner().invoke(cli.main, ["edges", "--help"])
    assert result.exit_code == 0 and "--graph" in result.output and "--edge SRC:DST" in result.output


def test_a_malformed_state_row_of_the_heads_check_is_bad_input_naming_the_state(nodes) -> None:
    from conformance.replay.edges_graph import check_head_rows

    with pytest.raises(EdgeError, match=r"g\.parquet: state 7: .*"):
        check_head_rows([(7, "{not json", None)], where="g.parquet")
    text = next(iter(nodes.values()))
    with pytest.raises(EdgeError, match=r"state 8: .*'j'"):
        check_head_rows([(8, text, '[["FollowerProcessDIFF", "{\\"i\\": 1}"]]')], where="g.parquet")
