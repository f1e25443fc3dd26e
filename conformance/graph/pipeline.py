"""`zabref traces`: TLC's state graph -> nodes and edges in Parquet -> shortest paths -> conformance traces.

Theory of operation: four stages on one SparkSession (conformance/graph/spark.py), each ending with one progress line:

1. parse (graphparse.py): the DOT is read as text in partitions and parsed in `mapPartitions`, one NodeParser per
   partition; each edge's label is decoded into the action and its named parameters; the rows are cached once,
   the few framing/count/error rows come to the driver, and nodes and edges are written as Parquet
   (`<graph>.parquet/{nodes,edges}` unless --parquet says where) and read back from there;
2. bfs (paths.py): depth, parent and path of every state, by iterative joins from the initial states;
3. select (select.py): the traces the criterion asks for, prefixes dropped; only they reach the driver;
4. write (traces.py): one gzip JSON Lines file per trace and a manifest.json, into a temporary folder renamed to
   --out at the end, so that on any error --out is left as it was.

The run ends with one summary line of key=value fields (docs/traces.md). Exit codes: 0 done; 2 bad usage;
3 bad input (a malformed dump, a label that is not an action of Next) or a broken toolchain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import click

from conformance.errors import ConformanceError, GraphError, Location, PipelineError
from conformance.graph.cache import zabref_command
from conformance.graph.follow import DumpFollower, read_lines, split_range
from conformance.graph.paths import shortest_paths
from conformance.graph.rows import (
    COUNT,
    EDGE,
    FRAME,
    NODE,
    ROW_FIELDS,
    check_structure,
    first_error,
    line_offsets,
    parse_partition,
)
from conformance.graph.select import choose, drop_prefixes, fetch_steps
from conformance.graph.spark import hadoop_fs, session
from conformance.graph.traces import OutputDir, TraceHeader, spec_sha256, step_line, write_manifest, write_trace
from conformance.tla.check import default_spec_dir
from conformance.tla.labels import Labels, model_next, read_constants, server_count
from conformance.tla.tools import toolchain

__all__ = ["Summary", "run", "traces_command"]


@dataclass
class Summary:
    states: int = 0
    edges: int = 0
    traces: int = 0
    steps: int = 0
    instances_covered: int = 0
    instances_in_graph: int = 0
    names_covered: int = 0
    names_in_next: int = 0
    edges_covered: int = 0
    states_covered: int = 0
    candidates: int = 0
    wall: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        def pct(a: int, b: int) -> str:
            return f"{a}/{b}({100.0 * a / b:.1f}%)" if b else f"{a}/{b}"

        return (f"traces: states={self.states} edges={self.edges} traces={self.traces} steps={self.steps} "
                f"action_instances={pct(self.instances_covered, self.instances_in_graph)} "
                f"action_names={pct(self.names_covered, self.names_in_next)} "
                f"edge_coverage={pct(self.edges_covered, self.edges)} "
                f"state_coverage={pct(self.states_covered, self.states)} wall={self.wall:.1f}s")


@dataclass(frozen=True)
class Model:
    spec_dir: Path
    config: str
    constants: dict[str, int]
    labels: Labels
    spec_sha256: str
    tlc_version: str


def load_model(spec_dir: Path, config: str) -> Model:
    cfg = spec_dir / f"MC_{config}.cfg"
    if not cfg.is_file():
        known = sorted(p.stem.removeprefix("MC_") for p in spec_dir.glob("MC_*.cfg"))
        raise PipelineError(f"{cfg} not found; configs in {spec_dir}: {', '.join(known) or 'none'}")
    constants = read_constants(cfg.read_text(encoding="utf-8"))
    if "N" not in constants:  # a model that sets `Server <- Def` (the FLE models) rather than N
        constants["N"] = server_count(spec_dir, config, cfg.read_text(encoding="utf-8"), cfg)
    actions = model_next(spec_dir, config)
    try:
        tlc_version = toolchain().tlc_version
    except ConformanceError as e:  # a cluster driver may have no java/jar: the header says so
        tlc_version = f"unknown ({e})"
    return Model(spec_dir, config, constants, Labels.for_model(actions, constants), spec_sha256(spec_dir, config),
                 tlc_version)


def _schema():
    from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    kinds = {"kind": StringType(), "pid": IntegerType(), "lno": LongType(), "a": LongType(), "b": LongType(),
             "s1": StringType(), "s2": StringType(), "s3": StringType(), "flag": BooleanType()}
    return StructType([StructField(name, kinds[name], name not in ("kind", "pid", "lno")) for name in ROW_FIELDS])


def parse_graph(spark, graph: str, model: Model, parquet: str, partitions: int | None, echo):
    """Stage 1: returns (nodes, edges, states, edges) with nodes and edges read back from the Parquet written at
    `parquet`. The whole file is one batch of `partitions` partitions (Spark's `textFile`: any file system)."""
    started = time.monotonic()
    sc = spark.sparkContext
    fs, path = hadoop_fs(spark, graph)
    if not fs.isFile(path):
        raise PipelineError(f"{graph}: no such file")
    partitions = partitions or max(2, sc.defaultParallelism)
    labels, source = model.labels, graph
    with _ParquetGraph(spark, parquet, source) as out:
        out.add(sc.textFile(graph, minPartitions=partitions).mapPartitionsWithIndex(
            lambda pid, lines: parse_partition(pid, lines, labels, source)))
        return out.finish(started, echo)


def parse_stream(spark, follower: DumpFollower, model: Model, parquet: str, partitions: int | None, echo):
    """Stage 1 streamed: the dump parsed in byte ranges while TLC writes it (conformance/graph/follow.py); returns
    what `parse_graph` returns. A bad line stops TLC and raises, naming the line, as for a whole file."""
    started = time.monotonic()
    sc = spark.sparkContext
    partitions = partitions or max(2, sc.defaultParallelism)
    labels, source, link = model.labels, str(follower.dot), str(follower.link)
    with _ParquetGraph(spark, parquet, source) as out:
        for start, end in follower.batches():
            ranges, base = split_range(start, end, partitions), out.partitions
            out.add(sc.parallelize(ranges, len(ranges)).mapPartitionsWithIndex(
                lambda k, rs, base=base: (row for a, b in rs for row in
                                          parse_partition(base + k, read_lines(link, a, b), labels, source))))
            follower.parsed(end)
            echo(f"traces: parse: bytes {start}-{end} of the dump as TLC writes it: {out.lines} lines so far "
                 f"({time.monotonic() - started:.1f}s)")
        echo(f"traces: parse: TLC exited after {follower.exited:.1f}s, the parse of its dump ended "
             f"{time.monotonic() - follower.started - follower.exited:.1f}s later")
        return out.finish(started, echo)


class _ParquetGraph:
    """The parse stage's output: batches of parsed rows, in file order, appended to nodes/edges Parquet under a
    temporary name; `finish` runs the whole-file checks and renames it to `parquet`, so a bad graph (or an error
    part way) leaves no Parquet behind. Each batch is cached once: the few framing/count/error rows come to the
    driver (an error raises at once), then its nodes and edges are written with their file line numbers."""

    def __init__(self, spark, parquet: str, source: str) -> None:
        self.spark, self.parquet, self.source = spark, parquet, source
        self.tmp = f"{parquet}.tmp-{int(time.time() * 1000)}"
        self.partitions = self.lines = self.nodes = self.edges = self.initial = 0
        self.frames: list[tuple[int, str, str]] = []
        self.firsts: list[int] = []
        self.lasts: list[int] = []

    def add(self, rows) -> None:
        """Append one batch: an RDD of `parse_partition` rows whose partition numbers start at `self.partitions`."""
        from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

        parsed = self.spark.createDataFrame(rows, _schema(), verifySchema=False).persist()
        try:
            meta = parsed.filter(~F.col("kind").isin(NODE, EDGE)).collect()
            counts = {r["pid"]: r["lno"] for r in meta if r["kind"] == COUNT}
            offsets = {pid: self.lines + at for pid, at in line_offsets(counts).items()}
            error = first_error([tuple(r) for r in meta], counts, self.source, self.lines)
            if error is not None:
                raise error
            for r in meta:
                if r["kind"] == COUNT:
                    self.firsts += [offsets[r["pid"]] + r["a"]] if r["a"] is not None else []
                    self.lasts += [offsets[r["pid"]] + r["b"]] if r["b"] is not None else []
                    n_nodes, n_edges, n_initial = (int(x) for x in r["s1"].split())
                    self.nodes, self.edges, self.initial = (self.nodes + n_nodes, self.edges + n_edges,
                                                            self.initial + n_initial)
                elif r["kind"] == FRAME:
                    self.frames.append((offsets[r["pid"]] + r["lno"], r["s1"], r["s2"]))
            offset_of = F.create_map(*[F.lit(x) for kv in sorted(offsets.items()) for x in kv])
            line = (F.col("lno") + offset_of[F.col("pid")]).alias("line")
            parsed.filter(F.col("kind") == NODE).select(
                F.col("a").alias("id"), F.col("s1").alias("state_json"), F.col("flag").alias("initial"), line,
            ).write.mode("append").parquet(f"{self.tmp}/nodes")
            parsed.filter(F.col("kind") == EDGE).select(
                F.col("a").alias("src"), F.col("b").alias("dst"), F.col("s1").alias("label"),
                F.col("s2").alias("action"), F.col("s3").alias("params_json"), line,
            ).write.mode("append").parquet(f"{self.tmp}/edges")
            self.partitions += len(counts)
            self.lines += sum(counts.values())
        finally:
            parsed.unpersist()

    def finish(self, started: float, echo):
        check_structure(self.frames, min(self.firsts, default=None), max(self.lasts, default=None), self.source)
        if self.initial == 0:
            raise GraphError(Location(self.source), "no initial state (a node with style = filled)")
        spark = self.spark
        _check_graph(spark.read.parquet(f"{self.tmp}/nodes"), spark.read.parquet(f"{self.tmp}/edges"), self.source)
        fs, target = hadoop_fs(spark, self.parquet)
        fs.delete(target, True)
        if not fs.rename(hadoop_fs(spark, self.tmp)[1], target):
            raise PipelineError(f"cannot rename {self.tmp} to {self.parquet}")
        nodes, edges = spark.read.parquet(f"{self.parquet}/nodes"), spark.read.parquet(f"{self.parquet}/edges")
        echo(f"traces: parse: {self.nodes} states ({self.initial} initial), {self.edges} edges, "
             f"{self.lines} lines in {self.partitions} partitions -> {self.parquet} "
             f"({time.monotonic() - started:.1f}s)")
        return nodes, edges, self.nodes, self.edges

    def __enter__(self) -> "_ParquetGraph":
        return self

    def __exit__(self, *exc) -> None:
        fs, tmp = hadoop_fs(self.spark, self.tmp)
        fs.delete(tmp, True)


def _check_graph(nodes, edges, source: str) -> None:
    """Whole-graph checks in one job: one node line per state, and every edge between listed states."""
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    ends = (nodes.select("id", F.lit(1).alias("listed"), F.lit(None).cast("long").alias("at"), "line")
            .unionByName(edges.select(F.col("dst").alias("id"), F.lit(0).alias("listed"), F.col("line").alias("at"),
                                      "line"))
            .unionByName(edges.select(F.col("src").alias("id"), F.lit(0).alias("listed"), F.col("line").alias("at"),
                                      "line")))
    bad = (ends.groupBy("id").agg(F.sum("listed").alias("n"), F.min("at").alias("edge"),
                                  F.max(F.when(F.col("listed") == 1, F.col("line"))).alias("node"))
           .filter("n != 1").select("id", "n", F.coalesce("edge", "node").alias("line")).orderBy("line").first())
    if bad is None:
        return
    if bad["n"] == 0:
        raise GraphError(Location(source, bad["line"]), f"an edge to or from state {bad['id']}, which the dump "
                                                        "never lists (truncated or edited?)")
    raise GraphError(Location(source, bad["line"]), f"state {bad['id']} is listed {bad['n']} times")


def _write(spark, chosen, edges, nodes, model: Model, criterion: str, out: Path, summary: Summary, graph: str):

    header_for = lambda covers: TraceHeader(model.spec_sha256, model.config, model.constants, model.tlc_version,
                                            criterion, tuple(covers))
    order = sorted(range(len(chosen)), key=lambda k: (chosen[k].label, len(chosen[k].path), chosen[k].path))
    names = {k: f"{n:05d}-{chosen[k].label}.jsonl.gz" for n, k in enumerate(order)}
    entries, labels, nodes_seen, lines_seen = {}, set(), set(), set()
    with OutputDir(out) as tmp:
        current, buffer = None, []

        def flush():
            if current is not None:
                write_trace(tmp / names[current], header_for(chosen[current].covers), buffer)
                entries[current] = {"file": names[current], "steps": len(buffer),
                                    "covers": chosen[current].covers, "last": chosen[current].label}
                summary.steps += len(buffer)

        for row in fetch_steps(spark, chosen, edges, nodes):
            if row["trace"] != current:
                flush()
                current, buffer = row["trace"], []
            buffer.append(step_line(row["index"], row["action"], row["params_json"], row["label"], row["node"],
                                    row["state_json"]))
            nodes_seen.add(row["node"])
            if row["label"] is not None:
                labels.add(row["label"])
        flush()
        for trace in chosen:
            lines_seen.update(trace.path)
        summary.traces = len(entries)
        summary.instances_covered, summary.edges_covered = len(labels), len(lines_seen)
        summary.states_covered = len(nodes_seen)
        summary.names_covered = len({label.split("__")[0] for label in labels})
        head = header_for(()).to_json()
        manifest = {**{k: head[k] for k in ("spec_sha256", "config", "constants", "tlc_version", "criterion")},
                    "format": "zabref-trace-manifest", "version": 1, "graph": graph,
                    "traces": [entries[k] for k in order if k in entries], "coverage": _coverage(summary)}
        write_manifest(tmp, manifest)


def _coverage(s: Summary) -> dict:
    return {"states": s.states, "edges": s.edges, "traces": s.traces, "steps": s.steps,
            "candidates": s.candidates,
            "action_instances": [s.instances_covered, s.instances_in_graph],
            "action_names": [s.names_covered, s.names_in_next],
            "edges_covered": [s.edges_covered, s.edges], "states_covered": [s.states_covered, s.states]}


def run(graph: str, out: Path, spec_dir: Path, config: str, criterion: str = "action", master: str | None = None,
        max_traces: int | None = None, partitions: int | None = None, parquet: str | None = None,
        conf: dict[str, str] | None = None, echo: Callable[[str], None] = click.echo,
        stream_chunk: int | None = None, discard_dump: bool = False) -> Summary:
    """The whole pipeline; returns the summary (also printed as the last line). With `stream_chunk` (bytes) it runs
    `zabref check --dump-dot graph` itself and parses the dump in batches of about that size as TLC writes it; with
    `discard_dump` too, the dump's disk blocks are freed as they are parsed and the dump is deleted once parsed."""

    started = time.monotonic()
    summary = Summary()
    OutputDir(out)  # refuse a wrong --out before any work
    model = load_model(spec_dir, config)
    summary.names_in_next = len(model.labels.actions)
    spark = session(master, conf)
    echo(f"traces: spark {spark.version} master={spark.sparkContext.master}; config {config}, "
         f"criterion {criterion}; {model.tlc_version}")
    parquet = parquet or (graph[:-4] if graph.endswith(".dot") else graph) + ".parquet"
    t = time.monotonic()
    if stream_chunk is None:
        nodes, edges, summary.states, summary.edges = parse_graph(spark, graph, model, parquet, partitions, echo)
    else:
        args = ["check", "--config", config, "--spec-dir", str(spec_dir), "--dump-dot", graph]
        command = [*zabref_command(), *args]
        echo(f"traces: stream: zabref {' '.join(args)}")
        with DumpFollower(command, Path(graph), stream_chunk, discard=discard_dump) as follower:
            try:
                nodes, edges, summary.states, summary.edges = parse_stream(spark, follower, model, parquet,
                                                                           partitions, echo)
            finally:
                if discard_dump:
                    Path(graph).unlink(missing_ok=True)
        if follower.warning:
            echo(f"traces: warning: {follower.warning}; the dump was deleted once parsed")
        elif discard_dump:
            echo(f"traces: the dump was freed as it was parsed and deleted ({graph})")
        summary.stages["tlc"] = follower.exited + (follower.started - started)
    summary.stages["parse"] = time.monotonic() - t
    t = time.monotonic()
    bfs, depth, reached = shortest_paths(nodes, edges, echo)
    summary.stages["bfs"] = time.monotonic() - t
    if reached != summary.states:
        echo(f"traces: warning: {summary.states - reached} state(s) are not reachable from an initial state")
    t = time.monotonic()
    summary.instances_in_graph = edges.select("label").distinct().count()
    chosen, summary.candidates = choose(edges, bfs, criterion, max_traces)
    chosen = drop_prefixes(chosen)
    echo(f"traces: select: {len(chosen)} traces ({summary.candidates} candidates"
         + (f", capped at {max_traces}" if max_traces is not None else "")
         + f", prefixes dropped) ({time.monotonic() - t:.1f}s)")
    summary.stages["select"] = time.monotonic() - t
    t = time.monotonic()
    _write(spark, chosen, edges, nodes, model, criterion, out, summary, parquet if discard_dump else graph)
    summary.stages["write"] = time.monotonic() - t
    echo(f"traces: write: {summary.traces} traces, {summary.steps} steps -> {out} ({summary.stages['write']:.1f}s)")
    summary.wall = time.monotonic() - started
    echo(summary.line())
    return summary


@click.command()
@click.option("--graph", "graph", required=True, metavar="STATES.dot",
              help="TLC's state graph (`zabref check --dump-dot`); a path or a URL the cluster can read.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the traces and manifest.json (replaced whole, or left as it was on error).")
@click.option("--spec-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder of the spec and MC_*.cfg [default: ./spec].")
@click.option("--config", metavar="NAME", default=None,
              help="Model config the graph came from [default: the graph's file name, e.g. out/ci.dot -> ci].")
@click.option("--criterion", type=click.Choice(["action", "edge"]), default="action", show_default=True,
              help="action: one shortest trace per action instance; edge: every edge.")
@click.option("--master", default=None, help="Spark master URL [default: local[*]].")
@click.option("--max-traces", type=click.IntRange(min=1), default=None, help="Keep at most this many traces.")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Partitions of the DOT text [default: Spark's parallelism, at least 2].")
@click.option("--parquet", default=None, help="Where nodes/edges Parquet go [default: GRAPH without .dot + .parquet].")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="Extra Spark configuration (repeatable).")
@click.option("--stream", is_flag=True,
              help="Run `zabref check --config NAME --dump-dot STATES.dot` and parse the dump while TLC writes it "
                   "(STATES.dot on a file system this machine and the executors share).")
@click.option("--chunk-mb", type=click.IntRange(min=1), default=128, show_default=True,
              help="With --stream: parse the dump in batches of about this many MB.")
@click.option("--discard-dump", is_flag=True,
              help="With --stream: free the dump's disk blocks as they are parsed and delete it at the end (the disk "
                   "then holds about one batch of it: for a dump larger than the free disk).")
def traces_command(graph, out, spec_dir, config, criterion, master, max_traces, partitions, parquet, conf, stream,
                   chunk_mb, discard_dump) -> None:
    """Turn a TLC state graph into conformance traces, with coverage measured."""
    spec_dir = spec_dir or default_spec_dir()
    if stream and "://" in graph and not graph.startswith("file://"):
        raise click.BadParameter(f"{graph!r}: --stream writes the dump itself, to a local path", param_hint="--graph")
    graph = graph.removeprefix("file://") if stream else graph
    if discard_dump and not stream:
        raise click.BadParameter("only with --stream (it frees the dump as the stream parses it)",
                                 param_hint="--discard-dump")
    if config is None:
        stem = Path(graph).name.removesuffix(".dot")
        if not (spec_dir / f"MC_{stem}.cfg").is_file():
            raise click.BadParameter(f"cannot tell the config from the file name {Path(graph).name!r}; "
                                     "pass --config NAME", param_hint="--config")
        config = stem
    pairs = {}
    for item in conf:
        key, eq, value = item.partition("=")
        if not eq:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--conf")
        pairs[key] = value
    try:
        run(graph, out, spec_dir, config, criterion, master, max_traces, partitions, parquet, pairs,
            stream_chunk=chunk_mb << 20 if stream else None, discard_dump=discard_dump)
    except ConformanceError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from None
