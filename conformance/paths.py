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

import time
from typing import Callable

__all__ = ["shortest_paths"]

_COMPACT_EVERY = 6


def shortest_paths(nodes, edges, echo: Callable[[str], None] = lambda s: None):
    """BFS over `edges` (src, dst, line) from the `nodes` (id, initial) marked initial; returns (levels DataFrame,
    max depth, states reached)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, LongType

    started = time.monotonic()
    spark = nodes.sparkSession
    # Measured (docs/performance.md): broadcasting the frontier and the reached set costs two extra jobs a level;
    # joining against the edges cached once, hash-partitioned by src, halves the time of a level.
    broadcast = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
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
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", broadcast)
    echo(f"traces: bfs: {total} states reached from {levels[0].count()} initial state(s), max depth {depth}, "
         f"{depth + 1} levels ({time.monotonic() - started:.1f}s)")
    result = levels[0]
    for more in levels[1:]:
        result = result.unionByName(more)
    return result, depth, total
