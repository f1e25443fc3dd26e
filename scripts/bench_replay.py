"""Measure real-process replay: the same traces with servers exec'd per trace, forked per trace, and kept, one run.

Usage: .venv/bin/python scripts/bench_replay.py [--config ci] [--traces FOLDER] [--rounds 1] [--modes exec,forked,kept]
Replays every trace of the folder (default: the ci model's cached action-coverage traces, generated when missing)
one at a time in this process -- one driver -- three ways: ``exec``, new servers per trace started with ``python -m
zabref.cli serve`` (as before the fork server); ``forked``, new servers per trace forked from a zygote
(conformance/replay/forkserver.py); ``kept``, servers forked once and reset between traces (conformance/replay/pool.py,
the default). For each it prints steps, wall, steps/s, mean step time, and CPU milliseconds per step (this process
and its children, the servers included), and steps per CPU second -- the rate per core; then the ratios. Every trace
must pass every way.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from conformance.graph.cache import ensure_traces
from conformance.replay import pool
from conformance.replay.driver import replay_file
from conformance.replay.forkserver import close_fork_servers


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


MODES = {"exec": {"forked": False, "reuse": False}, "forked": {"forked": True, "reuse": False},
         "kept": {"forked": True, "reuse": True}}


def run(files: list[Path], mode: str, rounds: int) -> dict[str, float]:
    wall, cpu = time.perf_counter(), _cpu()
    steps = step_time = 0.0
    for _ in range(rounds):
        for f in files:
            r = replay_file(f, **MODES[mode])
            if not r.passed:
                raise SystemExit(f"{f}: did not pass ({mode}): {r.error or r.failure}")
            steps += r.replayed
            step_time += r.step_time
    pool.close()
    close_fork_servers()  # the zygote's CPU (its children's included) is counted once it is reaped
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    return {"steps": steps, "wall": wall, "rate": steps / wall, "step_ms": 1000 * step_time / steps,
            "cpu_ms": 1000 * cpu / steps, "per_cpu_s": steps / cpu}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="ci")
    p.add_argument("--traces", type=Path, default=None, help="a folder of traces (default: the config's cached ones)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--modes", default=",".join(MODES), help="which of exec, forked, kept to run, in that order")
    a = p.parse_args()
    modes = [m for m in MODES if m in a.modes.split(",")]
    if not modes or set(a.modes.split(",")) - set(MODES):
        p.error(f"--modes takes a comma-separated list of {', '.join(MODES)}")
    folder = a.traces or ensure_traces(a.config)
    files = sorted(folder.rglob("*.jsonl.gz"))
    replay_file(files[0])  # warm the file cache and this process's imports
    pool.close()
    rows = {mode: run(files, mode, a.rounds) for mode in modes}
    for mode, r in rows.items():
        print(f"{mode:6}: {len(files)} traces x {a.rounds}, {r['steps']:.0f} steps, {r['wall']:.2f} s wall, "
              f"{r['rate']:.1f} steps/s, step {r['step_ms']:.2f} ms, {r['cpu_ms']:.1f} CPU-ms/step, "
              f"{r['per_cpu_s']:.0f} steps per CPU-s")
    for mode in [m for m in ("forked", "kept") if m in rows and "exec" in rows]:
        print(f"{mode}/exec: {rows[mode]['rate'] / rows['exec']['rate']:.2f}x steps/s, "
              f"{rows['exec']['cpu_ms'] / rows[mode]['cpu_ms']:.2f}x less CPU per step")


if __name__ == "__main__":
    main()
