"""The minimizer finds a shorter trace failing the same way; `zabref conform --master` replays on Spark executors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.chain import ensure_traces
from conformance.minimize import graph_for, minimize
from conformance.replay import replay_file
from conformance.seeded import load_bug, patched_package
from conformance.traces import read_trace

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


@pytest.mark.slow
def test_a_late_failure_is_cut_to_the_shortest_trace_that_fails_the_same_way(tmp_path: Path) -> None:
    folder = ensure_traces("ci")
    long = folder / "00025-FollowerProcessTRUNC__2__3.jsonl.gz"  # TRUNC(2, 3) is last at step 21
    with patched_package(load_bug("no_trunc")) as root:
        original = replay_file(long, bug="no_trunc", bug_root=root)
    f = original.failure
    assert f is not None and f.action == "FollowerProcessTRUNC" and f.step == len(read_trace(long).steps) - 1
    found = minimize(str(long), json.loads(json.dumps(f.__dict__)), str(folder / "graph.parquet"), bug="no_trunc",
                     attempts=5, out_dir=tmp_path)
    assert found is not None and found["minimized_length"] < f.step == found["original_length"]
    short = read_trace(Path(found["path"]))
    assert len(short.steps) - 1 == found["minimized_length"] and short.steps[-1].action == "FollowerProcessTRUNC"
    assert found["command"] == f"zabref conform {found['path']} --bug no_trunc"
    with patched_package(load_bug("no_trunc")) as root:  # the cut trace fails, at its last step, the same way
        again = replay_file(Path(found["path"]), bug="no_trunc", bug_root=root)
    assert again.failure is not None and again.failure.signature == f.signature
    assert again.failure.step == found["minimized_length"]


@pytest.mark.slow
def test_conform_on_a_spark_master_replays_each_trace_in_an_executor_task(tmp_path: Path) -> None:
    from conformance.conform import conform

    folder = ensure_traces("ci")
    traces = [str(folder / "00001-Crash__1.jsonl.gz"), str(folder / "00032-JoinLeader__1__3.jsonl.gz"),
              str(REPO / "traces" / "regression" / "fle-split-vote-better-vote-ends-finalize.jsonl.gz")]
    report = tmp_path / "report"
    result = CliRunner().invoke(conform, [*traces, "--master", "local[2]", "--report", str(report)])
    assert result.exit_code == 0, result.output
    data = json.loads((report / "report.json").read_text())
    assert sorted(r["trace"] for r in data["results"]) == sorted(traces)
    assert all(r["passed"] for r in data["results"]) and "traces=3" in result.output and "failed=0" in result.output
