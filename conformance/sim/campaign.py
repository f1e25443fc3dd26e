"""``zabref simulate --seeds A..B --spark``: the seeds as a Spark job (`conformance.graph.spark`'s session, local mode
by default).

Theory of operation: every run is a pure function of its seed and options (conformance/sim), so seeds are independent
tasks: the seed range becomes an RDD of ints, each partition runs its seeds with `conformance.sim.seeds.summary` in
a Python worker (this virtualenv's interpreter: `conformance.graph.spark` sets PYSPARK_PYTHON), and the driver collects
one summary per seed, in seed order. The result is the same as with ``--workers``, seed for seed and digest for digest.
"""

from __future__ import annotations

from typing import Any

from conformance.sim import Options
from conformance.sim.seeds import summary

__all__ = ["run_seeds_spark"]


def _run_partition(seeds: Any, options: Options) -> Any:
    for seed in seeds:
        yield summary(seed, options)


def run_seeds_spark(seeds: range, options: Options, master: str | None = None) -> list[dict[str, Any]]:
    """Every seed's summary, in seed order, computed by Spark tasks."""
    from conformance.graph.spark import session  # noqa: PLC0415 (starting a JVM is slow: only when asked)

    spark = session(master)
    sc = spark.sparkContext
    partitions = max(1, min(len(seeds), 4 * sc.defaultParallelism))
    rdd = sc.parallelize(list(seeds), partitions)
    rows = rdd.mapPartitions(lambda part: _run_partition(part, options)).collect()
    return sorted(rows, key=lambda row: row["seed"])
