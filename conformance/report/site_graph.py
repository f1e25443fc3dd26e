"""The state graph of a small model for the auditor's site: every state at a glance, and the first states in full.

Theory of operation: the graph is TLC's labeled dump of the model (`zabref check --config tiny --dump-dot`, parsed
by conformance/graph/dotparse.py). It is drawn twice, with one colour per action of Next (`action_colours`: a hue per
group of Next -- election, discovery, synchronization, broadcast, failures -- and a shade per action in it):

* the overview: every state a dot, every edge a coloured line, laid out by graphviz's `sfdp` (force-directed). For
  `tiny` (14,600 states) where the `dot` layout takes about
  75 s; the overview shows where each phase's actions sit, not individual states;
* the detail: the first `DETAIL_STATES` states in BFS order from the initial state, each box listing what changed
  from its BFS parent (as `zabref render --graph` draws it), each edge labelled with the action and its parameters.
  That bound keeps it readable; the page says so.

Both SVGs carry their legend, and are cached beside the dump under a name that includes the spec's hash and
`RENDER_VERSION`, so rebuilding the site for an unchanged spec costs nothing. Files are written to a temporary name
and renamed.
"""

from __future__ import annotations

import html
import os
import subprocess
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import ConformanceError
from conformance.graph.cache import zabref_command
from conformance.graph.dotparse import Edge, Node, parse_dot_file
from conformance.report.render import _box, _tooltip
from conformance.tla.labels import decode_label

__all__ = ["DETAIL_STATES", "RENDER_VERSION", "Graph", "read_graph", "action_colours", "overview_svg",
           "detail_svg", "ensure_dump"]

DETAIL_STATES = 60
RENDER_VERSION = "1"

#: Shades per group of Next, in the order the groups come; a shade per action of the group.
_PALETTES = [
    ["#000000", "#7f7f7f", "#b0b0b0"],  # election
    ["#1f4e9c", "#3f8fdf", "#17becf", "#9ecae1"],  # discovery
    ["#1b7a1b", "#62c462", "#6b8e23", "#bcbd22", "#005a32", "#2ca089", "#a1d99b"],  # synchronization
    ["#d62728", "#ff7f0e", "#e377c2", "#8c564b", "#f7b6d2"],  # broadcast
    ["#6a3d9a", "#b39ddb", "#c51b7d", "#d4a6c8"],  # failures
]
_FALLBACK = ["#17becf", "#bcbd22", "#e377c2", "#8c564b", "#7f7f7f", "#ff7f0e", "#2ca02c", "#d62728", "#1f77b4"]


@dataclass(frozen=True)
class Graph:
    nodes: dict[int, Node]
    edges: list[tuple[int, int, str, tuple]]  # src, dst, action name, parameters

    @property
    def initial(self) -> list[int]:
        return [n.id for n in self.nodes.values() if n.initial]


def read_graph(dot: Path) -> Graph:
    nodes: dict[int, Node] = {}
    edges = []
    for s in parse_dot_file(str(dot)):
        if isinstance(s, Node):
            nodes[s.id] = s
        elif isinstance(s, Edge):
            name, args = decode_label(s.action) if s.action and "__" in s.action else (s.action or "?", ())
            edges.append((s.src, s.dst, name, args))
    return Graph(nodes, edges)


def action_colours(groups: list[tuple[str, list[str]]], extra: list[str] = ()) -> dict[str, str]:
    """{action: colour} for the groups of Next [(heading, [actions])], then any `extra` action seen in a graph."""
    colours = {}
    for k, (_, actions) in enumerate(groups):
        palette = _PALETTES[k] if k < len(_PALETTES) else _FALLBACK
        for j, action in enumerate(actions):
            colours[action] = palette[j % len(palette)]
    for j, action in enumerate(a for a in extra if a not in colours):
        colours[action] = _FALLBACK[j % len(_FALLBACK)]
    return colours


def _legend(colours: dict[str, str], counts: dict[str, int]) -> str:
    rows = "".join(
        f'<TR><TD BGCOLOR="{c}" WIDTH="24"> </TD><TD ALIGN="LEFT">{html.escape(a)} ({counts.get(a, 0)})</TD></TR>'
        for a, c in colours.items() if counts.get(a, 0))
    return f'<<TABLE BORDER="0" CELLSPACING="1" CELLPADDING="2"><TR><TD COLSPAN="2"><B>edges by action</B></TD></TR>' \
           f'{rows}</TABLE>>'


def _counts(graph: Graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, _, a, _ in graph.edges:
        counts[a] = counts.get(a, 0) + 1
    return counts


def overview_svg(graph: Graph, colours: dict[str, str], title: str) -> bytes:
    import graphviz  # noqa: PLC0415 (graphviz loads only when a picture is drawn)

    g = graphviz.Digraph("overview", engine="sfdp", graph_attr={
        "outputorder": "edgesfirst", "overlap": "prism", "label": title, "labelloc": "t", "fontsize": "28"},
        node_attr={"shape": "point", "width": "0.03", "color": "#333333"},
        edge_attr={"arrowsize": "0.2", "penwidth": "0.4"})
    for n in graph.nodes.values():
        g.node(str(n.id), **({"color": "#ff0000", "width": "0.25", "tooltip": "initial state"} if n.initial else {}))
    for src, dst, action, _ in graph.edges:
        g.edge(str(src), str(dst), color=colours.get(action, "#000000"))
    g.node("legend", _legend(colours, _counts(graph)), shape="plaintext", fontsize="20")
    return g.pipe(format="svg")


def _bfs(graph: Graph, limit: int) -> tuple[list[int], dict[int, int | None]]:
    out: dict[int, list[tuple[int, int, str, tuple]]] = {}
    for e in graph.edges:
        out.setdefault(e[0], []).append(e)
    parent: dict[int, int | None] = {u: None for u in graph.initial}
    order, queue = [], deque(parent)
    while queue and len(order) < limit:
        u = queue.popleft()
        order.append(u)
        for _, v, _, _ in out.get(u, ()):
            if v not in parent:
                parent[v] = u
                queue.append(v)
    return order, parent


def detail_svg(graph: Graph, colours: dict[str, str], title: str, limit: int = DETAIL_STATES) -> bytes:
    import graphviz  # noqa: PLC0415 (graphviz loads only when a picture is drawn)

    order, parent = _bfs(graph, limit)
    shown = set(order)
    g = graphviz.Digraph("detail", graph_attr={"label": title, "labelloc": "t", "rankdir": "TB"},
                         node_attr={"shape": "box", "fontname": "monospace", "fontsize": "9"},
                         edge_attr={"fontname": "monospace", "fontsize": "8", "penwidth": "1.6"})
    for u in order:
        n = graph.nodes[u]
        p = parent.get(u)
        g.node(str(u), _box(n.state, graph.nodes[p].state if p is not None else None), tooltip=_tooltip(n.state),
               **({"style": "filled", "fillcolor": "#ffe0e0"} if n.initial else {}))
    for src, dst, action, args in graph.edges:
        if src in shown and dst in shown:
            shown_args = ", ".join(str(sorted(a)) if isinstance(a, frozenset) else str(a) for a in args)
            colour = colours.get(action, "#000000")
            g.edge(str(src), str(dst), f"{action}({shown_args})", color=colour, fontcolor=colour)
    counts = _counts(Graph({u: graph.nodes[u] for u in shown},
                           [e for e in graph.edges if e[0] in shown and e[1] in shown]))
    g.node("legend", _legend(colours, counts), shape="plaintext", fontname="sans-serif")
    return g.pipe(format="svg")


def ensure_dump(spec_dir: Path, config: str, cache: Path, key: str, echo=print) -> Path:
    """The labeled DOT dump of `config` for spec hash `key`, from the cache or made now with `zabref check`."""
    target = Path(cache) / f"{config}-{key}.dot"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    args = ["check", "--config", config, "--spec-dir", str(spec_dir), "--dump-dot", str(tmp),
            "--out", str(target.parent / f"check-{config}")]
    echo(f"docs: zabref {' '.join(args)}")
    try:
        code = subprocess.call([*zabref_command(), *args])
        if code != 0 or not tmp.is_file():
            raise ConformanceError(f"'zabref {' '.join(args)}' failed with exit code {code}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
