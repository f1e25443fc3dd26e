"""The minimizer finds a shorter trace failing the same way; `zabref conform --master` replays on Spark executors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.graph.cache import ensure_traces
from conformance.graph.traces import read_trace
from conformance.replay.driver import replay_file
from conformance.replay.minimize import graph_for, minimize
from conformance.replay.seeded import load_bug, patched_package

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(1800)


def test_graph_for_prefers_the_option_then_the_parquet_beside_the_manifests_dot(tmp_path: Path) -> None:
    assert graph_for("given.parquet", []) == "given.parquet"
    (tmp_path / "g.parquet").mkdir()
    assert graph_for(None, [{"graph": str(tmp_path / "g.dot")}]) == str(tmp_path / "g.parquet")
    assert graph_for(None, [{"graph": str(tmp_path / "h.dot")}]) == str(tmp_path / "h.dot")
    from conformance.errors import MinimizeError

    with pytest.raises(MinimizeError, match="--graph"):
        graph_for(None, [{}])


def _one(folder: Path, label: str) -> Path:
    """The generated trace whose target is ``label`` (its file name is ``NNNNN-<label>.jsonl.gz``)."""
    found = sorted(folder.glob(f"*-{label}.jsonl.gz"))
    assert len(found) == 1, f"{folder}: {len(found)} traces for {label}"
    return found[0]


def _first(path: Path, action: str) -> int | None:
    return next((s.index for s in read_trace(path).steps if s.action == action), None)


@pytest.mark.deep
@pytest.mark.slow
def test_a_late_failure_is_cut_to_the_shortest_trace_that_fails_the_same_way(tmp_path: Path) -> None:
    bug = load_bug("commit_on_minority")  # departs at the first ClientRequest of a trace
    folder = ensure_traces("ci")
    firsts = {p: _first(p, bug.action) for p in sorted(folder.glob("*.jsonl.gz"))}
    long = max((p for p, k in firsts.items() if k is not None), key=lambda p: firsts[p])
    assert firsts[long] > min(k for k in firsts.values() if k is not None), "no trace reaches its first " \
        f"{bug.action} later than another does: nothing to cut"
    with patched_package(bug) as root:
        original = replay_file(long, bug=bug.name, bug_root=root)
    f = original.failure
    assert f is not None and f.action == bug.action and f.step == firsts[long]
    found = minimize(str(long), json.loads(json.dumps(f.__dict__)), str(folder / "graph.parquet"), bug=bug.name,
                     attempts=5, out_dir=tmp_path)
    assert found is not None and found["minimized_length"] < f.step == found["original_length"]
    short = read_trace(Path(found["path"]))
    assert len(short.steps) - 1 == found["minimized_length"] and short.steps[-1].action == bug.action
    assert found["command"] == f"zabref conform {found['path']} --bug {bug.name}"
    with patched_package(bug) as root:  # the cut trace fails, at its last step, the same way
        again = replay_file(Path(found["path"]), bug=bug.name, bug_root=root)
    assert again.failure is not None and again.failure.signature == f.signature
    assert again.failure.step == found["minimized_length"]


@pytest.mark.slow
def test_conform_on_a_spark_master_replays_each_trace_in_an_executor_task(tmp_path: Path) -> None:
    from conformance.replay.conform import conform

    folder = ensure_traces("ci")
    traces = [str(_one(folder, "Crash__1")), str(_one(folder, "BecomeFollower__1__3")),
              str(REPO / "traces" / "regression" / "fle-split-vote-better-vote-ends-finalize.jsonl.gz")]
    report = tmp_path / "report"
    result = CliRunner().invoke(conform, [*traces, "--master", "local[2]", "--report", str(report)])
    assert result.exit_code == 0, result.output
    data = json.loads((report / "report.json").read_text())
    assert sorted(r["trace"] for r in data["results"]) == sorted(traces)
    assert all(r["passed"] for r in data["results"]) and "traces=3" in result.output and "failed=0" in result.output
