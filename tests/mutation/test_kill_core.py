"""The killer of the core's mutants (scripts/mutation.sh runs mutmut with this test alone; docs/traces.md).

A mutant of zabref/core is killed when the core, mutated, departs from spec/Zab.tla on any of: every edge of the tiny
model's state graph and every channel head of its states (`zabref edges`' check, in this process), then every step
of the ci model's action-coverage traces and of the committed regression traces of Zab.tla models. It stops at the
first departure (a killed mutant costs a fraction of a survivor's run). The graphs and traces are the ones
scripts/mutation.sh prepared: ZABREF_MUTATION_TINY (a graph.parquet folder) and ZABREF_MUTATION_TRACES (folders of
.jsonl.gz traces, separated by ':'). Without them (the ordinary test command) the test is skipped: test_edges.py and
test_regress.py check the same on the unmutated core.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conformance.graph.traces import read_trace
from conformance.replay.edges import check_edge, check_heads
from conformance.replay.edges_graph import _local_head_rows, _read_local

TINY = os.environ.get("ZABREF_MUTATION_TINY")
TRACES = [Path(p) for p in os.environ.get("ZABREF_MUTATION_TRACES", "").split(":") if p]


@pytest.mark.skipif(not TINY, reason="run by scripts/mutation.sh (ZABREF_MUTATION_TINY names the tiny graph)")
def test_the_core_agrees_with_the_spec_on_every_tiny_edge_and_head_and_every_trace_step() -> None:
    text, edges = _read_local(Path(TINY))
    for src, dst, label, action, params in zip(edges["src"], edges["dst"], edges["label"], edges["action"],
                                               edges["params_json"]):
        diffs = check_edge(json.loads(text[src]), action, json.loads(params), json.loads(text[dst]))
        assert not diffs, f"tiny edge {src}:{dst} ({label}): {diffs}"
    for node, state_json, receives_json in _local_head_rows(text, edges, None):
        moves = [(a, json.loads(p)) for a, p in json.loads(receives_json)]
        bad = check_heads(json.loads(state_json), ((a, p["i"], p["j"]) for a, p in moves))
        assert not bad, f"tiny state {node}: channel heads {bad}"
    for folder in TRACES:
        for path in sorted(folder.glob("*.jsonl.gz")):
            trace = read_trace(path)
            if trace.header.config.startswith("fle"):
                continue  # the election's traces: not this core's
            for before, step in zip(trace.steps, trace.steps[1:]):
                diffs = check_edge(before.state, step.action, step.params, step.state)
                assert not diffs, f"{path.name} step {step.index} ({step.label}): {diffs}"
