"""Theory of operation -- the report of `zabref edges` (conformance/replay/edges.py) and the command itself.

`report` turns a `conformance.replay.edges_graph.Summary` into JSON: edges checked, agreed and disagreed, in all and per
action, and for each disagreement kept (the first few per action) the edge, its action and parameters, each differing
variable's expected (spec) and actual (core) value with a unified diff of their pretty JSON, the command that checks
just that edge again, and a trace file. The trace is a shortest path of the graph from an initial state to the
edge's src (breadth-first over the edges, `shortest_paths`), then the edge itself, in the format of
conformance/graph/traces.py (criterion ``edge``): ``zabref conform OUT`` replays it on real servers, to see whether the
servers depart from the spec where the core does. `write` puts report.json, the traces and their manifest.json in
the output folder, whole or not at all (`conformance.graph.traces.OutputDir`).

Channel heads (`conformance.replay.edges.check_heads`) are reported the same way, under the pseudo-action
``ChannelHead`` with the state as both src and dst; their trace is the shortest path to that state.

Exit codes of ``zabref edges``: 0 every edge and channel head agrees; 1 some disagrees; 3 bad input (a graph folder
that is missing or unreadable, an edge this checker cannot take), with an error naming the file.
"""

from __future__ import annotations

import json
import random
import shlex
from collections import deque
from pathlib import Path
from typing import Any

import click

from conformance.errors import ConformanceError
from conformance.graph.cache import ensure_traces
from conformance.graph.traces import (
    MANIFEST,
    OutputDir,
    Step,
    Trace,
    TraceHeader,
    dump_trace,
    spec_sha256,
    write_manifest,
)
from conformance.replay.edges import HEADS, SHOW
from conformance.replay.edges_graph import Summary, check_graph, require_graph
from conformance.replay.regress import load_graph
from conformance.replay.seeded import run_patched

__all__ = ["shortest_paths", "edge_trace", "sample_edge_traces", "report", "write", "edges_command", "recheck_command"]

REPO = Path(__file__).resolve().parents[2]


def shortest_paths(graph: Any, targets: set[int]) -> dict[int, list[tuple[int, str | None, str, str]]]:
    """For each target node: the shortest path from an initial node (regress.Graph; out-edges in label order, so
    the path does not depend on Parquet's row order) as [(node, label, action, params_json)], step 0 "Init"."""
    parent: dict[int, tuple[int, str, str, str] | None] = {}
    queue: deque[int] = deque()
    for root in graph.initial:
        parent[root] = None
        queue.append(root)
    left = set(targets) - set(parent)
    while queue and left:
        node = queue.popleft()
        for dst, label, action, params_json in graph.out.get(node, ()):
            if dst not in parent:
                parent[dst] = (node, label, action, params_json)
                left.discard(dst)
                queue.append(dst)
    paths = {}
    for target in targets:
        if target not in parent:
            continue
        path, at = [], target
        while parent[at] is not None:
            prev, label, action, params_json = parent[at]
            path.append((at, label, action, params_json))
            at = prev
        path.append((at, None, "Init", "{}"))
        paths[target] = path[::-1]
    return paths


def edge_trace(g: Any, graph: Path, path: list[tuple[int, str | None, str, str]],
               edge: tuple[int, str, str, str] | None) -> Trace:
    """The trace of `path` (from `shortest_paths`, ending at the edge's source) followed by ``edge`` = (dst, label,
    action, params_json), or by nothing (a channel head's disagreement is about the path's last state): what
    `zabref conform` replays on real servers."""
    path = [*path, edge] if edge is not None else path
    n = len(g.state(path[0][0])["state"])
    steps = tuple(Step(i, action, json.loads(params), lab, node, g.state(node))
                  for i, (node, lab, action, params) in enumerate(path))
    return Trace(_header(graph, n, steps[-1].label), steps)


def sample_edge_traces(g: Any, graph: Path, k: int, seed: int) -> list[Trace]:
    """``k`` edges of graph ``g`` drawn with ``random.Random(seed)`` (uniformly, without replacement), each as the
    trace of the shortest path to its source and then the edge (the edge criterion's trace for it)."""

    edges = sorted((src, dst, label, action, params) for src, moves in g.out.items()
                   for dst, label, action, params in moves)
    chosen = random.Random(seed).sample(edges, min(k, len(edges)))
    paths = shortest_paths(g, {src for src, *_ in chosen})
    return [edge_trace(g, graph, paths[src], (dst, label, action, params))
            for src, dst, label, action, params in chosen]


def _header(graph: Path, n: int, label: str | None) -> TraceHeader:
    """The traces' header: from the manifest beside the graph (the pipeline's folder), else what the state shows."""
    manifest = Path(graph).parent / MANIFEST
    head: dict[str, Any] = {}
    if manifest.is_file():
        try:
            head = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            head = {}
    config = head.get("config", "unknown")
    known = (REPO / "spec" / f"MC_{config}.cfg").is_file()
    return TraceHeader(head.get("spec_sha256") or (spec_sha256(REPO / "spec", config) if known else "unknown"), config,
                       head.get("constants") or {"N": n}, head.get("tlc_version", "unknown"), "edge",
                       (label,) if label else ())


def recheck_command(graph: Path, src: int, dst: int, bug: str | None = None) -> str:
    """The command that checks the edges src -> dst of `graph` again, alone (with the channel heads of src)."""
    return f"zabref edges --graph {shlex.quote(str(graph))} --edge={src}:{dst}" + (f" --bug {bug}" if bug else "")


def report(summary: Summary, graph: Path, mode: str, bug: str | None = None) -> dict[str, Any]:
    """The JSON report (module docstring); traces are added by `write`. ``bug``: the seeded bug checked."""
    actions = {a: {"checked": k, "agreed": summary.agreed.get(a, 0), "disagreed": k - summary.agreed.get(a, 0)}
               for a, k in sorted(summary.checked.items())}
    shown = [d for a in sorted(summary.shown) for d in summary.shown[a]]
    return {"graph": str(graph), "mode": mode, "bug": bug, "edges": summary.edges, "heads": summary.heads,
            "heads_by_tlc": summary.by_tlc,
            "agreed": summary.edges + summary.heads - summary.disagreed, "disagreed": summary.disagreed,
            "seconds": round(summary.seconds, 3), "cpu_seconds": round(summary.cpu, 3),
            "edges_per_second": round(summary.edges / summary.seconds, 1) if summary.seconds else None,
            "actions": actions,
            "disagreements": [{"src": d.src, "dst": d.dst, "label": d.label, "action": d.action, "params": d.params,
                               "differences": {k: list(v) for k, v in sorted(d.differences.items())},
                               "diff": d.diff, "command": recheck_command(graph, d.src, d.dst, bug), "trace": None}
                              for d in shown]}


def write(out: Path, rep: dict[str, Any], graph: Path) -> None:
    """report.json, one trace per disagreement (path to src, then the edge) and their manifest.json, into `out`."""
    entries, found = [], rep["disagreements"]
    paths: dict[int, list] = {}
    g = None
    if found and "://" not in str(graph):  # the paths are searched here, in the driver: a local graph only

        g = load_graph(graph)
        paths = shortest_paths(g, {d["src"] for d in found})
    with OutputDir(out) as tmp:
        for k, d in enumerate(found):
            path = paths.get(d["src"])
            if path is None or g is None:
                continue
            edge = None if d["action"] == HEADS else (d["dst"], d["label"], d["action"],
                                                      json.dumps(d["params"], sort_keys=True))
            trace = edge_trace(g, graph, path, edge)
            name = f"{k:03d}-{d['label']}.jsonl.gz"
            dump_trace(tmp / name, trace)
            d["trace"] = str(out / name)
            entries.append({"file": name, "steps": len(trace.steps) - 1, "covers": list(trace.header.covers),
                            "last": trace.steps[-1].label})
        (tmp / "report.json").write_text(json.dumps(rep, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        head = _header(graph, 0, "").to_json()
        manifest = {**{k: head[k] for k in ("spec_sha256", "config", "constants", "tlc_version", "criterion")},
                    "format": "zabref-trace-manifest", "version": 1, "graph": str(graph), "traces": entries,
                    "generated_by": "zabref edges"}
        write_manifest(tmp, manifest)


def summary_line(rep: dict[str, Any]) -> str:
    by_tlc = f"heads_by_tlc={rep['heads_by_tlc']} " if rep.get("heads_by_tlc") else ""
    return (f"edges: checked={rep['edges']} heads={rep['heads']} {by_tlc}agreed={rep['agreed']} "
            f"disagreed={rep['disagreed']} "
            f"actions={len(rep['actions'])} mode={rep['mode']} wall={rep['seconds']:.1f}s "
            f"edges/s={rep['edges_per_second'] or 0:.0f} check_cpu={rep['cpu_seconds']:.1f}s")


def _parse_edge(text: str) -> tuple[int, int]:
    try:
        src, dst = text.split(":")
        return int(src), int(dst)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not SRC:DST (two node ids)", param_hint="--edge") from None


@click.command("edges")
@click.option("--graph", type=click.Path(path_type=Path), default=None,
              help="The graph's Parquet folder (`zabref traces --parquet`), holding nodes/ and edges/.")
@click.option("--config", default=None, metavar="NAME",
              help="Instead of --graph: model NAME's cached graph (`zabref chain`'s cache, generated when missing).")
@click.option("--master", default=None, help="Spark master URL [default: local[*]].")
@click.option("--in-process", is_flag=True, help="Check in this process, without Spark (the default for --edge).")
@click.option("--edge", "edge", default=None, metavar="SRC:DST", help="Check only the edges from SRC to DST.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/edges"),
              show_default=True, help="Folder for report.json and a trace per disagreement (replaced whole).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Check only the first N edges.")
@click.option("--show", type=click.IntRange(min=1), default=SHOW, show_default=True,
              help="Disagreements reported per action.")
@click.option("--bug", default=None, help="Check zabref with this seeded bug (conformance/replay/bugs/NAME.toml).")
@click.option("--patched", default=None, hidden=True, help="(The child of --bug: the bug its zabref carries.)")
def edges_command(graph: Path | None, config: str | None, master: str | None, in_process: bool, edge: str | None,
                  out: Path, limit: int | None, show: int, bug: str | None, patched: str | None) -> None:
    """Check every edge of a model's TLC state graph on zabref's sans-IO nodes, and every packet at a channel's head
    in every state: the node takes it now exactly when the spec does (conformance/replay/edges.py)."""
    if (graph is None) == (config is None):
        raise click.UsageError("give exactly one of --graph PATH and --config NAME")
    if bug is not None:  # this command again, in a child whose zabref has the bug (paths made absolute for it)
        argv = ["--graph", str(graph.resolve())] if graph is not None and "://" not in str(graph) else \
            ["--graph", str(graph)] if graph is not None else ["--config", str(config)]
        argv += ["--out", str(out.resolve()), "--show", str(show), "--patched", bug]
        argv += (["--master", master] if master else []) + (["--in-process"] if in_process else [])
        argv += (["--edge", edge] if edge else []) + (["--limit", str(limit)] if limit else [])
        try:
            code = run_patched(bug, "conformance.replay.edges_report", "edges_command", argv)
        except ConformanceError as e:
            click.echo(f"edges: error: {e}", err=True)
            raise SystemExit(3) from None
        raise SystemExit(code)
    only = _parse_edge(edge) if edge is not None else None
    try:
        if config is not None:

            graph = ensure_traces(config) / "graph.parquet"
        assert graph is not None
        if "://" not in str(graph):
            require_graph(graph)
        spark = not in_process and (only is None or master is not None)
        summary = check_graph(graph, master=master, spark=spark, only=only, limit=limit, show=show)
        rep = report(summary, graph, f"spark {master or 'local[*]'}" if spark else "in-process", patched)
        write(out, rep, graph)
    except (ConformanceError, OSError) as e:
        click.echo(f"edges: error: {e}", err=True)
        raise SystemExit(3) from None
    for action, row in rep["actions"].items():
        click.echo(f"edges: {action:32} {row['checked']:8} checked {row['disagreed']:8} disagree")
    for d in rep["disagreements"]:
        params = ", ".join(f"{k}={v}" for k, v in sorted(d["params"].items()))
        where = f"state {d['src']}" if d["action"] == HEADS else f"edge {d['src']}:{d['dst']}"
        click.echo(f"DISAGREE {d['action']}({params}) {where}: {', '.join(d['differences'])}")
        click.echo(d["diff"])
        click.echo(f"  re-check: {d['command']}")
        if d["trace"]:
            bug_option = f" --bug {patched}" if patched else ""
            click.echo(f"  replay on servers: zabref conform {shlex.quote(d['trace'])}{bug_option}")
    if only is not None and rep["edges"] == 0 and rep["heads"] == 0:
        click.echo(f"edges: error: {graph}: no edge {only[0]}:{only[1]}, and no packet at a channel's head in a state "
                   f"{only[0]}", err=True)
        raise SystemExit(3)
    click.echo(f"edges: report {out / 'report.json'}")
    click.echo(summary_line(rep))
    raise SystemExit(1 if rep["disagreed"] else 0)
