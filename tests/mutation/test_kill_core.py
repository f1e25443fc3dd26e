"""The killer of the core's mutants (scripts/mutation.sh runs mutmut with this test alone; docs/traces.md).

A mutant of zabref/core is killed when the core, mutated, departs from spec/Zab.tla on any of, in this order (the
cheapest first): every edge and every channel head of each small graph in ZABREF_MUTATION_GRAPHS (`zabref edges`'
check, in this process), every step of each trace in the folders ZABREF_MUTATION_TRACES names (action-coverage
traces of models and the committed regression traces), then every edge and head of each large graph. Both are lists
separated by ':' that scripts/mutation.sh prepares (graph.parquet folders; folders of .jsonl.gz traces). It stops at
the first departure (a killed mutant costs a fraction of a survivor's run). Without them (the ordinary test command)
the test is skipped: test_edges.py and test_regress.py check the same on the unmutated core.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conformance.graph.traces import read_trace
from conformance.replay.edges import check_edge
from conformance.replay.edges_graph import check_graph


def _paths(name: str) -> list[Path]:
    return [Path(p) for p in os.environ.get(name, "").split(":") if p]


GRAPHS = _paths("ZABREF_MUTATION_GRAPHS")
TRACES = _paths("ZABREF_MUTATION_TRACES")


#: A graph with more edges than this is checked after the traces (a survivor pays for it; a mutant the traces kill
#: does not).
LARGE = 100_000


def _edges(graph: Path) -> int:
    import pyarrow.parquet as pq  # noqa: PLC0415 (as conformance.replay.edges_graph reads it)

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted((graph / "edges").glob("*.parquet")))


def _check_graph(graph: Path) -> None:
    summary = check_graph(graph, first=True, show=1)
    shown = [d for found in summary.shown.values() for d in found]
    assert not shown, f"{graph}: {shown[0].label} {shown[0].src}:{shown[0].dst}: {shown[0].differences}"


@pytest.mark.skipif(not GRAPHS and not TRACES, reason="run by scripts/mutation.sh (ZABREF_MUTATION_GRAPHS/_TRACES)")
def test_the_core_agrees_with_the_spec_on_every_edge_and_head_and_every_trace_step() -> None:
    sizes = {graph: _edges(graph) for graph in GRAPHS}
    for graph in sorted(GRAPHS, key=sizes.get):
        if sizes[graph] <= LARGE:
            _check_graph(graph)
    for folder in TRACES:
        for path in sorted(folder.glob("*.jsonl.gz")):
            trace = read_trace(path)
            if trace.header.config.startswith("fle"):
                continue  # the election's traces: not this core's
            for before, step in zip(trace.steps, trace.steps[1:]):
                diffs = check_edge(before.state, step.action, step.params, step.state)
                assert not diffs, f"{path.name} step {step.index} ({step.label}): {diffs}"
    for graph in sorted(GRAPHS, key=sizes.get):
        if sizes[graph] > LARGE:
            _check_graph(graph)
