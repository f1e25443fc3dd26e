"""`zabref regress`: find, write and check the committed regression traces in traces/regression/.

Theory of operation
-------------------
Each scenario of `conformance.replay.scenarios` is a monitor over steps. `search` walks the product of the model's state
graph (the Parquet that `zabref traces` wrote: ``nodes`` id/state_json/initial, ``edges`` src/dst/label/action/
params_json) and the monitor's memory breadth-first from every initial state, so the first accepting pair it meets
ends a shortest path of the graph that the monitor accepts. States are decoded from JSON once each, on first use.
The graph is read whole into this process with pyarrow: the ``ci`` graph is 115,467 states, well within one
process; a graph too large for that wants a cluster-side search, which this module does not attempt.

`write` turns the witnesses into trace files (criterion ``scenario``, covering the labels of the path) and a
manifest.json that says, for each, its model, why it exists and where the protocol documents state it. Scenarios of
different models (``ci`` for Zab.tla, ``fle_ci`` for FastLeaderElection.tla) share the folder; each searches its own
model's graph. The folder is written
whole or not at all (`conformance.graph.traces.OutputDir`).

`stale` checks the committed set against the current graph: every step must still be an edge of it, between the
very states the trace records (node fingerprints) and with the same state JSON. A spec change that removes a
witness fails there, naming the trace and step; `zabref regress --write` then finds new witnesses for review.
``zabref regress --tlc`` checks each trace with TLC instead (`conformance.replay.tracecheck`): no graph needed, so it
is how the test suite keeps the traces of models too large to build there (ci3) fresh.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from conformance.errors import PipelineError
from conformance.graph.cache import REPO, ensure_traces
from conformance.graph.traces import MANIFEST, OutputDir, Step, Trace, TraceHeader, dump_trace, read_trace
from conformance.replay.scenarios import ACCEPT, SCENARIOS, ZOOKEEPER_SCENARIOS, Scenario
from conformance.replay.tracecheck import check_trace

__all__ = ["Graph", "load_graph", "graphs_of", "search", "write", "stale", "REGRESSION_DIR"]

REGRESSION_DIR = Path(__file__).resolve().parents[2] / "traces" / "regression"
#: The scenario traces of ZooKeeper 3.9.3+'s model (`--write --in-model cizk39 --out traces/zookeeper`), checked by
#: TLC (`--tlc --out traces/zookeeper`): the traces `zabref conform --system zookeeper@3.9.5` replays beside ci's.
ZOOKEEPER_DIR = REGRESSION_DIR.parent / "zookeeper"


@dataclass
class Graph:
    """The state graph in the driver: state JSON by node, out-edges by node, the initial nodes."""

    state_json: dict[int, str]
    out: dict[int, list[tuple[int, str, str, str]]]   # src -> [(dst, label, action, params_json)]
    initial: list[int]
    _decoded: dict[int, dict[str, Any]] = field(default_factory=dict)

    def state(self, node: int) -> dict[str, Any]:
        s = self._decoded.get(node)
        if s is None:
            s = self._decoded[node] = json.loads(self.state_json[node])
        return s

    @classmethod
    def from_rows(cls, nodes: Iterable[tuple[int, str, bool]], edges: Iterable[tuple[int, int, str, str, str]]):
        state_json, initial, out = {}, [], {}
        for node, text, init in nodes:
            state_json[node] = text
            if init:
                initial.append(node)
        for src, dst, label, action, params in edges:
            out.setdefault(src, []).append((dst, label, action, params))
        for moves in out.values():
            moves.sort(key=lambda m: m[1])  # by label: the witness found does not depend on Parquet's row order
        return cls(state_json, out, sorted(initial))


def load_graph(parquet: Path) -> Graph:
    """The graph of a local Parquet folder, read with pyarrow straight into this process (collecting 100 MB of state
    JSON through Spark's block manager lost task results under memory pressure in a long test session)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 (pyarrow loads only when a Parquet graph is read)

    nodes = pq.read_table(Path(parquet) / "nodes", columns=["id", "state_json", "initial"]).to_pydict()
    edges = pq.read_table(Path(parquet) / "edges", columns=["src", "dst", "label", "action", "params_json"]).to_pydict()
    return Graph.from_rows(zip(nodes["id"], nodes["state_json"], nodes["initial"]),
                           zip(edges["src"], edges["dst"], edges["label"], edges["action"], edges["params_json"]))


def search(graph: Graph, scenario: Scenario) -> list[tuple[int, str | None, str, str]] | None:
    """The shortest accepted path as [(node, label, action, params_json)] (step 0: the initial node), or None."""
    parent: dict[tuple[int, Any], tuple[tuple[int, Any], str, str, str] | None] = {}
    queue: deque[tuple[int, Any]] = deque()
    for root in graph.initial:
        key = (root, None)
        if key not in parent:
            parent[key] = None
            queue.append(key)
    while queue:
        here = queue.popleft()
        node, memory = here
        before = graph.state(node)
        for dst, label, action, params_json in graph.out.get(node, ()):
            nxt = scenario.step(memory, before, action, json.loads(params_json), graph.state(dst))
            if nxt is None:
                nxt = memory
            if nxt == ACCEPT:
                path = [(dst, label, action, params_json)]
                at: tuple[int, Any] | None = here
                while at is not None:
                    link = parent[at]
                    if link is None:
                        path.append((at[0], None, "Init", "{}"))
                        break
                    prev, lab, act, par = link
                    path.append((at[0], lab, act, par))
                    at = prev
                return path[::-1]
            key = (dst, nxt)
            if key not in parent:
                parent[key] = (here, label, action, params_json)
                queue.append(key)
    return None


def _trace(graph: Graph, path, header: TraceHeader) -> Trace:
    steps = tuple(Step(k, action, json.loads(params), label, node, graph.state(node))
                  for k, (node, label, action, params) in enumerate(path))
    return Trace(header, steps)


def write(graphs: dict[str, tuple[Graph, dict[str, Any]]], out: Path, scenarios: Iterable[Scenario] = SCENARIOS,
          echo: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Search every scenario in its model's graph (``graphs``: config -> (graph, that config's trace manifest)),
    write its trace and the manifest into `out` (whole or not at all)."""
    entries = []
    with OutputDir(out) as tmp:
        for scenario in scenarios:
            started = time.monotonic()
            graph, source = graphs[scenario.config]
            path = search(graph, scenario)
            if path is None:
                raise PipelineError(f"scenario {scenario.name}: no path of the {scenario.config} graph shows it; "
                                    "change the scenario or the model, never commit a trace without its witness")
            labels = tuple(dict.fromkeys(label for _, label, _, _ in path[1:]))
            header = TraceHeader(source["spec_sha256"], scenario.config, source["constants"], source["tlc_version"],
                                 "scenario", labels)
            name = f"{scenario.name}.jsonl.gz"
            dump_trace(tmp / name, _trace(graph, path, header))
            entries.append({"file": name, "scenario": scenario.name, "config": scenario.config, "seed": scenario.seed,
                            "why": scenario.why, "steps": len(path) - 1, "last": path[-1][1], "covers": list(labels)})
            echo(f"regress: {scenario.name}: {len(path) - 1} steps ({time.monotonic() - started:.1f}s)")
        sources = [graphs[c][1] for c in sorted(graphs)]
        manifest = {"format": "zabref-trace-manifest", "version": 1, "criterion": "scenario",
                    "configs": sorted(graphs), "spec_sha256": sources[0]["spec_sha256"],
                    "tlc_version": sources[0]["tlc_version"], "generated_by": "zabref regress --write",
                    "traces": entries}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def stale(graph: Graph, folder: Path, config: str | None = None) -> list[str]:
    """What in the committed traces (of `config`, default all) is no longer a path of `graph` (empty: all are)."""
    problems = []
    manifest = json.loads((folder / MANIFEST).read_text())
    for entry in manifest["traces"]:
        if config is not None and entry["config"] != config:
            continue
        trace = read_trace(folder / entry["file"])
        first = trace.steps[0]
        if first.node not in graph.initial:
            problems.append(f"{entry['file']}: step 0: node {first.node} is not an initial state of the graph")
            continue
        for prev, step in zip(trace.steps, trace.steps[1:]):
            moves = {(dst, label) for dst, label, _, _ in graph.out.get(prev.node, ())}
            if (step.node, step.label) not in moves:
                problems.append(f"{entry['file']}: step {step.index} ({step.label}): no such edge in the graph")
                break
            if graph.state(step.node) != step.state:
                problems.append(f"{entry['file']}: step {step.index}: the graph's state differs from the trace's")
                break
    return problems


def graphs_of(configs: Iterable[str]) -> dict[str, tuple[Graph, dict[str, Any]]]:
    """Each model's graph (generating its traces and Parquet when not cached) and its trace manifest."""

    out = {}
    for config in configs:
        folder = ensure_traces(config)
        out[config] = (load_graph(folder / "graph.parquet"), json.loads((folder / MANIFEST).read_text()))
    return out


@click.command("regress")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=REGRESSION_DIR, show_default=True)
@click.option("--write", "do_write", is_flag=True, help="Search again and replace the folder (for review).")
@click.option("--tlc", "by_tlc", is_flag=True, help="Check each trace with TLC against the current spec, without "
                                                    "the models' graphs (conformance/replay/tracecheck.py).")
@click.option("--in-model", "in_model", default=None, metavar="NAME",
              help="With --write and an --out of its own: search the scenarios of ci in model NAME instead (cizk: "
                   "ci as ZooKeeper's follower, for `zabref conform --system zookeeper`); not committed.")
def regress_command(out: Path, do_write: bool, by_tlc: bool, in_model: str | None = None) -> None:
    """Check (default) or regenerate (--write) the committed regression traces against their models' graphs."""
    if in_model is not None:
        if not do_write or by_tlc or out.resolve() == REGRESSION_DIR.resolve():
            raise click.UsageError("--in-model writes scenario traces of another model: give --write and an --out "
                                   "that is not the committed folder")
        spec = REPO / "spec"
        if not (spec / f"MC_{in_model}.cfg").is_file() or not (spec / f"MC_{in_model}.tla").is_file():
            known = sorted(p.stem.removeprefix("MC_") for p in spec.glob("MC_*.cfg"))
            raise click.BadParameter(f"no model {in_model!r} in {spec}; the models there: {', '.join(known)}",
                                     param_hint="--in-model")
        scenarios = [dataclasses.replace(s, config=in_model) for s in SCENARIOS if s.config == "ci"]
        own = [s for s in ZOOKEEPER_SCENARIOS if s.config == in_model]
        write(graphs_of([in_model]), out, scenarios + own, echo=click.echo)
        click.echo(f"regress: wrote {len(scenarios)} scenarios of ci, searched in {in_model}'s graph, and "
                   f"{len(own)} of {in_model}'s own, to {out}")
        return
    if by_tlc:
        if do_write:
            raise click.UsageError("--tlc checks the committed traces; --write needs the graphs")
        failed = 0
        for entry in json.loads((out / MANIFEST).read_text())["traces"]:
            result = check_trace(out / entry["file"])
            failed += not result.passed
            click.echo(f"regress: {entry['file']} ({entry['config']}): {result.matched} of {result.steps} steps "
                       + ("taken by the spec" if result.passed else f"STALE\n  {result.failure}"))
        if failed:
            raise click.ClickException(f"{failed} committed trace(s) are no longer behaviours of the spec; "
                                       "`zabref regress --write` finds new witnesses")
        click.echo(f"regress: every trace in {out} is still a behaviour of the spec (checked by TLC)")
        return
    graphs = graphs_of(sorted({s.config for s in SCENARIOS}))
    for config, (graph, _) in graphs.items():
        click.echo(f"regress: {config} graph: {len(graph.state_json)} states, "
                   f"{sum(len(v) for v in graph.out.values())} edges")
    if do_write:
        write(graphs, out, echo=click.echo)
        click.echo(f"regress: wrote {out}")
        return
    problems = [p for config, (graph, _) in graphs.items() for p in stale(graph, out, config)]
    for p in problems:
        click.echo(f"regress: STALE {p}", err=True)
    if problems:
        raise click.ClickException(f"{len(problems)} committed trace(s) no longer follow their model's graph; "
                                   "`zabref regress --write` finds new witnesses")
    click.echo(f"regress: every trace in {out} is still a path of its model's graph")
