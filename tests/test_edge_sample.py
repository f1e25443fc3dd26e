"""Beyond the action-coverage traces: a sample of the ci graph's edges, each as the edge criterion's trace (the
shortest path to the edge's source, then the edge), replayed on real servers. The sample is drawn from the commit
being tested, so each commit replays other edges; the seed is printed, and ``ZABREF_SAMPLE_SEED=S`` draws sample S
again."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conformance.graph.cache import ensure_traces
from conformance.graph.traces import dump_trace
from conformance.replay.driver import replay
from conformance.replay.edges_report import sample_edge_traces
from conformance.replay.regress import load_graph

REPO = Path(__file__).resolve().parent.parent
#: Edges replayed per test command (about 25 steps each: some 10 s of replay on two cores).
SAMPLE = 16

pytestmark = pytest.mark.slow


def _seed() -> int:
    if os.environ.get("ZABREF_SAMPLE_SEED"):
        return int(os.environ["ZABREF_SAMPLE_SEED"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return int(head.stdout.strip()[:12], 16) if head.returncode == 0 and head.stdout.strip() else 0


def test_a_sample_of_ci_edges_replays_on_real_servers(tmp_path: Path) -> None:
    seed = _seed()
    print(f"edge sample: seed {seed} (ZABREF_SAMPLE_SEED={seed} draws it again)")
    graph = ensure_traces("ci") / "graph.parquet"
    traces = sample_edge_traces(load_graph(graph), graph, SAMPLE, seed)
    assert len(traces) == SAMPLE and len({t.steps[-1].label for t in traces}) > 1
    failed = []
    for k, trace in enumerate(traces):
        path = tmp_path / f"{k:02d}-{trace.steps[-1].label}.jsonl.gz"
        dump_trace(path, trace)
        result = replay(trace, str(path))
        if not result.passed:
            failed.append(f"{path.name}: {result.error or result.failure}")
    assert failed == [], f"seed {seed}: " + "\n".join(failed)
