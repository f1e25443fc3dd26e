"""`zabref conform`: replay conformance traces against real zabref servers, in parallel, and report.

Theory of operation: every trace file named (or found in a named folder, ``*.jsonl.gz``) is replayed on its own
fresh servers by conformance/replay/driver.py -- its own ports, its own data dirs -- so traces run side by side:

* ``--jobs N`` (default: the number of cores) worker processes on this machine, one trace at a time each;
* ``--master URL`` a Spark job instead: the trace files' bytes are shipped in the tasks (executors need no shared
  file system), each task replays its trace on its executor's loopback and returns the result as JSON.

Progress is one line per finished trace; the run ends with ONE summary line (traces, steps, passed, failed, wall
time, steps/s). The report (``--report DIR``, default out/report: index.html + report.json,
conformance/report/results.py) is written whole or not at all. ``--bug NAME`` runs the servers with a seeded bug
(conformance/replay/bugs/NAME.toml);
``--minimize`` looks, for each failing trace, for a shorter trace of the same graph that fails the same way
(conformance/replay/minimize.py) and adds it to the report.

Exit codes: 0 every trace passed; 1 some trace departed from the spec (or its servers would not start);
2 bad usage; 3 bad input (a trace file that is not a trace, an action the driver does not know, an unknown bug).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import click

from conformance.errors import ConformanceError, InputError, Location
from conformance.graph.spark import session
from conformance.graph.traces import MANIFEST
from conformance.replay.driver import SETTLE_TIMEOUT, ReplayResult, replay_command, replay_file
from conformance.replay.minimize import minimize_result
from conformance.replay.seeded import load_bug, patched_package
from conformance.report.results import write_report

__all__ = ["conform", "find_traces", "run_all", "summary_line", "replay_one"]


def find_traces(paths: Iterable[Path]) -> tuple[list[Path], list[dict[str, Any]]]:
    """The trace files named or found (sorted within each folder), and the manifests of the folders named."""
    traces: list[Path] = []
    manifests: list[dict[str, Any]] = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            found = sorted(path.rglob("*.jsonl.gz"))
            if not found:
                raise InputError(_location(path), "no trace files (*.jsonl.gz) in this folder")
            traces.extend(found)
            manifest = path / MANIFEST
            if manifest.is_file():
                try:
                    manifests.append({**json.loads(manifest.read_text(encoding="utf-8")), "path": str(manifest)})
                except (OSError, json.JSONDecodeError) as e:
                    raise InputError(_location(manifest), f"not a readable manifest: {e}") from None
        else:
            traces.append(path)
    return traces, manifests


def _location(path: Path):

    return Location(str(path))


def replay_one(path: str, bug: str | None, root: str | None, settle_timeout: float) -> dict[str, Any]:
    """Replay one trace file; a JSON-able result, also for bad input (``error_kind`` "input")."""

    try:
        if bug and root is None:  # a Spark executor: make the patched package here
            with patched_package(load_bug(bug)) as made:
                result = replay_file(path, bug=bug, bug_root=made, settle_timeout=settle_timeout)
        else:
            result = replay_file(path, bug=bug, bug_root=Path(root) if root else None,
                                 settle_timeout=settle_timeout)
        out = result.to_json()
        out["error_kind"] = "start" if result.error else None
    except ConformanceError as e:
        out = ReplayResult(path, "", 0, error=str(e), bug=bug).to_json()
        out["error_kind"] = "input"
    return out


def _replay_shipped(item: tuple[str, bytes], bug: str | None, settle_timeout: float) -> dict[str, Any]:
    """A Spark task: the trace's bytes came with the task; replay it on this executor's loopback."""
    path, data = item
    with tempfile.TemporaryDirectory(prefix="zabref-conform-") as tmp:
        local = Path(tmp) / Path(path).name
        local.write_bytes(data)
        out = replay_one(str(local), bug, None, settle_timeout)
    out["trace"] = path
    if out.get("failure"):

        out["failure"]["command"] = replay_command(path, bug)
    return out


def _local(traces: list[Path], jobs: int, bug: str | None, root: str | None,
           settle_timeout: float) -> Iterator[dict[str, Any]]:
    if jobs == 1 or len(traces) == 1:
        for t in traces:
            yield replay_one(str(t), bug, root, settle_timeout)
        return
    ctx = multiprocessing.get_context("spawn")  # no inherited threads or sockets
    with ProcessPoolExecutor(max_workers=min(jobs, len(traces)), mp_context=ctx) as pool:
        futures = [pool.submit(replay_one, str(t), bug, root, settle_timeout) for t in traces]
        for future in as_completed(futures):
            yield future.result()


def _spark(traces: list[Path], master: str, bug: str | None, settle_timeout: float) -> Iterator[dict[str, Any]]:

    spark = session(master)
    payload = [(str(t), t.read_bytes()) for t in traces]
    rdd = spark.sparkContext.parallelize(payload, numSlices=len(payload))
    yield from rdd.map(lambda item: _replay_shipped(item, bug, settle_timeout)).toLocalIterator(
        prefetchPartitions=True)


def run_all(traces: list[Path], *, jobs: int = 1, master: str | None = None, bug: str | None = None,
            settle_timeout: float = SETTLE_TIMEOUT, echo: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Replay every trace; returns the results (JSON-able dicts) in the order the traces were given."""

    results: dict[str, dict[str, Any]] = {}

    def collect(stream: Iterator[dict[str, Any]]) -> None:
        for n, res in enumerate(stream, 1):
            results[res["trace"]] = res
            echo(f"conform: [{n}/{len(traces)}] {_one_line(res)}")

    if master:
        if bug:
            load_bug(bug)  # an unknown bug fails here, not in every task
        collect(_spark(traces, master, bug, settle_timeout))
    elif bug:
        with patched_package(load_bug(bug)) as root:
            collect(_local(traces, jobs, bug, str(root), settle_timeout))
    else:
        collect(_local(traces, jobs, None, None, settle_timeout))
    return [results[str(t)] for t in traces if str(t) in results]


def _one_line(res: dict[str, Any]) -> str:
    name = res["trace"]
    if res.get("error"):
        return f"ERROR {name}: {res['error'].splitlines()[0]}"
    f = res.get("failure")
    if f:
        params = ", ".join(f"{k}={v}" for k, v in sorted(f["params"].items()))
        what = ", ".join(f["differences"]) or f["reason"]
        return f"FAIL  {name}: step {f['step']} {f['action']}({params}): {what}"
    return f"PASS  {name}: {res['steps']} steps in {res['wall']:.1f}s"


def summary_line(results: list[dict[str, Any]], wall: float) -> str:
    steps = sum(r["replayed"] for r in results)
    passed = sum(1 for r in results if r["passed"])
    errors = sum(1 for r in results if r.get("error"))
    step_time = sum(r["step_time"] for r in results)
    per_step = f"{1000 * step_time / steps:.1f}ms" if steps else "n/a"
    return (f"conform: traces={len(results)} steps={steps} passed={passed} failed={len(results) - passed - errors} "
            f"errors={errors} wall={wall:.1f}s steps/s={steps / wall if wall else 0:.1f} "
            f"step={per_step} (start-ups excluded)")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Traces replayed at once on this machine [default: the number of cores].")
@click.option("--master", default=None, help="Run the replays as a Spark job on this master (e.g. local[4]).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("out/report"),
              show_default=True, help="Folder for index.html and report.json (replaced whole).")
@click.option("--bug", default=None, metavar="NAME", help="Run the servers with a seeded bug (conformance/replay/bugs/).")
@click.option("--minimize", is_flag=True, help="For each failing trace, look for a shorter one that fails the same way.")
@click.option("--graph", default=None, metavar="PARQUET|DOT",
              help="With --minimize: the graph's Parquet folder or DOT [default: from the traces' manifest].")
@click.option("--attempts", type=click.IntRange(min=1), default=20, show_default=True,
              help="With --minimize: candidate traces replayed at most, per failure.")
@click.option("--settle-timeout", type=click.FloatRange(min=0.1), default=SETTLE_TIMEOUT, show_default=True,
              help="Seconds a step may take to settle before it counts as a failure.")
@click.option("--site", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The auditor's site (index.html of `zabref docs`) for the report to link to.")
@click.option("--system", default="zabref", show_default=True, metavar="zabref|zookeeper[@VERSION]",
              help="The servers under test: zabref's, or one real ZooKeeper server as each trace's first follower "
                   "(else first leader), the other servers played (conformance/zk/conform.py; VERSION as `zabref zk "
                   "versions`, default 3.8.0).")
@click.option("--every-seat", is_flag=True, default=False,
              help="With --system zookeeper: replay each trace once for every server that takes a role in it, the "
                   "real server in that server's seat (leader, follower, the one that crashes, in turn).")
def conform(paths: tuple[Path, ...], jobs: int | None, master: str | None, report_dir: Path, bug: str | None,
            minimize: bool, graph: str | None, attempts: int, settle_timeout: float, site: Path | None,
            system: str, every_seat: bool) -> None:
    """Replay conformance traces (files, or folders of them) against real zabref servers, or a real ZooKeeper
    server (--system zookeeper)."""

    started = time.monotonic()
    if system != "zabref":
        _conform_zookeeper(paths, system, report_dir, bug=bug, minimize=minimize, master=master,
                           every_seat=every_seat)
        return
    if every_seat:
        raise click.UsageError("--every-seat is for --system zookeeper (zabref's servers take every seat at once)")
    try:
        traces, manifests = find_traces(paths)
        results = run_all(traces, jobs=jobs or os.cpu_count() or 1, master=master, bug=bug,
                          settle_timeout=settle_timeout, echo=click.echo)
        minimized = []
        if minimize:

            for res in results:
                if res.get("failure"):
                    m = minimize_result(res, graph, manifests, bug=bug, attempts=attempts,
                                        settle_timeout=settle_timeout, echo=click.echo,
                                        out_dir=report_dir.with_name(report_dir.name + "-minimized"))
                    if m is not None:
                        minimized.append(m)
        wall = time.monotonic() - started
        line = summary_line(results, wall)
        write_report(report_dir, results, manifests, line, bug=bug, minimized=minimized, site=site)
    except ConformanceError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from None
    click.echo(f"conform: report {report_dir / 'index.html'}")
    click.echo(line)
    if any(r.get("error_kind") == "input" for r in results):
        raise SystemExit(3)
    if not all(r["passed"] for r in results):
        raise SystemExit(1)


def _conform_zookeeper(paths: tuple[Path, ...], system: str, report_dir: Path, *, bug: str | None, minimize: bool,
                       master: str | None, every_seat: bool = False) -> None:
    """``--system zookeeper[@VERSION]``: each trace against a new real ZooKeeper server, one at a time; the outcomes
    in ``report_dir``/zookeeper.json; exit 1 if a trace departed."""
    from conformance.zk import ZkError  # noqa: PLC0415 -- the ZooKeeper side is loaded only when asked for
    from conformance.zk.conform import model_note, run_traces, summary  # noqa: PLC0415
    from conformance.zk.coverage import coverage, second_run  # noqa: PLC0415

    name, _, version = system.partition("@")
    if name != "zookeeper":
        raise click.BadParameter(f"{system!r}: zabref, zookeeper or zookeeper@VERSION", param_hint="--system")
    if bug or minimize or master:
        raise click.UsageError("--bug, --minimize and --master are for zabref's servers, not --system zookeeper")
    version = version or "3.8.0"
    try:
        traces, manifests = find_traces(paths)
        outcomes = run_traces(traces, version, report_dir.with_name(report_dir.name + "-zk-work"), echo=click.echo,
                              every_seat=every_seat)
    except (ConformanceError, ZkError) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(3) from None
    line = summary(outcomes, version)
    covered, again = coverage(outcomes, manifests), second_run(outcomes)
    report_dir.mkdir(parents=True, exist_ok=True)
    tmp = report_dir / "zookeeper.json.tmp"
    tmp.write_text(json.dumps({"system": f"zookeeper@{version}", "summary": line,
                               "coverage": [c.to_json() for c in covered],
                               "second_run": [{"trace": t, "instances": new} for t, new in again],
                               "traces": [dataclasses.asdict(o) for o in outcomes]}, indent=1), encoding="utf-8")
    tmp.replace(report_dir / "zookeeper.json")
    for c in covered:
        click.echo(c.line())
    click.echo(f"a second run needs {len(again)} trace{'s' if len(again) != 1 else ''}"
               + "".join(f"\n  {t}: {', '.join(new)}" for t, new in again))
    click.echo(line)
    if (note := model_note(outcomes, version)) is not None:
        click.echo(note)
    if any(o.verdict == "departed" for o in outcomes):
        raise SystemExit(1)
