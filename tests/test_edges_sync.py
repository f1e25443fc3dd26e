"""`zabref edges` on a model of spec/ZabSync.tla: a client's sync taken on the sans-IO nodes, edge by edge.

The graph is ciconfirm's (spec/MC_ciconfirm.cfg: zabref's sync, with the rule SyncAnsweredAtOnce), which the test
command generates for its traces anyway (`ensure_traces`, cached under .cache/traces/).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.graph.cache import ensure_traces
from conformance.replay import mapping
from conformance.replay.cutheads import Case, judge
from conformance.replay.edges import HEADS, check_edge, take_head
from conformance.replay.edges_graph import (
    _local_head_rows,
    _read_local,
    check_graph,
    check_head_rows,
    check_rows,
    follows,
)
from conformance.replay.edges_report import edges_command
from conformance.replay.inverse import InverseError, World

#: spec/ZabSync.tla's actions that ciconfirm's graph holds (LeaderSendPING: its successors break PingsBounded).
SYNC_ACTIONS = {"ClientSync", "LeaderProcessREQUEST", "FollowerProcessPING", "LeaderProcessPING", "LeaderSendSYNC",
                "FollowerProcessSYNC"}


@pytest.fixture(scope="module")
def graph() -> Path:
    return ensure_traces("ciconfirm") / "graph.parquet"


@pytest.fixture(scope="module")
def local(graph: Path) -> tuple[dict[int, str], dict[str, list]]:
    return _read_local(graph)  # the states by id, and the edges' columns, as `zabref edges --in-process` reads them


@pytest.fixture(scope="module")
def nodes(local) -> dict[int, str]:
    return local[0]


@pytest.fixture(scope="module")
def edges(local) -> dict[str, list]:
    return local[1]


def test_every_sync_state_maps_to_nodes_and_back_to_itself_but_the_ghost(nodes) -> None:
    kinds: Counter = Counter()
    for text in nodes.values():
        state = json.loads(text)
        expected = mapping.checked(state)
        names = [n for n in expected if n not in mapping.NOT_MAPPED]
        assert mapping.differences(expected, World.from_spec(state).to_spec(), names) == {}
        kinds.update(m["type"] for row in state["msgs"] for ch in row for m in ch)
        kinds.update("waiting sync" for syncs in state["pendingSyncs"] for _ in syncs)
    assert {"REQUEST", "PING", "SYNC", "waiting sync"} <= set(kinds)


@pytest.fixture(scope="module")
def summary(graph: Path):
    return check_graph(graph)


def test_every_edge_of_the_sync_graph_agrees_on_the_nodes(summary, edges) -> None:
    assert summary.disagreed == 0, {a: [d.diff for d in ds] for a, ds in summary.shown.items()}
    assert {a: k for a, k in summary.checked.items() if a != HEADS} == Counter(edges["action"])
    assert SYNC_ACTIONS <= set(summary.checked) and summary.edges > 40_000  # 43,948 since 2026-12-01
    # the heads a node takes where no edge does: ciconfirm's CONSTRAINT cut them (below); TLC judged each one, the
    # spec's next-state relation without the cut takes it, and they count as heads checked and agreed
    assert 0 < summary.by_tlc < summary.heads == summary.agreed[HEADS]


def test_tlc_names_a_cut_head_whose_step_the_spec_does_not_take(nodes, edges) -> None:
    """`cutheads.judge` on three heads PingsBounded cut: the spec takes all three; with the state the node made of
    the second changed (its leader forgot the sync it took), that one, and only it, is named; with two changed and
    room for one, the other cases are left unjudged, not agreed."""
    found = check_head_rows(_local_head_rows(nodes, edges, None), show=3, cut=None).shown[HEADS]
    cases = []
    for d in found[:3]:
        state = json.loads(nodes[d.src])
        steps, after = take_head(state, d.params["i"], d.params["j"])
        assert [a for a, _ in steps] == ["LeaderProcessREQUEST"]
        cases.append(Case(state, tuple(steps), after))
    assert len(cases) == 3 and judge(cases, "ciconfirm") == ([], [])

    def forgot(case: Case) -> Case:  # the leader dropped the sync it just took
        return Case(case.state, case.steps, case.after | {"pendingSyncs": [[] for _ in case.after["pendingSyncs"]]})

    cases[1] = forgot(cases[1])
    assert judge(cases, "ciconfirm") == ([1], [])
    cases[0] = forgot(cases[0])
    assert judge(cases, "ciconfirm") == ([0, 1], [])
    found, left = judge(cases, "ciconfirm", most=1)  # one found: the others are left unjudged, never agreed
    assert len(found) == 1 and sorted(found + left) == [0, 1, 2]


def test_the_heads_tlc_judged_are_steps_the_models_constraint_cut(summary, nodes, edges) -> None:
    """Judged as if the graph held every step, the heads disagree only where a leader would take a learner's
    REQUEST and its round of PINGs would leave a learner owing two answers: PingsBounded (a CONSTRAINT of
    ciconfirm) drops that successor, so the graph has no edge for a step the spec takes."""
    judged = check_head_rows(_local_head_rows(nodes, edges, None), show=100_000, cut=None)
    shown = judged.shown[HEADS]
    assert judged.disagreed == len(shown) == summary.by_tlc > 0
    for d in shown:
        (where, (want, got)), = d.differences.items()
        assert where.startswith("REQUEST at the head") and want.startswith("held") and got.startswith("taken")
        world = World.from_spec(json.loads(nodes[d.src]))
        i, j = d.params["i"], d.params["j"]
        world.apply(i, world.nodes[i].packet(j, world.channels[(j, i)].popleft(), World.NOW))
        after = world.to_spec()["msgs"]
        owed = [sum(m["type"] == "PING" for m in after[i - 1][f - 1] + after[f - 1][i - 1]) for f in world.sids]
        assert max(owed) == 2, (d.src, owed)


def test_a_leader_answers_a_sync_in_the_input_that_makes_it_answerable(nodes, edges) -> None:
    """The edges into a state that the rule leaves by LeaderSendSYNC alone are held to the state after it: the
    node sends SYNC in that input. Held to the state itself, every one whose step was the leader's disagrees."""
    after = follows(zip(edges["src"], edges["dst"], edges["action"], edges["params_json"]))
    rows = [(s, d, lab, a, p, nodes[s], nodes[d]) for s, d, lab, a, p in
            zip(edges["src"], edges["dst"], edges["label"], edges["action"], edges["params_json"])
            if d in after and a != "LeaderSendSYNC"]
    assert {a for *_, a, _, _, _ in rows} >= {"LeaderProcessACK", "LeaderProcessPING"}  # a commit, a confirmation
    paired = check_rows([(*r, after[r[1]][0], after[r[1]][1], nodes[after[r[1]][2]]) for r in rows])
    assert paired.disagreed == 0, {a: [d.diff for d in ds] for a, ds in paired.shown.items()}
    alone = check_rows(rows)
    assert alone.disagreed == len(rows) > 0
    found = next(iter(alone.shown.values()))[0]
    assert {"actions", "msgs", "pendingSyncs"} <= set(found.differences)
    assert found.differences["actions"][1][-1] == "LeaderSendSYNC"


def test_a_step_of_another_server_before_the_answer_is_named(nodes, edges) -> None:
    """A LeaderSendSYNC after another server's step cannot be that server's input: the check says so."""
    after = follows(zip(edges["src"], edges["dst"], edges["action"], edges["params_json"]))
    src, dst, _, action, params = next(r for r in zip(edges["src"], edges["dst"], edges["label"], edges["action"],
                                                      edges["params_json"]) if r[1] in after)
    then_action, then_params, then_id = after[dst]
    other = {**json.loads(then_params), "i": 1 + json.loads(then_params)["i"] % 3}
    diffs = check_edge(json.loads(nodes[src]), action, json.loads(params), json.loads(nodes[dst]),
                       (then_action, other, json.loads(nodes[then_id])))
    if json.loads(params)["i"] != other["i"]:
        assert "follows" in diffs


@pytest.mark.deep
@pytest.mark.parametrize("bug, action, what", [
    ("learner_sync_unconfirmed", "LeaderProcessREQUEST", "pendingSyncs"),
    ("follower_sync_at_once", "ClientSync", "answers"),
])
def test_seeded_sync_bugs_are_caught_by_the_edge_check(graph, tmp_path, bug, action, what) -> None:
    """`zabref edges --bug`: the command again with the seeded bug's zabref. A leader that answers a learner's
    sync without its quorum's confirmation sends SYNC in the REQUEST's input; a follower that answers its client
    at once answers before any SYNC came."""
    out = tmp_path / "out"
    result = CliRunner().invoke(edges_command, ["--graph", str(graph), "--in-process", "--out", str(out),
                                                "--bug", bug])
    assert result.exit_code == 1, result.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["bug"] == bug and rep["actions"][action]["disagreed"] > 0
    first = next(d for d in rep["disagreements"] if d["action"] == action)
    assert what in first["differences"] and first["command"].endswith(f"--bug {bug}")
    assert Path(first["trace"]).is_file()  # the path to the edge, for `zabref conform TRACE --bug BUG`


def test_an_unknown_bug_is_refused_naming_it(graph, tmp_path) -> None:
    result = CliRunner().invoke(edges_command, ["--graph", str(graph), "--out", str(tmp_path / "o"),
                                                "--bug", "no_such_bug"])
    assert result.exit_code == 3 and "no_such_bug" in result.output


def test_a_sync_packet_with_a_zxid_is_a_state_the_nodes_cannot_hold(nodes) -> None:
    state = json.loads(next(t for t in nodes.values() if '"REQUEST"' in t))
    for row in state["msgs"]:
        for ch in row:
            for m in ch:
                if m["type"] == "REQUEST":
                    m["zxid"] = [1, 1]
    with pytest.raises(InverseError, match="REQUEST packet carries zxid <<0, 0>>"):
        World.from_spec(state)
