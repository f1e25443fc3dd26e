"""Stage 2 of the trace pipeline: depth and one shortest path from an initial state to every state, on Spark.

Theory of operation: breadth-first search as iterative joins, level by level, never collecting the graph. Level 0
is the initial states. From the frontier (the states first reached at depth d), every out-edge is joined in, the
targets already reached are removed (anti-join with the reached set), and each new target keeps ONE parent: the
candidate edge with the smallest DOT line number (TLC writes an edge line when it generates the transition, so this
is the first edge TLC found; it makes the choice deterministic for a given dump). The new level is checkpointed
(`localCheckpoint`: materialized, lineage cut, its size observed in the same job) so that 40 levels cost 40 small
jobs, not one job of quadratic plan. The edges are cached once, hash-partitioned by source, so a level shuffles only
its frontier and candidates, never the edge table. The reached set is the union of the levels, compacted into one
checkpoint every few levels (a union of 40 checkpoints made 40 x partitions tasks a level: measured 42 s -> 34 s).

Each state carries, besides depth and parent, its whole path as the array of DOT line numbers of its edges
(`path`), and the initial state it starts from (`root`). That costs depth x 8 bytes per state and spares the
selection stage one lookup job per level when it turns chosen edges into traces.

Output columns: id, depth, parent (null at depth 0), via (line of the edge from the parent), root, path.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

__all__ = ["shortest_paths", "first_edge_tree", "level_bfs"]

_COMPACT_EVERY = 6


@contextlib.contextmanager
def no_broadcast_joins(spark):
    """Spark plans no broadcast joins inside: broadcasting a level's paths (arrays of edge lines) can exhaust the
    driver's 1 GiB, and for the level search it costs two extra jobs a level (docs/performance.md)."""
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)


def shortest_paths(nodes, edges, echo: Callable[[str], None] = lambda s: None, method: str = "auto"):
    """Depth and a shortest path for every state; returns (DataFrame, max depth, states reached).

    method "tree" reads the BFS tree TLC already wrote (`first_edge_tree`) and proves it is one; "levels" runs the
    level-by-level search (`level_bfs`); "auto" takes the tree when the proof holds, else the levels. Both give the
    same parents: the first edge line into a state, which is the smallest-line edge from the previous level.
    """
    if method not in ("auto", "tree", "levels"):
        raise ValueError(f"method must be auto, tree or levels, not {method!r}")
    if method != "levels":
        found = first_edge_tree(nodes, edges, echo)
        if found is not None:
            return found
        if method == "tree":
            raise ValueError("the first in-edges of this dump do not form a BFS tree (a multi-worker TLC dump?)")
        echo("traces: bfs: the dump's first in-edges are not a BFS tree; searching level by level")
    return level_bfs(nodes, edges, echo)


def first_edge_tree(nodes, edges, echo: Callable[[str], None] = lambda s: None, max_rounds: int = 64):
    """`_first_edge_tree` with broadcast joins off."""
    with no_broadcast_joins(nodes.sparkSession):
        return _first_edge_tree(nodes, edges, echo, max_rounds)


def _first_edge_tree(nodes, edges, echo: Callable[[str], None], max_rounds: int):
    """The BFS tree TLC wrote, or None when the dump does not hold one.

    TLC (one worker) explores breadth first and writes an edge line when it generates a transition, before the new
    state's own line; so the FIRST edge line into a state (the smallest line number, self-loops aside) comes from a
    state of the previous level: it is that state's BFS parent. Parents are one aggregation; depths and paths then
    come from pointer jumping (each round joins the table with itself and doubles the hops covered: about
    log2(depth) rounds instead of one job per level). The result is accepted only when it is provably a BFS tree:
    every state reached from an initial state, and no edge u -> v with depth(v) > depth(u) + 1 (so every depth is
    the true distance). Otherwise (e.g. a dump made with several TLC workers) it returns None.
    """
    from pyspark.sql import Observation  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql.types import ArrayType, LongType  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    started = time.monotonic()
    initial = nodes.filter(F.col("initial")).select("id")
    firsts = (edges.filter(F.col("src") != F.col("dst")).join(initial, edges.dst == initial.id, "left_anti")
              .groupBy("dst").agg(F.min(F.struct("line", "src")).alias("p"))
              .select(F.col("dst").alias("id"), F.col("p.src").alias("parent"), F.col("p.line").alias("via")))
    table = (nodes.select("id", "initial").join(firsts, "id", "left")
             .select("id", "parent", "via",
                     F.when(F.col("initial"), F.lit(None).cast(LongType())).otherwise(F.col("parent")).alias("anc"),
                     F.when(F.col("initial"), F.lit(0)).otherwise(F.lit(1)).alias("depth"),
                     F.when(F.col("initial"), F.array().cast(ArrayType(LongType())))
                      .otherwise(F.array(F.col("via"))).alias("path"),
                     F.when(F.col("initial"), F.col("id")).otherwise(F.lit(None).cast(LongType())).alias("root"),
                     F.col("initial")))
    orphans = table.filter(~F.col("initial") & F.col("parent").isNull()).limit(1).count()
    if orphans:
        return None
    table = table.localCheckpoint(eager=True)
    for _ in range(max_rounds):
        a = table.select(F.col("id").alias("a_id"), F.col("anc").alias("a_anc"), F.col("depth").alias("a_depth"),
                         F.col("path").alias("a_path"), F.col("root").alias("a_root"))
        joined = table.join(a, table.anc == a.a_id, "left")
        pending = F.col("anc").isNotNull()
        table_next = joined.select(
            "id", "parent", "via", "initial",
            F.when(pending, F.col("a_anc")).otherwise(F.col("anc")).alias("anc"),
            F.when(pending, F.col("depth") + F.col("a_depth")).otherwise(F.col("depth")).alias("depth"),
            F.when(pending, F.concat(F.col("a_path"), F.col("path"))).otherwise(F.col("path")).alias("path"),
            F.when(pending, F.col("a_root")).otherwise(F.col("root")).alias("root"))
        left = Observation()
        table = table_next.observe(left, F.sum(F.col("anc").isNotNull().cast("long")).alias("n")).localCheckpoint(
            eager=True)
        if not left.get["n"]:
            break
    else:
        return None  # a cycle of first edges: not a BFS dump
    depth_of = table.select(F.col("id").alias("d_id"), F.col("depth").alias("d_depth"))
    src_depth = depth_of.select(F.col("d_id").alias("s_id"), F.col("d_depth").alias("s_depth"))
    too_deep = (edges.join(src_depth, edges.src == src_depth.s_id).join(depth_of, edges.dst == depth_of.d_id)
                .filter(F.col("d_depth") > F.col("s_depth") + 1).limit(1).count())
    if too_deep:
        return None
    result = table.select("id", "depth", "parent", "via", "root", "path")
    stats = table.agg(F.max("depth").alias("depth"), F.count(F.lit(1)).alias("n"),
                      F.sum(F.col("initial").cast("long")).alias("roots")).first()
    echo(f"traces: bfs: {stats['n']} states reached from {stats['roots']} initial state(s), max depth "
         f"{stats['depth']}, read from the dump's first in-edges and checked ({time.monotonic() - started:.1f}s)")
    return result, stats["depth"], stats["n"]


def level_bfs(nodes, edges, echo: Callable[[str], None] = lambda s: None):
    """`_level_bfs` with broadcast joins off."""
    with no_broadcast_joins(nodes.sparkSession):
        return _level_bfs(nodes, edges, echo)


def _level_bfs(nodes, edges, echo: Callable[[str], None]):
    """BFS over `edges` (src, dst, line) from the `nodes` (id, initial) marked initial, one level per Spark job;
    returns (levels DataFrame, max depth, states reached)."""
    from pyspark.sql import Observation  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql import functions as F  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)
    from pyspark.sql.types import ArrayType, LongType  # noqa: PLC0415 (Spark and its JVM load only when a command runs on Spark)

    started = time.monotonic()
    # Measured (docs/performance.md): joining against the edges cached once, hash-partitioned by src, halves the
    # time of a level (broadcast joins are off: `no_broadcast_joins`).
    graph = edges.select("src", "dst", "line").repartition("src").persist()
    try:
        level = (nodes.filter(F.col("initial")).select(
            "id", F.lit(0).alias("depth"), F.lit(None).cast(LongType()).alias("parent"),
            F.lit(None).cast(LongType()).alias("via"), F.col("id").alias("root"),
            F.array().cast(ArrayType(LongType())).alias("path"))).localCheckpoint(eager=True)
        reached = level.select("id")
        levels, total, depth, parts = [level], level.count(), 0, 1
        while True:
            candidates = (level.select(F.col("id").alias("src"), "root", "path").join(graph, "src")
                          .join(reached, graph.dst == reached.id, "left_anti"))
            best = candidates.groupBy("dst").agg(F.min(F.struct("line", "src", "root", "path")).alias("p"))
            nxt = best.select(F.col("dst").alias("id"), F.lit(depth + 1).alias("depth"),
                              F.col("p.src").alias("parent"), F.col("p.line").alias("via"),
                              F.col("p.root").alias("root"),
                              F.concat(F.col("p.path"), F.array(F.col("p.line"))).alias("path"))
            size = Observation()  # counted in the job that materializes the level: one job per level
            nxt = nxt.observe(size, F.count(F.lit(1)).alias("n")).localCheckpoint(eager=True)
            count = size.get["n"]
            if count == 0:
                break
            depth += 1
            total += count
            levels.append(nxt)
            reached = reached.union(nxt.select("id"))
            parts += 1
            if parts >= _COMPACT_EVERY:  # a union of many levels makes a task per level partition: compact it
                reached, parts = reached.repartition("id").localCheckpoint(eager=True), 0
            level = nxt
    finally:
        graph.unpersist()
    echo(f"traces: bfs: {total} states reached from {levels[0].count()} initial state(s), max depth {depth}, "
         f"{depth + 1} levels ({time.monotonic() - started:.1f}s)")
    result = levels[0]
    for more in levels[1:]:
        result = result.unionByName(more)
    return result, depth, total
