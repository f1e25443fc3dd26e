"""Stage 3 of the trace pipeline: choose the traces that cover the graph, and fetch their steps.

Theory of operation: every trace is a shortest path to some state u (from stage 2) followed by one edge e out of u.

- `action` criterion: for every action instance (edge label) present in the graph, the edge of that label whose
  source is shallowest (ties: the smallest DOT line), so the trace is as short as any trace ending in that label.
- `edge` criterion: every edge. The edge into a state v that is v's own shortest-path edge need not be a trace
  of its own when v has out-edges: every trace through v covers it. So the candidates are the other edges (which
  are never prefixes of one another) plus shortest-path edges into states with no out-edge. The `action` choices
  come first, then the rest by (depth, line), so that a cap (--max-traces) keeps action coverage.

Prefixes: apart from its last edge, a trace consists of shortest-path edges. So trace T is a proper prefix of
another trace T' exactly when T's last edge appears at a non-final position of T' (then T is the shortest path to
that edge's target, and T' passes through it). Such a T is dropped, and the labels it was chosen for move to the
first T' that contains it; the header's `covers` lists them.

Only the chosen traces come to the driver, then their steps, joined with the edges (label, parameters) and the
nodes (states), in one Spark job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Chosen", "choose", "drop_prefixes", "fetch_steps"]


@dataclass
class Chosen:
    """A trace before its steps are fetched: the initial state, the edge lines, the labels it covers."""

    root: int
    path: tuple[int, ...]
    label: str           # the label of its last edge
    covers: list[str] = field(default_factory=list)


def choose(edges, bfs, criterion: str, max_traces: int | None) -> tuple[list[Chosen], int]:
    """The chosen traces, in priority order, and how many candidates there were before the cap."""
    from pyspark.sql import Window  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    reached = bfs.select(F.col("id").alias("src"), "depth", "root", "path")
    out = edges.select("src", "dst", "line", "label").join(reached, "src")
    rank = Window.partitionBy("label").orderBy("depth", "line")
    by_action = (out.withColumn("r", F.row_number().over(rank)).filter("r = 1")
                 .select("label", "root", "path", "line", "depth", F.lit(0).alias("tier")))
    chosen = by_action
    if criterion == "edge":
        has_out = edges.select(F.col("src").alias("id")).distinct()
        shortest_into = (bfs.filter(F.col("via").isNotNull()).join(has_out, "id")
                         .select(F.col("via").alias("line")))
        rest = (out.join(shortest_into, "line", "left_anti").join(by_action.select("line"), "line", "left_anti")
                .select("label", "root", "path", "line", "depth", F.lit(1).alias("tier")))
        chosen = by_action.unionByName(rest)
    ordered = chosen.orderBy("tier", "depth", "line")
    total = chosen.count() if max_traces is not None else None
    rows = (ordered.limit(max_traces) if max_traces is not None else ordered).collect()
    picked = [Chosen(r["root"], tuple(r["path"]) + (r["line"],), r["label"], [r["label"]]) for r in rows]
    return picked, (total if total is not None else len(picked))


def drop_prefixes(traces: list[Chosen]) -> list[Chosen]:
    """Drop every trace that is a proper prefix of another; its covers move to the first trace that extends it."""
    first_containing: dict[int, int] = {}
    for k, trace in enumerate(traces):
        for line in trace.path[:-1]:
            first_containing.setdefault(line, k)
    kept = []
    for k, trace in enumerate(traces):
        into = first_containing.get(trace.path[-1])
        if into is None:
            kept.append(trace)
        else:
            # `into` ends deeper than `trace`, so it is never itself a prefix of `trace`; follow it to a kept trace.
            while (nxt := first_containing.get(traces[into].path[-1])) is not None:
                into = nxt
            traces[into].covers.extend(trace.covers)
    for trace in kept:
        trace.covers = sorted(set(trace.covers))
    return kept


def fetch_steps(spark, traces: list[Chosen], edges, nodes):
    """Rows (trace, index, node, label, action, params_json, state_json) of every step, sorted by trace and index,
    as a local iterator."""
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    schema = StructType([StructField("trace", LongType(), False), StructField("root", LongType(), False),
                         StructField("path", ArrayType(LongType(), False), False)])
    chosen = spark.createDataFrame([(k, t.root, list(t.path)) for k, t in enumerate(traces)], schema)
    # The chosen steps are a few hundred rows: broadcast them explicitly. Left to itself, Spark may instead pick the
    # nodes table (every state's JSON) as the broadcast side and exhaust the driver's memory on a large graph.
    moves = (F.broadcast(chosen.select("trace", F.posexplode("path").alias("pos", "line")))
             .join(edges.select("line", "dst", "label", "action", "params_json"), "line")
             .select("trace", (F.col("pos") + 1).alias("index"), F.col("dst").alias("node"), "label", "action",
                     "params_json"))
    inits = chosen.select("trace", F.lit(0).alias("index"), F.col("root").alias("node"),
                          F.lit(None).cast("string").alias("label"), F.lit("Init").alias("action"),
                          F.lit("{}").alias("params_json"))
    steps = (F.broadcast(moves.unionByName(inits)).join(nodes.select(F.col("id").alias("node"), "state_json"), "node")
             .orderBy("trace", "index"))
    return steps.toLocalIterator(prefetchPartitions=True)
