"""Seeds run and checked: one seed, or a range of them on worker processes.

Theory of operation: a run is a pure function of its seed and options (`conformance.sim.simulate`), checked after
every step by `conformance.sim.invariants.SpecInvariants`; `summary` is its result as one row, and `run_seeds` the
rows of a range in seed order, split over processes without changing a single row. ``zabref simulate``
(`conformance.sim.command`) and its Spark campaign (`conformance.sim.campaign`) both run seeds through here.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from typing import Any

from conformance.sim import Observer, Options, Result, simulate
from conformance.sim.fle_invariants import ElectionInvariants
from conformance.sim.invariants import SpecInvariants
from conformance.sim.validation import ActionValidation

__all__ = ["run_seed", "summary", "run_seeds"]


def run_seed(seed: int, options: Options) -> Result:
    """One checked run: the simulator with the invariants of spec/Zab.tla and spec/FastLeaderElection.tla, and with
    ``options.validate`` its action logs validated against spec/Zab.tla by TLC at the end."""
    observers: list[Observer] = [SpecInvariants(), ElectionInvariants()]
    if options.validate:
        observers.append(ActionValidation())
    return simulate(seed, options, observers)


def summary(seed: int, options: Options) -> dict[str, Any]:
    """One checked run, as the row a campaign collects: seed, verdict, failure, steps, digest, replay command."""
    r = run_seed(seed, options)
    return {"seed": seed, "ok": r.ok, "failure": r.failure, "steps": r.steps, "digest": r.digest,
            "replay": r.replay}


def run_seeds(seeds: range, options: Options, workers: int = 1, *, until_failure: bool = False) -> list[dict[str, Any]]:
    """Every seed's summary, in seed order (``until_failure``: stop after the batch holding the first failure)."""
    if workers <= 1:
        rows = []
        for s in seeds:
            rows.append(summary(s, options))
            if until_failure and not rows[-1]["ok"]:
                break
        return rows
    batch = 4 * workers if until_failure else len(seeds)
    rows = []
    with ProcessPoolExecutor(workers) as pool:
        for start in range(0, len(seeds), batch):
            part = seeds[start: start + batch]
            rows += pool.map(summary, part, [options] * len(part), chunksize=max(1, len(part) // (8 * workers)))
            if until_failure and not all(row["ok"] for row in rows):
                break
    return rows
