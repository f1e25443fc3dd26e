#!/usr/bin/env python3
"""Does the trace pipeline keep up with TLC? One run: TLC dumps a config's state graph, then the pipeline reads it.

Theory of operation: both rates are measured in this one run, on this machine and its current load, so their
ratio is what the bar is about (docs/performance.md records the figures):

    tlc       = distinct states / wall time of `zabref check --config C --dump-dot` (JVM start included)
    pipeline  = distinct states / wall time of the pipeline (parse + parameters + BFS + selection + writing),
                without and with the Spark session's start-up

It also measures where the pipeline's time goes: per stage, and, in this process on a sample of the dump, the
line parser with and without its value cache, against the Spark parse stage's own rate.

With --stream it then runs the pipeline once more the way `zabref traces --stream` does, parsing the dump while TLC
writes it, and prints how long after TLC's exit the traces were written (the pipeline keeps up when that lag is
the BFS, selection and writing alone) and the whole run against dump-then-pipeline (`tlc + pipeline` above).

    .venv/bin/python scripts/bench_pipeline.py [--config ci] [--graph EXISTING.dot] [--partitions N] [--stream]
"""

from __future__ import annotations

import argparse
import itertools
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from conformance.graph.dotparse import NodeParser  # noqa: E402
from conformance.graph.pipeline import run  # noqa: E402


def tlc_dump(config: str, folder: Path) -> tuple[Path, float, int]:
    path = folder / f"{config}.dot"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "zabref.cli", "check", "--config", config, "--spec-dir",
                           str(ROOT / "spec"), "--dump-dot", str(path), "--out", str(folder / "check")],
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"zabref check failed:\n{proc.stdout}\n{proc.stderr}")
    states = int(re.search(r"distinct_states=(\d+)", proc.stdout).group(1))
    return path, wall, states


def parse_sample(path: Path, lines: int, cache_size: int) -> tuple[int, float]:
    """(states, seconds) for parsing the first `lines` lines in this process."""
    parser = NodeParser(cache_size=cache_size)
    states = 0
    with open(path, encoding="utf-8") as f:
        start = time.monotonic()
        for k, line in enumerate(itertools.islice(f, lines), 1):
            states += type(parser.parse_line(line, k)).__name__ == "Node"
    return states, time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="ci")
    ap.add_argument("--graph", type=Path, default=None, help="skip TLC and use this dump (no ratio then)")
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--sample-lines", type=int, default=40000)
    ap.add_argument("--stream", action="store_true", help="also time the streamed pipeline (TLC runs again)")
    ap.add_argument("--chunk-mb", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zabref-bench-") as tmp:
        folder = Path(tmp)
        tlc_wall = None
        if args.graph is None:
            graph, tlc_wall, tlc_states = tlc_dump(args.config, folder)
            print(f"bench: tlc: {tlc_states} states dumped in {tlc_wall:.1f}s = {tlc_states / tlc_wall:.0f} states/s "
                  f"({graph.stat().st_size / 1e6:.0f} MB DOT)")
        else:
            graph = args.graph
        for label, size in (("memoized", 1 << 16), ("unmemoized", 0)):
            states, secs = parse_sample(graph, args.sample_lines, size)
            print(f"bench: one-process line parser, {label} values: {states} states in {secs:.1f}s = "
                  f"{states / secs:.0f} states/s")
        start = time.monotonic()
        from conformance.graph.spark import session

        session(None, {"spark.sql.shuffle.partitions": "4"})
        started = time.monotonic() - start
        summary = run(str(graph), folder / "traces", ROOT / "spec", args.config, partitions=args.partitions,
                      parquet=str(folder / "graph.parquet"))
        stages = ", ".join(f"{name} {secs:.1f}s" for name, secs in summary.stages.items())
        print(f"bench: pipeline stages: {stages}; spark session start {started:.1f}s")
        rate = summary.states / summary.wall
        rate_all = summary.states / (summary.wall + started)
        print(f"bench: pipeline: {summary.states} states in {summary.wall:.1f}s = {rate:.0f} states/s "
              f"({rate_all:.0f} states/s with session start); parse stage alone "
              f"{summary.states / summary.stages['parse']:.0f} states/s")
        if tlc_wall is not None:
            tlc_rate = tlc_states / tlc_wall
            print(f"bench: ratio pipeline/tlc = {rate / tlc_rate:.2f} (with session start {rate_all / tlc_rate:.2f}); "
                  f"parse stage/tlc = {summary.states / summary.stages['parse'] / tlc_rate:.2f}")
        if args.stream:
            lines: list[str] = []

            def echo(line: str) -> None:
                lines.append(line)
                print(line)

            streamed = run(str(folder / "streamed.dot"), folder / "streamed", ROOT / "spec", args.config,
                           partitions=args.partitions, parquet=str(folder / "streamed.parquet"), echo=echo,
                           stream_chunk=args.chunk_mb << 20)
            lag = streamed.wall - streamed.stages["tlc"]
            print(f"bench: streamed: TLC and the pipeline together {streamed.wall:.1f}s (TLC exited after "
                  f"{streamed.stages['tlc']:.1f}s, the traces were written {lag:.1f}s later: bfs "
                  f"{streamed.stages['bfs']:.1f}s, select {streamed.stages['select']:.1f}s, write "
                  f"{streamed.stages['write']:.1f}s, parse after TLC's exit "
                  f"{lag - streamed.stages['bfs'] - streamed.stages['select'] - streamed.stages['write']:.1f}s)")
            if tlc_wall is not None:
                print(f"bench: streamed {streamed.wall:.1f}s against dump then pipeline "
                      f"{tlc_wall + summary.wall:.1f}s ({tlc_wall:.1f} + {summary.wall:.1f}): "
                      f"{(tlc_wall + summary.wall) / streamed.wall:.2f} times as fast")


if __name__ == "__main__":
    main()
