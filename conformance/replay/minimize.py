"""The minimizer: for a failing trace, a shorter trace of the same state graph that fails the same way.

Theory of operation: a trace fails "the same way" when its replay departs at a step that takes the same action
(the name, e.g. ``FollowerProcessPROPOSAL``, whatever its parameters) and the same set of spec variables differ
(`replay.Failure.signature`). The pipeline's traces are already shortest paths to their LAST edge, but a failure
often happens earlier, at an action whose shortest path is shorter still, or the same bug shows at another instance
of the action reached sooner. So the candidates are: the shortest path (conformance/graph/paths.py, BFS on Spark) from
the initial state to the source of each edge of that action, plus the edge, shorter than the steps the original needed
to fail, in order of length (the failing instance's own label first among equals). At most ``attempts`` of them are
replayed (with the same seeded bug, if any); the first that fails the same way is the result, cut at its failing
step. None fails the same way: the original is reported as minimal for that budget.

The graph is the Parquet that `zabref traces` wrote (``nodes``/``edges``), or a DOT dump that is parsed into a
temporary Parquet first. Without ``--graph`` the traces' manifest.json names the DOT; its Parquet beside it
(``X.dot`` -> ``X.parquet``) is used when present.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

from conformance.errors import MinimizeError
from conformance.graph.paths import shortest_paths
from conformance.graph.pipeline import load_model, parse_graph
from conformance.graph.select import Chosen, fetch_steps
from conformance.graph.spark import session
from conformance.graph.traces import Step, Trace, dump_trace, read_trace
from conformance.replay.driver import replay_command, replay_file
from conformance.replay.seeded import load_bug, patched_package
from conformance.tla.check import default_spec_dir

__all__ = ["minimize", "minimize_result", "graph_for"]


def graph_for(graph: str | None, manifests: list[dict[str, Any]]) -> str:
    """The graph to search: --graph, else the Parquet (or DOT) the manifest's graph names."""
    if graph:
        return graph
    for m in manifests:
        dot = m.get("graph")
        if dot:
            parquet = dot[:-4] + ".parquet" if dot.endswith(".dot") else dot + ".parquet"
            return parquet if Path(parquet).is_dir() else dot
    raise MinimizeError("--minimize needs the state graph: give --graph PARQUET|DOT (no manifest.json names one)")


def _load_graph(spark, graph: str, config: str, tmp: Path):
    """(nodes, edges) DataFrames of a Parquet folder, or of a DOT parsed into a temporary Parquet."""
    if Path(graph).is_dir():
        return spark.read.parquet(f"{graph}/nodes"), spark.read.parquet(f"{graph}/edges")
    if not Path(graph).is_file():
        raise MinimizeError(f"{graph}: no such graph (a Parquet folder from `zabref traces`, or a DOT dump)")

    model = load_model(default_spec_dir(), config)
    nodes, edges, _, _ = parse_graph(spark, graph, model, str(tmp / "graph.parquet"), None, lambda s: None)
    return nodes, edges


def minimize(trace_path: str, failure: dict[str, Any], graph: str, *, bug: str | None = None, attempts: int = 20,
             settle_timeout: float = 10.0, out_dir: Path | None = None,
             echo: Callable[[str], None] = lambda s: None) -> dict[str, Any] | None:
    """Search for a shorter trace failing like `failure` (a Failure as JSON); its description, or None."""
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)


    original = read_trace(Path(trace_path))
    want = (failure["action"], tuple(sorted(failure["differences"])))
    length = failure["step"]
    spark = session()
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="zabref-minimized-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="zabref-minimize-") as tmp:
        nodes, edges = _load_graph(spark, graph, original.header.config, Path(tmp))
        bfs, _, _ = shortest_paths(nodes, edges)
        rows = (edges.filter(F.col("action") == failure["action"])
                .join(bfs.select(F.col("id").alias("src"), "depth", "root", "path"), "src")
                .filter(F.col("depth") + 1 < length)
                .orderBy("depth", (F.col("label") != (failure["label"] or "")).cast("int"), "line")
                .limit(attempts).collect())
        echo(f"minimize: {Path(trace_path).name}: {len(rows)} candidate(s) shorter than {length} steps")
        if not rows:
            return None
        chosen = [Chosen(r["root"], tuple(r["path"]) + (r["line"],), r["label"], [r["label"]]) for r in rows]
        steps: dict[int, list[Step]] = {}
        for row in fetch_steps(spark, chosen, edges, nodes):
            steps.setdefault(row["trace"], []).append(Step(row["index"], row["action"], json.loads(row["params_json"]),
                                                           row["label"], row["node"], json.loads(row["state_json"])))
    bug_ctx = patched_package(load_bug(bug)) if bug else None
    root = bug_ctx.__enter__() if bug_ctx else None
    try:
        for k, candidate in enumerate(chosen):
            path = out_dir / f"{Path(trace_path).name.removesuffix('.jsonl.gz')}.min{k}.jsonl.gz"
            header = type(original.header)(original.header.spec_sha256, original.header.config,
                                           original.header.constants, original.header.tlc_version,
                                           original.header.criterion, (candidate.label,))
            dump_trace(path, Trace(header, tuple(steps[k])))
            result = replay_file(path, bug=bug, bug_root=root, settle_timeout=settle_timeout)
            got = result.failure.signature if result.failure else None
            echo(f"minimize: candidate {k + 1}: {len(steps[k]) - 1} steps: "
                 + (f"fails at step {result.failure.step} {result.failure.action}" if result.failure else "passes"))
            if got == want:
                cut = Trace(header, tuple(steps[k][: result.failure.step + 1]))
                dump_trace(path, cut)
                return {"original": str(trace_path), "original_length": length, "path": str(path),
                        "minimized_length": result.failure.step, "command": replay_command(str(path), bug)}
            path.unlink(missing_ok=True)
    finally:
        if bug_ctx:
            bug_ctx.__exit__(None, None, None)
    return None


def minimize_result(result: dict[str, Any], graph: str | None, manifests: list[dict[str, Any]], *,
                    bug: str | None, attempts: int, settle_timeout: float, out_dir: Path | None = None,
                    echo: Callable[[str], None] = lambda s: None) -> dict[str, Any] | None:
    """`minimize` for one failed replay result of `zabref conform`; reports the two lengths."""
    failure = result["failure"]
    found = minimize(result["trace"], failure, graph_for(graph, manifests), bug=bug, attempts=attempts,
                     settle_timeout=settle_timeout, out_dir=out_dir, echo=echo)
    if found is None:
        echo(f"minimize: {Path(result['trace']).name}: no shorter trace fails the same way "
             f"({failure['step']} steps, at most {attempts} candidates tried)")
    else:
        echo(f"minimize: {Path(result['trace']).name}: {found['original_length']} steps -> "
             f"{found['minimized_length']} steps: {found['command']}")
    return found
