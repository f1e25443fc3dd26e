"""The Spark trace pipeline end to end (conformance/graph/pipeline.py) on TLC's `tiny` graph, and on `ci` (slow).

The tiny graph is dumped once per session by `zabref check`, the pipeline runs once on it with the action criterion
(and once with the edge criterion, capped); every test reads those outputs. The checks are on the outputs only:
the traces against the Parquet edges and nodes, and those against TLC's own BFS levels (the DOT's rank lines).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.errors import ConformanceError, GraphError
from conformance.graph.dotparse import Rank, parse_dot_file
from conformance.graph.traces import read_trace, spec_sha256
from conformance.tla.labels import read_next
from conformance.tla.values import ParseError

SPEC = Path(__file__).resolve().parent.parent / "spec"


from test_spec import TINY_DISTINCT_STATES  # noqa: E402 -- one recorded figure


def dump(config: str, folder: Path) -> Path:
    path = folder / f"{config}.dot"
    subprocess.run([sys.executable, "-m", "zabref.cli", "check", "--config", config, "--spec-dir", str(SPEC),
                    "--dump-dot", str(path), "--out", str(folder / "check")], check=True, capture_output=True)
    return path


@pytest.fixture(scope="session")
def spark():
    from conformance.graph.spark import session

    return session("local[2]")


@pytest.fixture(scope="session")
def tiny_dot(tmp_path_factory) -> Path:
    return dump("tiny", tmp_path_factory.mktemp("tiny"))


def _run(spark, graph: Path, out: Path, **options):
    from conformance.graph.pipeline import run

    lines: list[str] = []
    summary = run(str(graph), out, SPEC, graph.stem, partitions=3, echo=lines.append, **options)
    return summary, lines


@pytest.fixture(scope="session")
def tiny(spark, tiny_dot: Path, tmp_path_factory):
    """(summary, progress lines, trace folder, nodes rows, edges rows) of one action-criterion run."""
    out = tmp_path_factory.mktemp("tiny-traces") / "traces"
    parquet = str(tmp_path_factory.mktemp("tiny-parquet") / "graph.parquet")
    summary, lines = _run(spark, tiny_dot, out, parquet=parquet)
    nodes = spark.read.parquet(f"{parquet}/nodes").collect()
    edges = spark.read.parquet(f"{parquet}/edges").collect()
    return summary, lines, out, nodes, edges


def _traces(folder: Path):
    return [read_trace(p) for p in sorted(folder.glob("*.jsonl.gz"))]


def _steps(trace) -> tuple:
    return tuple((s.node, s.label) for s in trace.steps)


def test_parquet_holds_every_state_and_every_edge_line(tiny, tiny_dot: Path) -> None:
    summary, _, _, nodes, edges = tiny
    text = tiny_dot.read_text().splitlines()
    assert len(nodes) == summary.states == TINY_DISTINCT_STATES
    assert len(edges) == summary.edges == sum(1 for line in text if " -> " in line and line[0] in "-0123456789")
    for e in edges[:200]:  # the line number is the edge's own line in the file
        assert text[e["line"] - 1].startswith(f"{e['src']} -> {e['dst']} [label=\"{e['label']}\"")
    assert len({e["line"] for e in edges}) == len(edges)


def test_edge_parameters_are_recovered_by_name(tiny) -> None:
    *_, edges = tiny
    names = {a.name: a.param_names for a in read_next(SPEC / "Zab.tla")}
    for e in edges:
        params = json.loads(e["params_json"])
        assert e["label"].split("__")[0] == e["action"] and set(params) == set(names[e["action"]])
    follow = next(e for e in edges if e["label"] == "BecomeFollower__1__3")
    assert json.loads(follow["params_json"]) == {"i": 1, "j": 3}


def test_every_action_instance_in_the_graph_is_covered(tiny) -> None:
    summary, _, out, _, edges = tiny
    in_graph = {e["label"] for e in edges}
    covered = {label for t in _traces(out) for label in t.labels}
    assert covered == in_graph
    assert {c for t in _traces(out) for c in t.header.covers} == in_graph
    assert summary.instances_covered == summary.instances_in_graph == len(in_graph)


def test_no_trace_is_a_prefix_of_another(tiny) -> None:
    *_, out, _, _ = tiny
    paths = [_steps(t) for t in _traces(out)]
    for a in paths:
        for b in paths:
            assert a == b or b[:len(a)] != a


def test_steps_follow_edges_of_the_graph_and_carry_its_states(tiny) -> None:
    *_, out, nodes, edges = tiny
    by_edge = {(e["src"], e["dst"], e["label"]): json.loads(e["params_json"]) for e in edges}
    states = {n["id"]: n["state_json"] for n in nodes}
    initial = {n["id"] for n in nodes if n["initial"]}
    for trace in _traces(out):
        assert trace.steps[0].node in initial and trace.steps[0].action == "Init"
        for before, after in zip(trace.steps, trace.steps[1:]):
            assert by_edge[(before.node, after.node, after.label)] == after.params
            assert after.action == after.label.split("__")[0]
        for step in trace.steps:
            assert json.loads(states[step.node]) == step.state


def test_traces_are_shortest_paths_by_tlc_levels(tiny, tiny_dot: Path) -> None:
    """TLC (one worker) explores breadth-first and writes each level as a rank line: the state at step k of a
    trace is at level k, except the last, which is at level k or less."""
    *_, out, _, _ = tiny
    level = {i: r.level for r in parse_dot_file(str(tiny_dot), ranks=True) if isinstance(r, Rank) for i in r.ids}
    for trace in _traces(out):
        *body, last = trace.steps
        assert [level[s.node] for s in body] == list(range(len(body)))
        assert level[last.node] <= last.index


def test_headers_and_manifest(tiny) -> None:
    summary, lines, out, _, _ = tiny
    traces = _traces(out)
    for t in traces:
        assert (t.header.config, t.header.criterion) == ("tiny", "action")
        assert t.header.spec_sha256 == spec_sha256(SPEC, "tiny")
        assert t.header.constants["N"] == 3 and t.header.tlc_version.startswith("TLC2 Version")
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["file"] for e in manifest["traces"]] == sorted(p.name for p in out.glob("*.jsonl.gz"))
    assert sum(e["steps"] for e in manifest["traces"]) == summary.steps == sum(len(t.steps) for t in traces)
    assert manifest["coverage"]["action_instances"] == [summary.instances_covered, summary.instances_in_graph]


def test_progress_lines_and_one_summary_line(tiny) -> None:
    summary, lines, *_ = tiny
    assert [line.split(":")[1].strip() for line in lines[1:-1]] == ["parse", "bfs", "select", "write"]
    assert lines[-1] == summary.line()
    # no sync COMMIT: with one transaction a learner that lacks it gets SNAP (a learner holding it uncommitted gets
    # TRUNC and its PROPOSAL again since 2026-12-01: spec/README.md, departure 18)
    # 19 of Next's 21 actions: LeaderOwnACK needs LeaderLogsLate, off in tiny (auditmap.LATE_ONLY)
    assert f"states={TINY_DISTINCT_STATES}" in lines[-1] and "action_names=19/21" in lines[-1]


def test_edge_criterion_capped_keeps_action_coverage(spark, tiny_dot: Path, tiny, tmp_path: Path) -> None:
    action_summary = tiny[0]
    summary, lines = _run(spark, tiny_dot, tmp_path / "edge", criterion="edge", max_traces=150,
                          parquet=str(tmp_path / "graph.parquet"))
    traces = _traces(tmp_path / "edge")
    assert len(traces) <= 150 and summary.candidates > 150
    assert summary.instances_covered == action_summary.instances_in_graph
    assert summary.edges_covered > action_summary.edges_covered
    paths = {_steps(t) for t in traces}
    assert not any(a != b and b[:len(a)] == a for a in paths for b in paths)
    assert all(t.header.criterion == "edge" for t in traces)


def _broken_copy(tiny_dot: Path, folder: Path, lineno: int, edit) -> Path:
    lines = tiny_dot.read_text().splitlines(keepends=True)
    lines[lineno - 1] = edit(lines[lineno - 1])
    path = folder / "tiny.dot"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("what, lineno, edit, error, where", [
    ("garbled node line", 5000, lambda s: s.replace("/\\\\ msgs = ", "/\\\\ msgs = <<{]"), ParseError, None),
    ("garbled node line in the last partition", 50000,
     lambda s: s.replace("/\\\\ msgs = ", "/\\\\ msgs = <<{]"), ParseError, None),
    ("unknown action", None, lambda s: s.replace('[label="', '[label="NoSuchAction__1'), ParseError, None),
    ("server outside the model", None, lambda s: s.replace('[label="Crash__1"', '[label="Crash__7"'),
     ParseError, None),
    ("truncated file", -1, lambda s: "", ConformanceError, None),
])
def test_malformed_dump_names_the_line_and_writes_nothing(spark, tiny_dot: Path, tmp_path: Path, what, lineno,
                                                         edit, error, where) -> None:
    text = tiny_dot.read_text().splitlines()
    if lineno is None:  # the first edge line the edit changes
        lineno = next(k for k, line in enumerate(text, 1) if edit(line) != line and " -> " in line)
    elif lineno > 0:  # the first line from there on that the edit changes (a node line, deep in the file)
        lineno = next(k for k, line in enumerate(text, 1) if k >= lineno and edit(line) != line)
    elif lineno < 0:
        lineno = len(text) + 1 + lineno
    broken = _broken_copy(tiny_dot, tmp_path, lineno, edit)
    out = tmp_path / "out"
    with pytest.raises(error) as err:
        _run(spark, broken, out, parquet=str(tmp_path / "graph.parquet"))
    message = str(err.value)
    assert message.startswith(f"{broken}:"), message
    if where:
        assert where in message.splitlines()[0]
    elif lineno <= len(text) and what != "truncated file":
        assert f":{lineno}:" in message.splitlines()[0]
    assert not out.exists() and not (tmp_path / "graph.parquet").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.dot"]


def test_an_edge_to_a_state_never_listed_is_an_error(spark, tiny_dot: Path, tmp_path: Path) -> None:
    text = tiny_dot.read_text().splitlines()
    k = next(k for k, line in enumerate(text) if " -> " in line and line[0] in "-0123456789")
    dst = text[k].split(" -> ")[1].split(" ")[0]
    text.insert(k + 1, text[k].replace(f" -> {dst} ", " -> 12345 "))
    broken = tmp_path / "tiny.dot"
    broken.write_text("\n".join(text) + "\n")
    with pytest.raises(GraphError, match=f"^{broken}:{k + 2}: an edge to or from state"):
        _run(spark, broken, tmp_path / "out", parquet=str(tmp_path / "graph.parquet"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.dot"]


@pytest.mark.slow
def test_ci_passes_every_check_and_its_traces_cover_every_action() -> None:
    """`zabref chain`'s generation for ci (cached per spec, shared with the replay tests: the first test to ask pays):
    `zabref check --config ci --dump-dot` passes every invariant and property of MC_ci.cfg (generation stops
    otherwise), every action of Next is taken in the graph but those a switch off in ci enables (LATE_ONLY), and
    the selected traces cover every action instance."""
    from conformance.graph.cache import ensure_traces
    from conformance.report.auditmap import LATE_ONLY

    folder = ensure_traces("ci")
    coverage = json.loads((folder / "manifest.json").read_text())["coverage"]
    assert 10_000 <= coverage["states"] <= 300_000, coverage  # spec/README.md records the figure
    names, instances = coverage["action_names"], coverage["action_instances"]
    total = len(read_next(SPEC / "Zab.tla"))
    assert names == [total - len(LATE_ONLY), total] and instances[0] == instances[1], coverage
    traces = _traces(folder)
    assert len(traces) == coverage["traces"]
    covered = {t.labels[-1].split("__")[0] for t in traces}
    assert {"FollowerProcessTRUNC", "FollowerProcessPROPOSALInSync"} <= covered


def _bfs_rows(result) -> list[tuple]:
    frame, depth, reached = result
    return sorted((r.id, r.depth, r.parent, r.via, r.root, tuple(r.path)) for r in frame.collect()) + [(depth, reached)]


@pytest.mark.deep
def test_the_dump_bfs_tree_equals_the_level_by_level_search(spark, tiny) -> None:
    """The parents read from the dump's first in-edges (a handful of jobs) are exactly the level search's."""
    from conformance.graph.paths import first_edge_tree, level_bfs

    *_, nodes, edges = tiny
    nodes_df = spark.createDataFrame(nodes).select("id", "initial")
    edges_df = spark.createDataFrame(edges).select("src", "dst", "line")
    tree = first_edge_tree(nodes_df, edges_df)
    assert tree is not None
    assert _bfs_rows(tree) == _bfs_rows(level_bfs(nodes_df, edges_df))


def test_first_in_edges_that_are_not_a_bfs_tree_are_refused(spark) -> None:
    """A dump whose first edge into a state is not from the previous level (as with several TLC workers) is not
    taken as a BFS tree; the automatic method falls back to the level search and finds the true depth."""
    from conformance.graph.paths import first_edge_tree, shortest_paths

    nodes = spark.createDataFrame([(0, True), (1, False), (2, False), (3, False)], "id long, initial boolean")
    edges = spark.createDataFrame([(0, 1, 1), (1, 2, 2), (2, 3, 3), (0, 3, 4)], "src long, dst long, line long")
    assert first_edge_tree(nodes, edges) is None
    frame, depth, reached = shortest_paths(nodes, edges, method="auto")
    assert {r.id: r.depth for r in frame.collect()} == {0: 0, 1: 1, 2: 2, 3: 1} and (depth, reached) == (2, 4)


def test_a_sync_models_actions_are_zabs_each_with_syncsdropped_and_zabsyncs_own(tmp_path: Path) -> None:
    """SyncNext's ZabStep (Next /\\ SyncsDropped) is read as Zab.tla's actions, each conjoined with SyncsDropped, so
    that every edge of a ZabSync model names one action; the labeled module says so, and a disjunct of that form
    in a module that extends nothing is an error naming it."""
    from conformance.errors import SpecFormatError
    from conformance.tla.labels import model_next, write_labeled_model

    actions = model_next(SPEC, "ciconfirm")
    zab = [a.name for a in read_next(SPEC / "Zab.tla")]
    assert [a.name for a in actions][:len(zab)] == zab and all(a.with_ == "SyncsDropped" for a in actions[:len(zab)])
    assert [a.name for a in actions][len(zab):] == ["ClientSync", "LeaderProcessREQUEST", "LeaderSendPING",
                                                    "FollowerProcessPING", "LeaderProcessPING", "LeaderSendSYNC",
                                                    "FollowerProcessSYNC"]
    assert not any(a.with_ for a in actions[len(zab):])
    module, cfg = write_labeled_model(SPEC, "ciconfirm", tmp_path)
    text = module.read_text()
    assert "LeaderProcessACK__1__2 == TRUE /\\ (LeaderProcessACK(1, 2) /\\ SyncsDropped)" in text
    assert "ClientSync__3 == TRUE /\\ ClientSync(3)" in text and "NEXT LabeledNext" in cfg.read_text()
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / "Lone.tla").write_text("---- MODULE Lone ----\nStep == Next /\\ Other\nLoneNext ==\n    \\/ Step\n====\n")
    (lone / "MC_lone.tla").write_text("---- MODULE MC_lone ----\nEXTENDS Lone\n====\n")
    (lone / "MC_lone.cfg").write_text("NEXT LoneNext\n")
    with pytest.raises(SpecFormatError, match="Step is a step of Next, but Lone extends none"):
        model_next(lone, "lone")
