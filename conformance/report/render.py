"""`zabref render`: draw a conformance trace, or a small state graph, as SVG with graphviz.

Theory of operation: a trace is drawn top to bottom, one box per state. The box of step 0 lists every variable;
each later box lists only the variables the step changed, with their new values, so the eye goes to what the
action did. Edges read `Action(param=value, ...)`; `--step K` fills step K's box and thickens the edge into it (the
failure report uses it to point at the first divergence). Values are printed in TLA+ notation
(`values.format_value`), long ones cut at a fixed width; the full state is in each box's tooltip.

`--graph STATES.dot` draws a whole dump the same way (each box shows what changed from the state's shortest-path
parent; the initial states are filled). graphviz needs about 3 s for 1,000 states and minutes for 10,000, so a
graph with more than --max-states states is cut to its first BFS levels that fit, and the title says so.

The picture goes to a temporary name, then is renamed to --out (default: the trace's path with .svg).
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import click

from conformance.errors import ConformanceError, InputError, Location
from conformance.graph.dotparse import Edge, Node, parse_dot_file
from conformance.graph.traces import Trace, read_trace
from conformance.tla.labels import decode_label
from conformance.tla.values import format_value
from zabref.storage.atomic import write_file

__all__ = ["trace_graph", "state_graph", "render_command"]

_WIDTH = 100


def _short(text: str) -> str:
    return text if len(text) <= _WIDTH else text[:_WIDTH - 3] + "..."


def _box(state: dict, before: dict | None) -> str:
    changed = [k for k in sorted(state) if before is None or json.dumps(state[k], sort_keys=True)
               != json.dumps(before.get(k), sort_keys=True)]
    rows = [f"{k} = {_short(format_value(state[k]))}" for k in changed] or ["(no variable changed)"]
    return "\\l".join(rows) + "\\l"


def _call(action: str, params: dict) -> str:
    inner = ", ".join(f"{k}={format_value(v)}" for k, v in sorted(params.items()))
    return f"{action}({inner})"


def _tooltip(state: dict) -> str:
    return "\n".join(f"{k} = {format_value(v)}" for k, v in sorted(state.items()))


def trace_graph(trace: Trace, step: int | None = None, title: str = ""):
    """A graphviz.Digraph of the trace; `step` (0-based index) is highlighted."""
    import graphviz  # noqa: PLC0415 (graphviz loads only when a picture is drawn)

    g = graphviz.Digraph("trace", graph_attr={"rankdir": "TB", "label": title, "labelloc": "t", "fontsize": "12"},
                         node_attr={"shape": "box", "fontname": "monospace", "fontsize": "10"},
                         edge_attr={"fontname": "monospace", "fontsize": "10"})
    before = None
    for s in trace.steps:
        mark = {"style": "filled,bold", "fillcolor": "#ffd7d7", "penwidth": "2.5"} if s.index == step else {}
        g.node(str(s.index), f"step {s.index}: {s.action}\\n{_box(s.state, before)}", tooltip=_tooltip(s.state),
               **mark)
        if s.index > 0:
            g.edge(str(s.index - 1), str(s.index), _call(s.action, s.params),
                   **({"penwidth": "2.5", "color": "#c00000"} if s.index == step else {}))
        before = s.state
    return g


def state_graph(path: str, max_states: int):
    """A graphviz.Digraph of a whole DOT dump (its first BFS levels if it has more than max_states states)."""
    import graphviz  # noqa: PLC0415 (graphviz loads only when a picture is drawn)


    nodes: dict[int, Node] = {}
    out: dict[int, list[Edge]] = {}
    for statement in parse_dot_file(path):
        if isinstance(statement, Node):
            nodes[statement.id] = statement
        elif isinstance(statement, Edge):
            out.setdefault(statement.src, []).append(statement)
    parent: dict[int, int | None] = {n.id: None for n in nodes.values() if n.initial}
    order, queue = [], deque(parent)
    while queue and len(order) < max_states:
        u = queue.popleft()
        order.append(u)
        for e in out.get(u, ()):
            if e.dst not in parent:
                parent[e.dst] = u
                queue.append(e.dst)
    shown = set(order)
    cut = "" if len(shown) == len(nodes) else f" (first {len(shown)} states in BFS order)"
    g = graphviz.Digraph("states", graph_attr={"label": f"{path}: {len(nodes)} states{cut}", "labelloc": "t"},
                         node_attr={"shape": "box", "fontname": "monospace", "fontsize": "9"},
                         edge_attr={"fontname": "monospace", "fontsize": "8"})
    for u in order:
        n = nodes[u]
        p = parent.get(u)
        g.node(str(u), _box(n.state, nodes[p].state if p is not None else None), tooltip=_tooltip(n.state),
               **({"style": "filled", "fillcolor": "#e0e0ff"} if n.initial else {}))
    for u in order:
        for e in out.get(u, ()):
            if e.dst in shown:
                name, args = decode_label(e.action) if e.action and "__" in e.action else (e.action or "?", ())
                label = f"{name}({', '.join(str(sorted(a)) if isinstance(a, frozenset) else str(a) for a in args)})"
                g.edge(str(e.src), str(e.dst), label)
    return g


def write_svg(graph, out: Path) -> None:
    write_file(out, graph.pipe(format="svg"))


@click.command()
@click.argument("trace", required=False, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--step", type=click.IntRange(min=0), default=None, help="Highlight step K (0 = initial state).")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="SVG to write [default: TRACE (or GRAPH) with .svg].")
@click.option("--graph", "graph", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Draw a whole DOT dump instead of a trace.")
@click.option("--max-states", type=click.IntRange(min=1), default=1000, show_default=True,
              help="With --graph: draw at most this many states (the first BFS levels).")
def render_command(trace: Path | None, step: int | None, out: Path | None, graph: str | None,
                   max_states: int) -> None:
    """Draw a conformance trace (or, with --graph, a small state graph) as SVG."""
    if (trace is None) == (graph is None):
        raise click.UsageError("give a TRACE file or --graph STATES.dot (one of the two)")
    try:
        if trace is not None:
            t = read_trace(trace)
            if step is not None and step >= len(t.steps):
                raise InputError(Location(str(trace)), f"--step {step}: the trace has steps 0..{len(t.steps) - 1}")
            title = f"{trace.name}: config {t.header.config}, covers {', '.join(t.header.covers)}"
            picture = trace_graph(t, step, title)
            out = out or trace.with_name(trace.name.removesuffix(".gz").removesuffix(".jsonl") + ".svg")
        else:
            picture = state_graph(graph, max_states)
            out = out or Path(graph).with_suffix(".svg")
        write_svg(picture, out)
    except ConformanceError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from None
    click.echo(f"render: wrote {out}")
