"""What ``zabref bench cluster`` does, in order.

Theory of operation
-------------------
For each system asked for (zabref first, once per client asked for with ``zabref_clients``: its Python client as
system ``zabref``, ZooKeeper's Java client on the servers' ``zk_client_port`` as ``zabref-java``; then ZooKeeper once
per client asked for with ``zk_clients``: kazoo as system ``zookeeper``, the Java client as ``zookeeper-java`` -- never
two running at once, so they do not share the two cores; the Java client is compiled once and serves both Java
systems): start a fresh 3-server cluster under ``<out>/work/<system>``, find its leader and one follower, and run
the rows: writes against the follower with each in-flight count, then against the leader, then the same for reads
(of values written before). Around each row the servers' CPU time and, after it, their resident memory are read
(`conformance.bench.usage`), from the server processes' pids whatever the client, so the servers' CPU per 1,000
operations of ``zabref-java`` compares directly with ``zabref``'s and ZooKeeper's; the client reports its own CPU
time. One line is printed per row as it finishes. Then the failover trials (zabref and ZooKeeper, each with its
Python client only), on a NEW cluster of the same system (so the restarted server does not first have to recover the
whole benchmark's log, which would measure recovery, not failover). At the end: the table with the ratios, the
failover lines, ``bench.json`` and ``bench.png`` in ``<out>``; the work folders are deleted unless ``keep`` is set.

``--quick`` is a smoke run: 200 writes, in flight 1 and 16, one failover trial.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from conformance.bench import BenchError
from conformance.bench.failover import FailoverResult, run_trial
from conformance.bench.javaclient import build
from conformance.bench.report import build_report, format_failover, format_rounds, format_table, write_json, write_png
from conformance.bench.stats import Row, median_row
from conformance.bench.systems import ZabrefHarness, ZooKeeperHarness
from conformance.bench.usage import Usage
from conformance.bench.workload import VALUE_BYTES
from conformance.zk.versions import ensure_zookeeper

__all__ = ["run_bench", "runs_of", "start_harness", "QUICK_WRITES", "QUICK_IN_FLIGHT", "ZK_CLIENTS", "ZABREF_CLIENTS"]

QUICK_WRITES = 200
QUICK_IN_FLIGHT = (1, 16)
#: Writes before the measured rows, on each system (JIT, caches, connections): not recorded.
WARMUP_WRITES = 2000
#: ``--zk-clients``: the client -> the system name of ZooKeeper's rows driven by it.
ZK_CLIENTS = {"kazoo": "zookeeper", "java": "zookeeper-java"}
#: ``--zabref-clients``: the client -> the system name of zabref's rows driven by it (java: on zk_client_port).
ZABREF_CLIENTS = {"zabclient": "zabref", "java": "zabref-java"}
#: Systems whose failover is measured (each with its Python client only: the Java client has no failover load).
FAILOVER_SYSTEMS = ("zabref", "zookeeper")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else None


def start_harness(system: str, folder: Path, classpath: str | None, code_root: Path | None,
                  action_log: Path | None = None, java_client: Any = None, late: bool = False) -> Any:
    """A started cluster of ``system`` in ``folder`` (emptied first), with its client adapter. ``action_log``: the
    zabref servers' action logs go there (emptied first); ZooKeeper has none. ``java_client``: the compiled ZkLoad,
    for systems ``zabref-java`` and ``zookeeper-java``. ``late``: zabref's servers log late (leader_logs_late)."""

    for path in (folder, action_log):
        if path is not None and path.exists():
            shutil.rmtree(path)
    folder.mkdir(parents=True)
    java = java_client if system.endswith("-java") else None
    if system in ZABREF_CLIENTS.values():
        return ZabrefHarness(folder, code_root, action_log, java, late)
    return ZooKeeperHarness(folder, classpath, java)


def runs_of(systems: Sequence[str], zabref_clients: Sequence[str], zk_clients: Sequence[str]) -> list[str]:
    """The systems measured, in order (``--systems`` x each one's clients); BenchError naming a bad option."""
    unknown = set(systems) - {"zabref", "zookeeper"}
    if unknown or not systems:
        raise BenchError(f"--systems: unknown {sorted(unknown)} (choose from zabref, zookeeper)")
    for option, clients, table, system in (("--zabref-clients", zabref_clients, ZABREF_CLIENTS, "zabref"),
                                           ("--zk-clients", zk_clients, ZK_CLIENTS, "zookeeper")):
        unknown = set(clients) - set(table)
        if unknown or (system in systems and not clients):
            raise BenchError(f"{option}: unknown {sorted(unknown)} (choose from {', '.join(table)})")
    return [name for system in dict.fromkeys(systems)
            for name in [(ZABREF_CLIENTS if system == "zabref" else ZK_CLIENTS)[c]
                         for c in dict.fromkeys(zabref_clients if system == "zabref" else zk_clients)]]


def _rows(h: Any, writes: int, in_flight: Sequence[int], echo: Callable[[str], None]) -> list[Row]:
    leader = h.leader()
    follower = next(s for s in h.sids if s != leader)
    warm = min(WARMUP_WRITES, writes)
    echo(f"{h.system:<14} warm-up: {warm} writes with 16 in flight on the leader (not recorded)")
    h.adapter.run_row("write", "leader", leader, 16, warm)
    rows = []
    for op in ("write", "read"):
        for target, sid in (("follower", follower), ("leader", leader)):
            for n in in_flight:
                usage = Usage(h.pids())
                row = _with_progress(f"{h.system} {op} {target} {n}", writes, h.adapter,
                                     lambda: h.adapter.run_row(op, target, sid, n, writes))
                row = dataclasses.replace(row, server_cpu_s=usage.cpu_s(), server_rss_mb=usage.rss())
                rows.append(row)
                share = row.client_cpu_share
                echo(f"{h.system:<14} {op:<5} {target:<8} (server {sid}) in flight {n:>3}: {row.ops_per_s:>9,.1f} "
                     f"ops/s  p50 {row.p50_ms:.2f} ms  p99 {row.p99_ms:.2f} ms  ({row.count} in {row.seconds:.1f} s"
                     f"{f'; client CPU {share:.0%} of a core' if share is not None else ''}"
                     f"{f', {row.errors} errors, last: {h.adapter.last_error}' if row.errors else ''})")
    return rows


def _with_progress(desc: str, total: int, adapter: Any, run: Callable[[], Row]) -> Row:
    """Run one row with a tqdm bar (on stderr, gone when the row ends) fed from ``adapter.completed``."""
    from tqdm import tqdm  # noqa: PLC0415 (the progress bar loads only when a long run starts)

    stop = threading.Event()
    with tqdm(total=total, desc=desc, unit="req", leave=False, mininterval=1.0) as bar:
        def feed() -> None:
            while not stop.wait(1.0):
                bar.update(adapter.completed - bar.n)

        t = threading.Thread(target=feed, daemon=True)
        t.start()
        try:
            return run()
        finally:
            stop.set()
            t.join()


def _failover(h: Any, trials: int, echo: Callable[[str], None], errors: list[str],
              warmup: float) -> list[FailoverResult]:
    """The trials; one that fails is reported (echo and ``errors``) and the next one still runs."""
    out = []
    for trial in range(1, trials + 1):
        leader = h.leader()
        survivor = next(s for s in h.sids if s != leader)
        others = [s for s in h.sids if s != leader]
        try:
            r = run_trial(h.system, trial, h.adapter, leader, survivor, lambda: h.kill(leader),
                          lambda: h.serving_leader(others), warmup=warmup)
        except BenchError as e:
            errors.append(f"{h.system} trial {trial}: {e}")
            echo(f"{h.system:<10} failover {trial} FAILED: {e}")
        else:
            out.append(r)
            echo(f"{h.system:<10} failover {trial}: killed leader {leader}; server {r.new_leader} leads after "
                 f"{r.leader_s:.3f} s; first write issued after the kill committed after {r.first_write_s:.3f} s")
        h.restart(leader)
    return out


def run_bench(*, writes: int, in_flight: Sequence[int], systems: Sequence[str], out: Path, failover_trials: int,
              keep: bool = False, zabref_code: Path | None = None, log_actions: bool = False,
              zk_clients: Sequence[str] = tuple(ZK_CLIENTS), zabref_clients: Sequence[str] = ("zabclient",),
              failover_warmup: float = 2.0, echo: Callable[[str], None] = print,
              leader_logs_late: bool = False, rounds: int = 1) -> dict[str, Any]:
    """Run the whole benchmark; returns the report (also written to ``out/bench.json`` and ``out/bench.png``).
    ``log_actions``: zabref's servers write their action logs (`zabref.runtime.actionlog`) to ``out/actions/throughput``
    and ``out/actions/failover`` (``zabref-java``: ``out/actions/throughput-java``), kept for `zabref validate`.
    ``zk_clients``: which clients drive ZooKeeper (``kazoo``, ``java``), each on its own ensemble, in this order;
    ``zabref_clients`` the same for zabref (``zabclient``, ``java``). ``failover_warmup``: seconds of load before each
    kill (a test keeps it short, so that the failover run's action log stays small enough to validate quickly).
    ``leader_logs_late``: zabref's servers run with ``[cluster] leader_logs_late``. ``rounds``: every system's rows
    that many times, each round on fresh clusters, the systems in the order of ``systems`` in odd rounds and the other
    way round in even ones; the report's rows are the medians of the rounds (`median_row`) and ``by_round`` gives each
    round's ratios; failover runs once, after the rounds; with ``log_actions`` the first round's servers log."""
    if zabref_code is not None and not (zabref_code / "zabref" / "cli.py").is_file():
        raise BenchError(f"--zabref-code: {zabref_code} has no zabref/cli.py")
    if writes < 1 or not in_flight or min(in_flight) < 1 or rounds < 1:
        raise BenchError("--writes, --rounds and every --in-flight must be positive")
    runs = runs_of(systems, zabref_clients, zk_clients)
    if importlib.util.find_spec("matplotlib") is None:
        raise BenchError("matplotlib is not installed (for bench.png): pip install 'zabref[bench]'")
    classpath = java_client = None
    if "zookeeper" in runs and importlib.util.find_spec("kazoo") is None:
        raise BenchError("kazoo is not installed: pip install 'zabref[bench]' (or kazoo), or run with "
                         "--zk-clients java")
    if any(r != "zabref" for r in runs):  # ZooKeeper's servers, or its jars for the Java client
        classpath = ensure_zookeeper(echo, alternative="run with --systems zabref --zabref-clients zabclient")
    if any(r.endswith("-java") for r in runs):
        java_client = build(echo)
    out = out.resolve()  # absolute: with --zabref-code the servers run in another working directory
    out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # its "Connection dropped" warnings are expected in failover
    work = out / "work"
    started, load_before = _now(), list(os.getloadavg())
    echo(f"load average before: {' '.join(f'{x:.2f}' for x in load_before)} ({os.cpu_count()} cpus)")
    per_round: list[list[Row]] = []
    fails: list[FailoverResult] = []
    fail_errors: list[str] = []
    settings: dict[str, Any] = {"writes": writes, "in_flight": list(in_flight), "value_bytes": VALUE_BYTES,
                                "failover_trials": failover_trials, "systems": runs, "rounds": rounds}

    def actions(system: str) -> Path | None:
        return out / "actions" if log_actions and system in ZABREF_CLIENTS.values() else None

    try:
        for r in range(1, rounds + 1):
            per_round.append([])
            if rounds > 1:
                echo(f"round {r} of {rounds}")
            for system in (runs if r % 2 else runs[::-1]):
                logs = actions(system) if r == 1 else None
                throughput = "throughput" if system == "zabref" else "throughput-java"
                with start_harness(system, work / system, classpath, zabref_code, logs and logs / throughput,
                                   java_client, leader_logs_late) as h:
                    if r == 1:
                        settings[system] = h.settings
                        if "build" in h.settings:
                            echo(f"{system}: the servers run zabref's {h.settings['build']} build")
                    per_round[-1] += _rows(h, writes, in_flight, echo)
        for system in runs:
            if failover_trials and system in FAILOVER_SYSTEMS:
                logs = actions(system)
                with start_harness(system, work / f"{system}-failover", classpath, zabref_code,
                                   logs and logs / "failover", late=leader_logs_late) as h:
                    fails += _failover(h, failover_trials, echo, fail_errors, failover_warmup)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    machine = {"cpus": os.cpu_count() or 0, "loadavg_before": load_before, "loadavg_after": list(os.getloadavg()),
               "python": sys.version.split()[0], "java": _java_version()}
    keys = list(dict.fromkeys((row.system, row.key) for row in per_round[0]))
    rows = [median_row([row for one in per_round for row in one if (row.system, row.key) == key]) for key in keys]
    report = build_report(rows, fails, command=shlex.join(["zabref", *sys.argv[1:]]), started=started,
                          finished=_now(), machine=machine, settings=settings, failover_errors=fail_errors,
                          rounds=per_round if rounds > 1 else None)
    write_json(report, out / "bench.json")
    write_png(report, out / "bench.png")
    echo("")
    echo(format_table(rows))
    if rounds > 1:
        echo("")
        echo(format_rounds(report["by_round"]))
    if fails:
        echo("")
        echo(format_failover(fails))
    la = machine["loadavg_after"]
    echo(f"load average after: {' '.join(f'{x:.2f}' for x in la)}; wrote {out / 'bench.json'} and "
         f"{out / 'bench.png'}")
    return report
