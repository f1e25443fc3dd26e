"""The committed regression traces (traces/regression/): found by product search, accepted by their monitors, fresh."""

from __future__ import annotations

import json

import pytest

from conformance.graph.traces import read_trace
from conformance.replay.regress import REGRESSION_DIR, ZOOKEEPER_DIR, Graph, search, stale
from conformance.replay.scenarios import ACCEPT, SCENARIOS, ZOOKEEPER_SCENARIOS, Scenario, by_name

MANIFEST = json.loads((REGRESSION_DIR / "manifest.json").read_text())
ENTRIES = {e["scenario"]: e for e in MANIFEST["traces"]}
#: The models whose graphs the test suite builds (their traces are checked against the graph); the traces of every
#: other model are checked by TLC (zabref regress --tlc), which needs no graph.
GRAPHS_BUILT = ("ci", "fle_ci")


def _graph(edges: list[tuple[int, int, str]], states: dict[int, dict], initial=(0,)) -> Graph:
    return Graph.from_rows(((n, json.dumps(s), n in initial) for n, s in states.items()),
                           ((a, b, label, label.split("__")[0], "{}") for a, b, label in edges))


def _visits_b_then_d(m, before, action, params, after):
    """Accept on reaching d, but only after passing b: a property of the path, not of d."""
    if action == "B":
        return "seen-b"
    return ACCEPT if m == "seen-b" and after["x"] == "d" else None


def test_search_finds_the_shortest_path_the_monitor_accepts_not_the_shortest_path_to_the_state() -> None:
    #  0 -A-> 1 -C-> 3(d)          the shortest path to d skips b
    #  0 -B-> 2 -E-> 4 -F-> 3(d)   the only accepted path passes b
    states = {0: {"x": "a"}, 1: {"x": "c"}, 2: {"x": "b"}, 4: {"x": "e"}, 3: {"x": "d"}}
    g = _graph([(0, 1, "A"), (1, 3, "C"), (0, 2, "B"), (2, 4, "E"), (4, 3, "F")], states)
    path = search(g, Scenario("t", "ci", "-", "-", _visits_b_then_d))
    assert [(node, label) for node, label, _, _ in path] == [(0, None), (2, "B"), (4, "E"), (3, "F")]


def test_search_returns_none_when_no_path_is_accepted() -> None:
    g = _graph([(0, 1, "A"), (1, 3, "C")], {0: {"x": "a"}, 1: {"x": "c"}, 3: {"x": "d"}})
    assert search(g, Scenario("t", "ci", "-", "-", _visits_b_then_d)) is None


def test_every_scenario_has_one_committed_trace_with_its_reason() -> None:
    assert sorted(ENTRIES) == sorted(s.name for s in SCENARIOS)
    files = sorted(p.name for p in REGRESSION_DIR.glob("*.jsonl.gz"))
    assert files == sorted(e["file"] for e in MANIFEST["traces"])
    for s in SCENARIOS:
        assert ENTRIES[s.name]["why"] == s.why and ENTRIES[s.name]["seed"] == s.seed


def _monitor(scenario: Scenario, trace) -> tuple[int | None, object]:
    """Run ``scenario``'s monitor over ``trace``: the index of the step it accepts at (None: it never does) and its
    memory then (or at the end)."""
    memory = None
    for before, step in zip(trace.steps, trace.steps[1:]):
        nxt = scenario.step(memory, before.state, step.action, step.params, step.state)
        if nxt == ACCEPT:
            return step.index, memory
        memory = memory if nxt is None else nxt
    return None, memory


def _accepted_at_its_last_step(scenario: Scenario, trace) -> None:
    at, _ = _monitor(scenario, trace)
    assert at is not None, f"{scenario.name}: its monitor never accepts the committed trace"
    assert at == trace.steps[-1].index, f"accepted early, at step {at}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_committed_trace_is_accepted_by_its_monitor_at_its_last_step_and_not_before(scenario) -> None:
    trace = read_trace(REGRESSION_DIR / ENTRIES[scenario.name]["file"])
    assert trace.header.criterion == "scenario" and len(trace.steps) - 1 == ENTRIES[scenario.name]["steps"]
    _accepted_at_its_last_step(scenario, trace)


def test_the_zookeeper_traces_are_ci_scenarios_and_the_models_own_each_accepted_at_its_last_step() -> None:
    """traces/zookeeper: `zabref regress --write --in-model cizk39` (ci's scenarios searched in ZooKeeper 3.9.3+'s
    model, and that model's own: a NEWLEADER that leaves proposals for UPTODATE, spec/README.md departure 12)."""
    manifest = json.loads((ZOOKEEPER_DIR / "manifest.json").read_text())
    entries = {e["scenario"]: e for e in manifest["traces"]}
    own = [s for s in ZOOKEEPER_SCENARIOS if s.config == "cizk39"]
    assert len(own) == 2 and sorted(entries) == sorted([s.name for s in SCENARIOS if s.config == "ci"]
                                                       + [s.name for s in own])
    assert {e["config"] for e in manifest["traces"]} == {"cizk39"}
    for scenario in own:
        _accepted_at_its_last_step(scenario, read_trace(ZOOKEEPER_DIR / entries[scenario.name]["file"]))
    # what the deferral looks like in the trace: NEWLEADER leaves one staged, a PROPOSAL joins it, UPTODATE logs both
    trace = read_trace(ZOOKEEPER_DIR / "sync-newleader-defers-then-proposal.jsonl.gz")
    staged = [len(s.state["stagedHistory"][s.params["i"] - 1]) for s in trace.steps[1:]
              if s.action in ("FollowerProcessNEWLEADER", "FollowerProcessPROPOSAL", "FollowerProcessUPTODATE")
              and s.params["i"] == trace.steps[-1].params["i"]]
    assert staged[0] >= 1 and staged[-1] == 0 and max(staged) > staged[0]


def test_the_deferral_monitor_refuses_a_newleader_that_logs_everything() -> None:
    """The monitor can fail: sync-diff of the committed ci traces (NEWLEADER logs the proposal) is never accepted."""
    scenario = next(s for s in ZOOKEEPER_SCENARIOS if s.name == "sync-newleader-defers")
    assert _monitor(scenario, read_trace(REGRESSION_DIR / "sync-diff.jsonl.gz")) == (None, None)


@pytest.mark.slow
def test_the_zookeeper_traces_are_behaviours_of_the_current_spec(tmp_path) -> None:
    from conformance.replay.tracecheck import check_trace

    for entry in json.loads((ZOOKEEPER_DIR / "manifest.json").read_text())["traces"]:
        result = check_trace(ZOOKEEPER_DIR / entry["file"], work=tmp_path)
        assert result.passed, f"{entry['file']}: {result.failure}"


def _graph_of(trace) -> Graph:
    steps = trace.steps
    return Graph.from_rows(((s.node, json.dumps(s.state), s.index == 0) for s in steps),
                           ((a.node, b.node, b.label, b.action, json.dumps(b.params)) for a, b in zip(steps, steps[1:])))


def test_stale_names_the_trace_and_step_that_left_the_graph() -> None:
    entry = ENTRIES["sync-trunc"]
    trace = read_trace(REGRESSION_DIR / entry["file"])
    g = _graph_of(trace)
    assert stale(g, REGRESSION_DIR, "ci") != [] and not stale(g, REGRESSION_DIR, "nothing")
    assert not [p for p in stale(g, REGRESSION_DIR) if p.startswith(entry["file"])]
    cut = trace.steps[5]
    g.out[trace.steps[4].node] = [m for m in g.out[trace.steps[4].node] if m[0] != cut.node]
    assert f"{entry['file']}: step 5 ({cut.label}): no such edge in the graph" in stale(g, REGRESSION_DIR)


def test_by_name_names_the_known_scenarios_when_it_fails() -> None:
    assert by_name("sync-snap").name == "sync-snap"
    with pytest.raises(KeyError, match="fig3-committed-survives-leader-crash"):
        by_name("nope")


@pytest.mark.deep
@pytest.mark.slow
def test_the_committed_traces_are_still_paths_of_their_models_current_graphs() -> None:
    from conformance.replay.regress import graphs_of

    graphs = graphs_of(GRAPHS_BUILT)
    assert [p for config, (graph, _) in graphs.items() for p in stale(graph, REGRESSION_DIR, config)] == []


# ---- the TLC check of a trace (zabref regress --tlc), which needs no graph ---------------------------------------

def test_the_tlc_check_takes_a_committed_trace_and_names_the_first_step_the_spec_does_not_take(tmp_path) -> None:
    import dataclasses

    from conformance.graph.traces import dump_trace
    from conformance.replay.tracecheck import check_trace

    path = REGRESSION_DIR / ENTRIES["sync-trunc"]["file"]
    good = check_trace(path, work=tmp_path)
    assert good.passed and good.matched == good.steps == ENTRIES["sync-trunc"]["steps"], good.failure
    trace = read_trace(path)
    k = 10  # step 10 logs a lastCommitted one higher than the spec's step leaves it: a state the spec never reaches
    state = dict(trace.steps[k].state, lastCommitted=[c + 1 for c in trace.steps[k].state["lastCommitted"]])
    bad = trace.steps[:k] + (dataclasses.replace(trace.steps[k], state=state),) + trace.steps[k + 1:]
    dump_trace(tmp_path / "bad.jsonl.gz", dataclasses.replace(trace, steps=bad))
    result = check_trace(tmp_path / "bad.jsonl.gz", work=tmp_path)
    assert not result.passed and result.matched == k - 1
    assert f"step {k} ({trace.steps[k].label}): no step of Zab.tla leads from step {k - 1}'s state" in result.failure


@pytest.mark.slow
def test_the_committed_traces_of_models_the_suite_does_not_build_are_behaviours_of_the_current_spec(tmp_path) -> None:
    from conformance.replay.tracecheck import check_trace

    others = [e for e in MANIFEST["traces"] if e["config"] not in GRAPHS_BUILT]
    assert {e["config"] for e in others} == {"ci3"}
    for entry in others:
        result = check_trace(REGRESSION_DIR / entry["file"], work=tmp_path)
        assert result.passed, result.failure


def test_tlc_and_write_together_are_a_usage_error_that_changes_nothing(tmp_path) -> None:
    from click.testing import CliRunner

    from conformance.replay.regress import regress_command

    out = tmp_path / "regression"
    out.mkdir()
    result = CliRunner().invoke(regress_command, ["--tlc", "--write", "--out", str(out)])
    assert result.exit_code == 2 and "--tlc checks the committed traces; --write needs the graphs" in result.output
    assert list(out.iterdir()) == []


def test_scenarios_in_another_model_are_written_only_to_a_folder_of_their_own(tmp_path) -> None:
    from click.testing import CliRunner

    from conformance.replay.regress import regress_command

    for args in (["--in-model", "cizk"], ["--in-model", "cizk", "--write"],
                 ["--in-model", "cizk", "--write", "--tlc", "--out", str(tmp_path)]):
        result = CliRunner().invoke(regress_command, args)
        assert result.exit_code == 2 and "an --out that is not the committed folder" in result.output, args
    unknown = CliRunner().invoke(regress_command, ["--write", "--in-model", "nope", "--out", str(tmp_path / "x")])
    assert unknown.exit_code == 2 and "no model 'nope'" in unknown.output and "cizk" in unknown.output
    assert not (tmp_path / "x").exists()  # nothing written


@pytest.mark.slow
@pytest.mark.long
def test_the_scenarios_of_ci_searched_in_zookeepers_model_truncate_at_the_trunc(tmp_path) -> None:
    """`zabref regress --write --in-model cizk`: ci's scenarios in the model of ZooKeeper's follower (TruncAtOnce,
    spec/README.md departure 11); in sync-trunc-to-prefix the follower's history is truncated at its TRUNC, where
    the committed ci trace keeps it until NEWLEADER."""
    from click.testing import CliRunner

    from conformance.replay.regress import regress_command

    result = CliRunner().invoke(regress_command, ["--write", "--in-model", "cizk", "--out", str(tmp_path / "zk")])
    assert result.exit_code == 0, result.output
    zk, ci = (read_trace(folder / "sync-trunc-to-prefix.jsonl.gz") for folder in (tmp_path / "zk", REGRESSION_DIR))
    assert zk.header.config == "cizk" and ci.header.config == "ci"

    def at_trunc(trace):
        step = next(s for s in trace.steps if s.action == "FollowerProcessTRUNC")
        i = step.params["i"] - 1
        return step.state["history"][i], step.state["stagedHistory"][i]

    (zk_history, zk_staged), (ci_history, ci_staged) = at_trunc(zk), at_trunc(ci)
    assert zk_history == zk_staged and len(ci_history) > len(ci_staged)
