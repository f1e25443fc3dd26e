"""Measure the simulator's speed: checked runs of N steps per minute on W worker processes (docs/simulation.md).

Usage: .venv/bin/python scripts/bench_sim.py [--runs 100] [--steps 1000] [--workers 2] [--servers 3]
Prints runs/minute, steps/run, steps/second and CPU seconds per run (swarm faults, spec invariants after every step).
"""

from __future__ import annotations

import argparse
import os
import time

from conformance.sim import Options
from conformance.sim.seeds import run_seeds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    a = p.parse_args()
    options = Options(servers=a.servers, steps=a.steps)
    wall, cpu = time.perf_counter(), os.times()
    rows = run_seeds(range(a.first_seed, a.first_seed + a.runs), options, a.workers)
    wall = time.perf_counter() - wall
    t = os.times()
    cpu_s = (t.children_user + t.children_system + t.user + t.system) - (cpu.children_user + cpu.children_system
                                                                         + cpu.user + cpu.system)
    steps = sum(r["steps"] for r in rows)
    failed = [r["seed"] for r in rows if not r["ok"]]
    print(f"{a.runs} runs x {a.steps} steps, {a.servers} servers, {a.workers} workers: {wall:.1f} s wall, "
          f"{60 * a.runs / wall:.0f} runs/min, {steps / a.runs:.0f} steps/run, {steps / wall:.0f} steps/s, "
          f"{cpu_s / a.runs:.2f} CPU s/run; failed seeds: {failed or 'none'}")


if __name__ == "__main__":
    main()
