#!/usr/bin/env python3
"""Before/after ratios of one change to zabref's servers, from one run: `zabref bench cluster` on two versions of the
``zabref`` package, interleaved.

Theory of operation: each version (a git revision, or ``work`` for the working tree) is exported -- its ``zabref/``
only -- into .cache/bench-ab/<commit or "work">/, and the benchmark runs the servers from there (``--zabref-code``);
the client, the workload and the harness are this checkout's, the same for both. The versions run in the order
A B B A (then again for more rounds), so a drift of the machine's load over the run falls on both alike. Each
row's ops/s and server CPU per 1,000 operations are the median over the rounds; the ratios are after / before (ops/s
above 1 is faster, CPU below 1 is cheaper). The bench.json of every run is kept under --out.

    .venv/bin/python scripts/bench_ab.py                          # HEAD~1 against HEAD
    .venv/bin/python scripts/bench_ab.py --before main --after work --writes 3000 --in-flight 1,16,128
    .venv/bin/python scripts/bench_ab.py --before HEAD --after work --zabref-clients java --writes 20000 --in-flight 128
    .venv/bin/python scripts/bench_ab.py --before work --after compiled:work     # the pure build against the compiled
    .venv/bin/python scripts/bench_ab.py --before work --after late:work         # a leader that logs late

A version ``late:SPEC`` is SPEC's package run with ``--leader-logs-late`` (``[cluster] leader_logs_late``).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench-ab"


def version(spec: str) -> tuple[str, Path, bool]:
    """``REV`` (`export`), or ``compiled:REV``: that package's compiled build (scripts/build_compiled.py, cached by
    its sources), or ``late:SPEC``: SPEC run with ``--leader-logs-late``; (label, folder, late)."""
    if spec.startswith("late:"):
        label, folder, _ = version(spec.removeprefix("late:"))
        return f"{label}, leader_logs_late", folder, True
    return (*_code(spec), False)


def _code(spec: str) -> tuple[str, Path]:
    if spec.startswith("compiled:"):
        rev = spec.removeprefix("compiled:")
        label, folder = export(rev)
        # Each revision is compiled by its own scripts/build_compiled.py (what it compiles is that revision's
        # choice), into the revision's folder; the working tree's by this checkout's, into its cache.
        script = ROOT / "scripts" / "build_compiled.py" if rev == "work" else folder / "scripts" / "build_compiled.py"
        if not script.is_file():
            sys.exit(f"bench_ab: revision {rev!r} has no scripts/build_compiled.py: it has no compiled build")
        done = subprocess.run([sys.executable, str(script), "--source", str(folder)], cwd=ROOT, capture_output=True,
                              text=True)
        if done.returncode != 0:
            sys.exit(f"bench_ab: the compiled build of {rev!r} failed:\n{done.stdout}{done.stderr}")
        return f"{label}, compiled", Path(done.stdout.strip().splitlines()[-1])
    return export(spec)


def export(rev: str) -> tuple[str, Path]:
    """The ``zabref`` package of revision ``rev`` (``work``: the working tree) in a folder of its own, with the
    revision's scripts/build_compiled.py where it has one; (label, folder)."""
    if rev == "work":
        folder = CACHE / "work"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(ROOT / "zabref", folder / "zabref", ignore=shutil.ignore_patterns("__pycache__"))
        return "work", folder
    done = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"bench_ab: {rev!r} is not a revision of this repository: {done.stderr.strip()}")
    commit = done.stdout.strip()
    folder = CACHE / commit
    if not (folder / "EXPORTED").is_file():  # the package and, where the revision has it, its compiled build
        tmp = CACHE / f"{commit}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        has_build = subprocess.run(["git", "cat-file", "-e", f"{commit}:scripts/build_compiled.py"], cwd=ROOT,
                                   capture_output=True).returncode == 0
        archive = subprocess.run(["git", "archive", commit, "zabref",
                                  *(["scripts/build_compiled.py"] if has_build else [])],
                                 cwd=ROOT, capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        shutil.rmtree(folder, ignore_errors=True)
        (tmp / "EXPORTED").write_text(f"{commit}\n")
        tmp.rename(folder)
    return f"{rev} ({commit[:8]})", folder


def bench(code: Path, out: Path, args: argparse.Namespace, late: bool = False) -> list[dict]:
    command = [str(ROOT / ".venv" / "bin" / "zabref"), "bench", "cluster", "--systems", "zabref",
               "--failover-trials", "0", "--writes", str(args.writes), "--in-flight", args.in_flight,
               "--zabref-clients", args.zabref_clients, "--zabref-code", str(code), "--out", str(out),
               *(["--leader-logs-late"] if late else [])]
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"bench_ab: the benchmark failed (exit {done.returncode}): {' '.join(command)}")
    return json.loads((out / "bench.json").read_text())["rows"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="HEAD~1", help="revision A (or 'work'; 'compiled:REV' for its compiled build; "
                                                      "'late:SPEC' with leader_logs_late)")
    p.add_argument("--after", default="HEAD", help="revision B (or 'work'; 'compiled:REV' for its compiled build; "
                                                   "'late:SPEC' with leader_logs_late)")
    p.add_argument("--rounds", type=int, default=1, help="rounds of A B B A")
    p.add_argument("--writes", type=int, default=3000)
    p.add_argument("--in-flight", default="1,16,128")
    p.add_argument("--zabref-clients", default="zabclient", help="zabclient, java, or both (comma-separated)")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "bench-ab")
    args = p.parse_args()
    versions = {"A": version(args.before), "B": version(args.after)}
    runs: dict[str, list[list[dict]]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for k, which in enumerate("ABBA"):
            label, code, late = versions[which]
            print(f"round {r + 1}, {which}: {label}", flush=True)
            runs[which].append(bench(code, args.out / f"{r + 1}-{k + 1}-{which}", args, late))

    print(f"\nA = {versions['A'][0]}, B = {versions['B'][0]}; medians of {2 * args.rounds} runs each, "
          f"{args.writes} operations a row")
    print("\n".join(table(runs["A"], runs["B"])))


def table(a_runs: list[list[dict]], b_runs: list[list[dict]]) -> list[str]:
    """The rows of both versions (each a list of runs, each run bench.json's rows): per (system, op, target,
    in flight), the median ops/s and server CPU per 1,000 operations of each, and B / A."""

    def row_key(row: dict) -> tuple:
        return row.get("system", ""), row["op"], row["target"], row["in_flight"]

    def median(runs: list[list[dict]], key: tuple, field: str) -> float | None:
        values = [row[field] for rows in runs for row in rows if row_key(row) == key and row[field] is not None]
        return statistics.median(values) if values else None

    def ratio(a: float | None, b: float | None) -> str:
        return f"{b / a:6.2f}" if a and b else "     -"

    out = [f"{'system':<13}{'op':<6}{'target':<10}{'in flight':>9} {'A ops/s':>10} {'B ops/s':>10} {'B/A':>6}   "
           f"{'A CPU s/1k':>10} {'B CPU s/1k':>10} {'B/A':>6}"]
    for key in dict.fromkeys(row_key(row) for rows in a_runs + b_runs for row in rows):
        a, b = median(a_runs, key, "ops_per_s"), median(b_runs, key, "ops_per_s")
        ca, cb = median(a_runs, key, "server_cpu_s_per_1k_ops"), median(b_runs, key, "server_cpu_s_per_1k_ops")
        out.append(f"{key[0]:<13}{key[1]:<6}{key[2]:<10}{key[3]:>9} {a or 0:>10,.1f} {b or 0:>10,.1f} "
                   f"{ratio(a, b)}   "
                   f"{ca or 0:>10.3f} {cb or 0:>10.3f} {ratio(ca, cb)}")
    return out

if __name__ == "__main__":
    main()
