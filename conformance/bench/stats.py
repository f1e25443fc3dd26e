"""Pure arithmetic of the benchmark: percentiles, one measured row, and the zabref/ZooKeeper comparison.

Theory of operation
-------------------
A measured row is a (system, op, target, in_flight) with every completed request's latency in seconds and the wall
time of the whole row. Throughput is completed requests / wall time; percentiles use the nearest-rank definition
(the smallest latency with at least p% of the samples at or below it), so every reported figure is one that was
actually observed. `compare` pairs each zabref row with the ZooKeeper rows of equal (op, target, in_flight) as
`PAIRS` lists them -- zabref driven by its Python client (``zabref``) with ZooKeeper driven by its Java client
(``zookeeper-java``, `conformance.bench.javaclient`) and by kazoo (``zookeeper``), and zabref driven by the same Java
client on its ZooKeeper client port (``zabref-java``) with ``zookeeper-java``: the same client on both sides -- and
gives zabref/ZooKeeper for throughput (above 1: zabref is faster) and for p50 and p99 latency (above 1: zabref is
slower).

Beside the latencies a row carries what it cost (all optional, None when not measured): the client's CPU seconds
over the row (its share of one core = ``client_cpu_s / seconds``: near 1.0 a single-threaded client is the
bottleneck), the servers' CPU seconds over the row (summed over the 3 servers; per 1,000 ops in the table) and each
server's resident memory at the end of the row.

Rounds. On a machine of two virtual processors a row moves by up to a quarter between two runs of the same build
(docs/performance.md), ZooKeeper's as much as zabref's, so one run's ratio near 1 says "even", not "ahead". A run of
several rounds measures every row once a round, each system on a fresh cluster, in an order that alternates from
round to round (`conformance.bench.runner`); `median_row` makes one row of a row's rounds, each figure the median of
its rounds, and `by_round` gives each round's ratios, so that a report shows both the middle and the spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["percentile", "Row", "make_row", "median_row", "by_round", "compare", "ratio", "SYSTEMS", "ZK_SYSTEMS",
           "PAIRS"]

SYSTEMS = ("zabref", "zabref-java", "zookeeper", "zookeeper-java")
#: The ZooKeeper rows zabref is compared with, the issue's bar (the Java client) first.
ZK_SYSTEMS = ("zookeeper-java", "zookeeper")
#: (zabref system, ZooKeeper system) compared, in this order for each zabref row: zabref's Python client against
#: both ZooKeeper clients, and the Java client on zabref's ZooKeeper client port against the same client on ZooKeeper.
PAIRS = (("zabref", "zookeeper-java"), ("zabref", "zookeeper"), ("zabref-java", "zookeeper-java"))
OPS = ("write", "read")
TARGETS = ("follower", "leader")


def percentile(samples: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of ``samples``; ValueError when there are none."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} outside (0, 100]")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class Row:
    """One measured row; latencies in milliseconds."""

    system: str
    op: str
    target: str
    in_flight: int
    count: int  # requests completed
    errors: int  # requests that failed (not counted in throughput or latency)
    seconds: float
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    client_cpu_s: float | None = None  # the load client's CPU time over the row (all its threads)
    server_cpu_s: float | None = None  # the 3 servers' CPU time over the row, summed
    server_rss_mb: tuple[float | None, ...] | None = None  # each server's resident memory at the end, by server id

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.op, self.target, self.in_flight)

    @property
    def client_cpu_share(self) -> float | None:
        """Client CPU seconds per wall second: 1.0 = one core busy all the row."""
        return None if self.client_cpu_s is None else round(self.client_cpu_s / self.seconds, 3)

    @property
    def server_cpu_per_1k(self) -> float | None:
        """The servers' CPU seconds per 1,000 answered requests."""
        return None if self.server_cpu_s is None or not self.count else round(self.server_cpu_s / self.count * 1000, 4)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["server_rss_mb"] = None if self.server_rss_mb is None else list(self.server_rss_mb)
        out["client_cpu_share"] = self.client_cpu_share
        out["server_cpu_s_per_1k_ops"] = self.server_cpu_per_1k
        return out


def make_row(system: str, op: str, target: str, in_flight: int, latencies_s: Sequence[float], seconds: float,
             errors: int = 0, client_cpu_s: float | None = None) -> Row:
    """Summarize one row from its latencies (seconds) and its wall time (seconds)."""
    if system not in SYSTEMS or op not in OPS or target not in TARGETS:
        raise ValueError(f"unknown row ({system}, {op}, {target})")
    if seconds <= 0:
        raise ValueError(f"row wall time {seconds} must be positive")
    n = len(latencies_s)
    ms = [x * 1000 for x in latencies_s] or [math.nan]
    return Row(system, op, target, in_flight, n, errors, round(seconds, 4), round(n / seconds, 1),
               round(percentile(ms, 50), 3) if n else math.nan, round(percentile(ms, 99), 3) if n else math.nan,
               round(max(ms), 3) if n else math.nan,
               None if client_cpu_s is None else round(client_cpu_s, 4))


def median_row(rounds: Sequence[Row]) -> Row:
    """One row of the same row's rounds: throughput, latencies, wall time, requests and the CPU figures each the
    median of the rounds (of the rounds that measured it, for CPU), the longest latency the longest, the failed
    requests all of them, the memory the last round's. ValueError if ``rounds`` is empty or mixes rows."""
    if not rounds:
        raise ValueError("the median of no rounds")
    first = rounds[0]
    if any((r.system, r.key) != (first.system, first.key) for r in rounds):
        raise ValueError(f"rounds of different rows: {sorted({(r.system, r.key) for r in rounds})}")

    def mid(values: list[float]) -> float:
        known = [v for v in values if not math.isnan(v)]
        return round(statistics.median(known), 4) if known else math.nan

    def mid_of(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.median(known), 4) if known else None

    return Row(first.system, first.op, first.target, first.in_flight,
               round(statistics.median([r.count for r in rounds])), sum(r.errors for r in rounds),
               mid([r.seconds for r in rounds]), round(mid([r.ops_per_s for r in rounds]), 1),
               mid([r.p50_ms for r in rounds]), mid([r.p99_ms for r in rounds]),
               max((r.max_ms for r in rounds if not math.isnan(r.max_ms)), default=math.nan),
               mid_of([r.client_cpu_s for r in rounds]), mid_of([r.server_cpu_s for r in rounds]),
               rounds[-1].server_rss_mb)


def by_round(rounds: Sequence[Sequence[Row]]) -> list[dict[str, Any]]:
    """Each compared row (`compare`'s entries, in its order) with its throughput ratio in every round (None in a
    round that lacked either row), in ``"rounds"``."""
    entries: dict[tuple[str, str, str, int, str], dict[str, Any]] = {}
    for i, rows in enumerate(rounds):
        for c in compare(rows):
            key = (c["system"], c["op"], c["target"], c["in_flight"], c["against"])
            entry = entries.setdefault(key, {**{k: c[k] for k in ("system", "op", "target", "in_flight", "against")},
                                             "rounds": [None] * len(rounds)})
            entry["rounds"][i] = c["throughput"]
    return list(entries.values())


def ratio(a: float, b: float) -> float | None:
    """a / b, or None when either is missing or b is 0 (printed as "-")."""
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return None
    return round(a / b, 3)


def compare(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One entry per zabref row (``system``: ``zabref`` or ``zabref-java``) and ZooKeeper row measured with the same
    (op, target, in_flight) that `PAIRS` pairs it with, in the order zabref's rows were measured, ``against`` naming
    the ZooKeeper row (in `PAIRS` order)."""
    by = {(r.system, r.key): r for r in rows}
    out = []
    for z in rows:
        for system, against in PAIRS:
            k = by.get((against, z.key))
            if z.system != system or k is None:
                continue
            out.append({"system": system, "op": z.op, "target": z.target, "in_flight": z.in_flight,
                        "against": against, "throughput": ratio(z.ops_per_s, k.ops_per_s),
                        "p50": ratio(z.p50_ms, k.p50_ms), "p99": ratio(z.p99_ms, k.p99_ms)})
    return out
