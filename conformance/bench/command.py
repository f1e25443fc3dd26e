"""``zabref bench``: the benchmark commands, plugged into `zabref` (the ``zabref.commands`` entry points).

Theory of operation: this module only reads the options; `conformance.bench.runner` runs the benchmark.
"""

from __future__ import annotations

from pathlib import Path

import click

from conformance.bench.runner import QUICK_IN_FLIGHT, QUICK_WRITES, run_bench
from conformance.zk import ZkError

__all__ = ["bench"]


def _names(text: str) -> list[str]:
    """A comma-separated option's names."""
    return [s.strip() for s in text.split(",") if s.strip()]


@click.group()
def bench() -> None:
    """Benchmarks (docs/performance.md)."""


@bench.command("cluster")
@click.option("--writes", type=click.IntRange(1), default=20_000, show_default=True, help="Writes (and reads) per row.")
@click.option("--in-flight", default="1,16,128", show_default=True, help="Requests in flight, comma-separated.")
@click.option("--systems", default="zabref,zookeeper", show_default=True, help="Which systems, comma-separated.")
@click.option("--zabref-clients", default="zabclient", show_default=True,
              help="Which clients drive zabref, comma-separated: zabclient (its Python client, system zabref), java "
                   "(ZooKeeper's Java client on the servers' zk_client_port, system zabref-java, compared with "
                   "zookeeper-java: the same client on both sides); each on a fresh cluster.")
@click.option("--zk-clients", default="kazoo,java", show_default=True,
              help="Which clients drive ZooKeeper, comma-separated: kazoo (Python), java (ZooKeeper's own client, "
                   "compiled at bench time); each on a fresh ensemble.")
@click.option("--out", type=click.Path(file_okay=False), default="out/bench", show_default=True,
              help="Folder for bench.json and bench.png.")
@click.option("--failover-trials", type=click.IntRange(0), default=3, show_default=True)
@click.option("--rounds", type=click.IntRange(1), default=1, show_default=True,
              help="Measure every row this many times, each round on fresh clusters, the systems' order alternating; "
                   "the table holds each row's median and every round's ratio follows it.")
@click.option("--quick", is_flag=True, help="Smoke run: 200 writes, in flight 1 and 16, one failover trial.")
@click.option("--keep", is_flag=True, help="Keep the servers' data folders (out/work).")
@click.option("--zabref-code", type=click.Path(file_okay=False, exists=True), default=None,
              help="Run the zabref servers from the zabref package in this folder (e.g. a patched copy).")
@click.option("--log-actions", is_flag=True,
              help="zabref's servers write action logs to OUT/actions (for `zabref validate`; costs write rate).")
@click.option("--leader-logs-late", is_flag=True,
              help="zabref's servers run with [cluster] leader_logs_late: a leader's PROPOSAL leaves before its own "
                   "log write is durable, as ZooKeeper's does (spec/Zab.tla's LeaderLogsLate).")
def bench_cluster(writes: int, in_flight: str, systems: str, zabref_clients: str, zk_clients: str, out: str,
                  failover_trials: int, rounds: int, quick: bool, keep: bool, zabref_code: str | None,
                  log_actions: bool, leader_logs_late: bool) -> None:
    """A 3-server zabref cluster beside a 3-server ZooKeeper 3.8 ensemble: same workload, ratios, failover."""
    try:
        counts = [int(x) for x in in_flight.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{in_flight!r} is not a comma-separated list of integers",
                                 param_hint="--in-flight") from None
    if quick:
        writes, counts, failover_trials = QUICK_WRITES, list(QUICK_IN_FLIGHT), min(failover_trials, 1)
    try:
        run_bench(writes=writes, in_flight=counts, systems=_names(systems), out=Path(out),
                  failover_trials=failover_trials, keep=keep,
                  zabref_code=Path(zabref_code).resolve() if zabref_code else None, log_actions=log_actions,
                  zk_clients=_names(zk_clients), zabref_clients=_names(zabref_clients), echo=click.echo,
                  leader_logs_late=leader_logs_late, rounds=rounds)
    except ZkError as e:  # the ZooKeeper ensemble's own errors (conformance.zk), printed as the bench's are
        raise click.ClickException(str(e)) from e
