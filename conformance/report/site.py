"""`zabref docs`: the auditor's site -- spec/Zab.tla beside zabref/, action by action, with the evidence they agree.

Theory of operation: everything on the site is computed when it is built, from the checkout it is built in:

* the map spec <-> code (conformance/report/auditmap.py): actions read from Next, handlers found by name in zabref/, the
  variables each action changes and the conformance mapping's function for each; a stale map is listed as a problem;
* the seed steps: quoted from conformance/report/site_seed_steps.toml (the seeds are not in the repository), each quote
  checked against the seed file when shared/seeds is present (beside the repository, or $ZABREF_SEEDS);
* invariants: the names the models check (spec/MC_ci.cfg), their comments and formulas, the operators they use, and
  the mutation in spec/mutations/ that violates each, with the counterexample length recorded there;
* traces: the generated traces of --config (ci) for this exact spec, from the chain's cache
  (.cache/traces/<config>-<spec hash>/; `--generate-traces` makes them when missing, which takes minutes), and the
  committed regression traces of traces/regression/manifest.json; each linked trace gets a page with its path picture;
* the state graph of --graph-config (tiny), dumped with TLC once per spec hash (.cache/site/) and drawn by
  conformance/report/site_graph.py.

The site is written into a temporary sibling of --out and renamed into place whole. The command prints one summary
line and exits 1 when the map has problems (the site is still written, with the problems on its front page).
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import click

from conformance.errors import ConformanceError
from conformance.graph.cache import REPO, ensure_traces, spec_hash
from conformance.graph.traces import MANIFEST, Trace, read_trace
from conformance.report.auditmap import AuditMap, compute_map
from conformance.report.render import trace_graph
from conformance.report.site_content import pages
from conformance.report.site_graph import (
    RENDER_VERSION,
    action_colours,
    detail_svg,
    ensure_dump,
    overview_svg,
    read_graph,
)
from conformance.report.site_pages import CSS, Page, shown_path, slug, source_page
from conformance.report.specread import Definition, comment_text
from conformance.tla.mutations import Mutation, load_mutations, model_checks
from zabref.storage.atomic import staged_folder, write_file

__all__ = ["SiteData", "TraceInfo", "InvariantInfo", "collect", "build_site", "docs_command", "seeds_dir",
           "load_seed_steps", "SEED_STEPS"]

SEED_STEPS = Path(__file__).with_name("site_seed_steps.toml")


@dataclass
class TraceInfo:
    kind: str  # "generated" or "committed"
    path: Path
    shown: str  # the path as the site prints it (repo-relative when inside the repo)
    trace: Trace
    why: str = ""
    seed: str = ""

    @property
    def actions(self) -> set[str]:
        return {s.action for s in self.trace.steps[1:]}

    @property
    def page(self) -> str:
        stem = self.path.name.removesuffix(".gz").removesuffix(".jsonl")
        return f"traces/{'gen' if self.kind == 'generated' else 'reg'}-{slug(stem)}.html"


@dataclass
class InvariantInfo:
    name: str
    definition: Definition
    english: str
    uses: list[Definition]
    mutation: Mutation | None
    counterexample_states: int | None


@dataclass
class SiteData:
    root: Path
    config: str
    graph_config: str
    amap: AuditMap
    seed_steps: dict[str, list[dict]]
    seeds_checked: Path | None
    invariants: list[InvariantInfo]
    generated: list[TraceInfo] | None  # None: no traces cached for this spec
    generated_dir: Path
    committed: list[TraceInfo]
    committed_note: str
    problems: list[str] = field(default_factory=list)

    def traces_taking(self, action: str, kind: str) -> list[TraceInfo]:
        pool = (self.generated or []) if kind == "generated" else self.committed
        return sorted((t for t in pool if action in t.actions), key=lambda t: (len(t.trace.steps), t.path.name))

    def linked_traces(self) -> list[TraceInfo]:
        """The traces that get a page: every committed one, and the shortest generated one taking each action."""
        chosen = {t.page: t for t in self.committed}
        for a in self.amap.actions:
            gen = self.traces_taking(a.name, "generated")
            if gen:
                chosen.setdefault(gen[0].page, gen[0])
        return list(chosen.values())


def seeds_dir(root: Path) -> Path | None:
    """shared/seeds: $ZABREF_SEEDS, else beside the repository (../shared/seeds), else None."""
    for candidate in (os.environ.get("ZABREF_SEEDS"), root.parent / "shared" / "seeds"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def load_seed_steps(path: Path = SEED_STEPS) -> list[dict]:
    try:
        steps = tomllib.loads(path.read_text(encoding="utf-8"))["step"]
    except (tomllib.TOMLDecodeError, KeyError) as e:
        raise ConformanceError(f"{path}: not a seed-steps file ({type(e).__name__}: {e})") from None
    for k, s in enumerate(steps, 1):
        missing = [f for f in ("action", "seed", "file", "where", "quote") if not isinstance(s.get(f), str)]
        if missing:
            raise ConformanceError(f"{path}: step {k} lacks {', '.join(missing)}")
    return steps


def quote_found(quote: str, seed_text: str) -> bool:
    """Whether the quote occurs in the seed, whitespace runs counting as one space."""
    return " ".join(quote.split()) in " ".join(seed_text.split())


def model_invariants(cfg: Path) -> list[str]:
    """The invariants and then the action properties the model's cfg checks (each has a page and a mutation)."""
    invariants, properties = model_checks(cfg.read_text(encoding="utf-8"))
    return invariants + properties


def _uses(name: str, amap: AuditMap) -> list[Definition]:
    """The spec operators an invariant's formula refers to, transitively (not actions, not itself)."""

    actions = {a.name for a in amap.actions}
    seen, order, queue = {name}, [], [name]
    while queue:
        text = amap.definitions[queue.pop(0)].text.split("==", 1)[1]
        for ident in re.findall(r"[A-Za-z_]\w*", text):
            if ident in amap.definitions and ident not in seen and ident not in actions:
                seen.add(ident)
                order.append(ident)
                queue.append(ident)
    return [amap.definitions[n] for n in order]


def _read_traces(folder: Path, kind: str, root: Path) -> list[TraceInfo]:

    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    return [TraceInfo(kind, folder / t["file"], shown_path(folder / t["file"], root), read_trace(folder / t["file"]))
            for t in manifest["traces"]]


def _committed(root: Path, folder: Path, problems: list[str]) -> tuple[list[TraceInfo], str]:
    """The committed regression traces: `folder`/manifest.json (traces/regression/, written by `zabref regress`)."""

    manifest = folder / MANIFEST
    shown = shown_path(manifest, root)
    if not manifest.is_file():
        return [], f"{shown} does not exist: there are no committed regression traces."
    try:
        entries = json.loads(manifest.read_text(encoding="utf-8"))["traces"]
    except (ValueError, KeyError, TypeError) as e:
        problems.append(f"{shown}: not a trace manifest: {e}")
        return [], f"{shown} could not be read."
    out = []
    for k, entry in enumerate(entries, 1):
        name = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not (folder / name).is_file():
            problems.append(f"{shown}: trace {k}: file {name!r} is not in {shown_path(folder, root)}")
            continue
        path = folder / name
        out.append(TraceInfo("committed", path, shown_path(path, root), read_trace(path), str(entry.get("why", "")),
                             str(entry.get("seed", ""))))
    return out, f"{len(out)} committed regression traces, listed in {shown} (`zabref regress` checks them)."


def collect(root: Path = REPO, config: str = "ci", graph_config: str = "tiny", traces_dir: Path | None = None,
            generate_traces: bool = False, committed_dir: Path | None = None, echo=click.echo) -> SiteData:
    """Everything the site shows, computed from the checkout at `root`."""
    root = Path(root)
    spec_dir = root / "spec"
    amap = compute_map(root)
    problems = list(amap.problems)

    steps: dict[str, list[dict]] = {}
    seeds = seeds_dir(root)
    action_names = [a.name for a in amap.actions]
    for s in load_seed_steps():
        if s["action"] not in action_names:
            problems.append(f"{SEED_STEPS.name}: action {s['action']} is not in Next")
        steps.setdefault(s["action"], []).append(s)
        if seeds is not None:
            seed_file = seeds / s["file"]
            if not seed_file.is_file() or not quote_found(s["quote"], seed_file.read_text(encoding="utf-8")):
                problems.append(f"{SEED_STEPS.name}: the quote for {s['action']} ({s['where']}) is not in {seed_file}")
    problems += [f"spec action {a} has no seed step in {SEED_STEPS.name}" for a in action_names if a not in steps]

    mutations = {}  # per check, the mutation named after it (others catch it too: spec/README.md's matrix)
    for m in load_mutations(spec_dir / "mutations"):
        if m.invariant not in mutations or m.name == m.invariant:
            mutations[m.invariant] = m
    invariants = []
    for name in model_invariants(spec_dir / f"MC_{config}.cfg"):
        if name not in amap.definitions:
            problems.append(f"spec/MC_{config}.cfg checks {name}, which spec/Zab.tla does not define")
            continue
        m = mutations.get(name)
        states = None
        if m is None:
            problems.append(f"invariant {name} has no mutation in spec/mutations/")
        else:
            states = tomllib.loads(m.path.read_text(encoding="utf-8")).get("counterexample_states")
            if not isinstance(states, int):
                problems.append(f"{shown_path(m.path, root)}: no counterexample_states recorded")
                states = None
        d = amap.definitions[name]
        invariants.append(InvariantInfo(name, d, comment_text(d.comment), _uses(name, amap), m, states))

    gen_dir = Path(traces_dir) if traces_dir else root / ".cache" / "traces" / f"{config}-{spec_hash(spec_dir, config)}"
    if not (gen_dir / MANIFEST).is_file() and generate_traces and traces_dir is None:

        ensure_traces(config, spec_dir=spec_dir, cache=root / ".cache" / "traces")
    generated = _read_traces(gen_dir, "generated", root) if (gen_dir / MANIFEST).is_file() else None
    if generated is None:
        echo(f"docs: no generated traces for this spec in {gen_dir} (run `zabref chain --config {config}` or "
             f"`zabref docs --generate-traces`)")
    committed, note = _committed(root, Path(committed_dir) if committed_dir else root / "traces" / "regression",
                                 problems)
    return SiteData(root, config, graph_config, amap, steps, seeds, invariants, generated, gen_dir, committed, note,
                    problems)


# ---------------------------------------------------------------------------------------------------------------
# Writing


def _graph_files(data: SiteData, out: Path, dot: Path | None, graph: bool, echo) -> dict | None:
    """Render (or take from the cache) the overview and detail SVGs into out/graph/; None when not drawn."""

    if not graph:
        return None
    spec_dir = data.root / "spec"
    key = spec_hash(spec_dir, data.graph_config)
    cache = data.root / ".cache" / "site"
    if dot is None:
        dot = ensure_dump(spec_dir, data.graph_config, cache, key, echo=echo)
        stem = f"{data.graph_config}-{key}-r{RENDER_VERSION}"
    else:
        stem = None  # a dump given by hand is drawn every time
    groups: dict[str, list[str]] = {}
    for a in data.amap.actions:
        groups.setdefault(a.group, []).append(a.name)
    g = read_graph(dot)
    colours = action_colours(list(groups.items()), sorted({e[2] for e in g.edges}))
    (out / "graph").mkdir(parents=True, exist_ok=True)
    title = f"spec/MC_{data.graph_config}: {len(g.nodes):,} states, {len(g.edges):,} edges"
    for kind, draw in (("overview", overview_svg), ("detail", detail_svg)):
        cached = cache / f"{stem}-{kind}.svg" if stem else None
        if cached is None or not cached.is_file():
            start = time.monotonic()
            svg = draw(g, colours, title if kind == "overview" else title + " (the first states in BFS order)")
            echo(f"docs: drew the {kind} of {data.graph_config} in {time.monotonic() - start:.1f}s")
            if cached is not None:
                write_file(cached, svg)
        else:
            svg = cached.read_bytes()
        (out / "graph" / f"{kind}.svg").write_bytes(svg)
    counts: dict[str, int] = {}
    for e in g.edges:
        counts[e[2]] = counts.get(e[2], 0) + 1
    return {"colours": colours, "counts": counts, "states": len(g.nodes), "edges": len(g.edges),
            "dot": shown_path(dot, data.root), "initial": len(g.initial)}


def build_site(out: Path, data: SiteData, dot: Path | None = None, graph: bool = True, echo=click.echo) -> Path:
    """Write the whole site into `out` (replaced whole); returns out."""

    out = Path(out)
    with staged_folder(out) as tmp:
        (tmp / "style.css").write_text(CSS, encoding="utf-8")
        graph_info = _graph_files(data, tmp, dot, graph, echo)

        def draw(t: TraceInfo) -> None:
            svg = tmp / t.page.removesuffix(".html")
            svg = svg.with_name(svg.name + ".svg")
            svg.parent.mkdir(parents=True, exist_ok=True)
            svg.write_bytes(trace_graph(t.trace, None, f"{t.shown}").pipe(format="svg"))

        # one `dot` process a trace: as many at once as the machine has cores (list() re-raises a failure)
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            list(pool.map(draw, data.linked_traces()))
        written = pages(data, graph_info)
        for rel in sorted(data_sources(data)):
            written[f"src/{rel}.html"] = source_page(Page(f"src/{rel}.html"), rel,
                                                     (data.root / rel).read_text(encoding="utf-8"))
        for rel, text in written.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return out


def data_sources(data: SiteData) -> set[str]:
    """The source files the site shows whole: the spec, every handler's file, the mapping, the core's state."""
    files = {"spec/Zab.tla", "conformance/replay/mapping.py", "zabref/core/state.py", "zabref/core/zab.py"}
    files |= {a.handler.path for a in data.amap.actions if a.handler}
    files |= {c.path for c in data.amap.implementation_only}
    return {f for f in files if (data.root / f).is_file()}


@click.command("docs")
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=Path("out/site"),
              show_default=True, help="Folder to write the site into (replaced whole).")
@click.option("--config", default="ci", show_default=True,
              help="The model whose generated traces are counted (spec/MC_<NAME>).")
@click.option("--graph-config", default="tiny", show_default=True, help="The model whose state graph is drawn.")
@click.option("--traces", "traces_dir", type=click.Path(file_okay=False, exists=True, path_type=Path), default=None,
              help="A generated trace folder (with manifest.json) [default: the chain's cache for this spec].")
@click.option("--generate-traces", is_flag=True,
              help="When no traces are cached for this spec, generate them (TLC + the pipeline: minutes).")
@click.option("--dot", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="Draw this DOT dump instead of dumping --graph-config with TLC.")
@click.option("--no-graph", is_flag=True, help="Do not draw the state graph (no TLC run).")
def docs_command(out: Path, config: str, graph_config: str, traces_dir: Path | None, generate_traces: bool,
                 dot: Path | None, no_graph: bool) -> None:
    """Build the auditor's site: spec/Zab.tla beside zabref/, action by action, with the evidence they agree."""
    start = time.monotonic()
    try:
        data = collect(REPO, config, graph_config, traces_dir, generate_traces)
        build_site(out, data, dot=dot, graph=not no_graph)
    except ConformanceError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from None
    for p in data.problems:
        click.echo(f"docs: PROBLEM: {p}", err=True)
    generated = "none cached" if data.generated is None else str(len(data.generated))
    click.echo(f"docs: site={out.resolve() / 'index.html'} actions={len(data.amap.actions)} "
               f"variables={len(data.amap.variables)} invariants={len(data.invariants)} generated_traces={generated} "
               f"committed_traces={len(data.committed)} problems={len(data.problems)} "
               f"wall={time.monotonic() - start:.1f}s result={'ok' if not data.problems else 'stale'}")
    raise SystemExit(1 if data.problems else 0)
