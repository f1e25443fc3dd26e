"""`zabref zk validate`: is a recorded ZooKeeper run a behaviour of spec/Zab.tla? Asked of TLC, from outside.

Theory of operation
-------------------
1. `conformance.zk.observe` turns the recording into observations of sends (and roles, values, what was left out);
2. `conformance.validate.zkmodule` writes module ``VZk`` (EXTENDS Zab) and its config, with the bounds of the run;
3. TLC explores ``VZk`` breadth-first with one worker. A violation of ``NotDone`` is the verdict "a behaviour of the
   spec" (its counterexample the behaviour, ``steps`` long); TLC ending with no violation means no behaviour makes
   every observation, and the last ``zkprogress`` line TLC printed names the state that made the longest prefix of
   them: the next observation is the first the spec cannot take, reported with its connection, direction and byte
   offset, and the servers' states in that state.

The module lives here, in the validate layer, because it uses the TLC machinery of `conformance.validate` and
`conformance.tla`; `conformance.zk` (a layer below) knows nothing of it. The generated files are written to a new
temporary folder ``zabref-zkvalidate-*``, removed when the run validates and kept (named in the report) when it does
not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.tla.labels import read_next
from conformance.tla.values import format_value
from conformance.validate.observed import check_observed, observed_folder
from conformance.validate.zkmodule import config, trace_module
from conformance.zk.observe import Observation, observe_dir

__all__ = ["ZkValidation", "validate_observation", "validate_recording"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
PROGRESS_FIELDS = ("frontier", "rc", "state", "zabState", "leader", "acceptedEpoch", "currentEpoch",
                   "lastCommitted", "history", "msgs")


@dataclass
class ZkValidation:
    recording: str
    servers: int
    observations: int
    txns: int
    ignored: dict[str, int]
    matched: bool = False
    steps: int = 0  # the matching behaviour's length (steps after Init)
    distinct_states: int = 0
    frontier: int = 0  # the first observation no behaviour makes (1-based), when not matched
    failure: str | None = None
    inconclusive: bool = False
    observe_seconds: float = 0.0
    tlc_seconds: float = 0.0
    best: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        left = sum(self.ignored.values())
        return (f"zk validate: servers={self.servers} observations={self.observations} txns={self.txns} "
                f"left-out={left} steps={self.steps} states={self.distinct_states} "
                f"observe={self.observe_seconds:.1f}s tlc={self.tlc_seconds:.1f}s result={self.verdict}")


def _actions() -> list[tuple[str, tuple[str, ...]]]:
    return [(a.name, a.param_names) for a in read_next(SPEC_DIR / "Zab.tla")]


def validate_observation(observation: Observation, *, work: Path | None = None,
                         echo: Callable[[str], None] = lambda s: None) -> ZkValidation:
    """Check ``observation`` with TLC (module docstring); never raises for a departure."""
    result = ZkValidation(observation.recording, observation.servers, len(observation.obs), observation.txns,
                          dict(observation.ignored))
    folder = observed_folder(SPEC_DIR / "Zab.tla", "VZk", trace_module(observation, _actions()), config(observation),
                             "zabref-zkvalidate-", work)
    if not check_observed(result, folder, "VZk", "zkprogress", PROGRESS_FIELDS):
        return result
    result.frontier = int(result.best.get("frontier", 1))
    result.failure = _report(observation, result, folder)
    echo(f"zk validate: {result.distinct_states} states explored, none makes every observation")
    return result


def _report(observation: Observation, result: ZkValidation, folder: Path) -> str:
    g = result.frontier
    best = result.best
    if g > len(observation.obs):
        head = ("every observation is made by some behaviour, but none ends as the run did (every role taken, each "
                "server whose last role ended LOOKING)")
    else:
        o = observation.obs[g - 1]
        head = (f"observation {g} of {len(observation.obs)} is the first the spec cannot take: {o.describe()} from "
                f"{o.sender} to {o.receiver} ({o.name})\n  at {o.where(observation.recording)}, "
                f"t={o.t_ns - observation.obs[0].t_ns:,} ns after the first observation")
    lines = [head, "  in the state that made the longest prefix of the observations:"]
    n = observation.servers
    for s in range(1, n + 1):
        part = [f"{name}={format_value(best[name][s - 1])}" for name in
                ("state", "zabState", "leader", "acceptedEpoch", "currentEpoch", "lastCommitted") if name in best]
        if "history" in best:
            h = best["history"][s - 1]
            part.append(f"history={len(h)} txns" + (f", last {format_value(h[-1]['zxid'])}" if h else ""))
        lines.append(f"    server {s}: " + " ".join(part))
    if "msgs" in best:
        for a in range(1, n + 1):
            for b in range(1, n + 1):
                ch = best["msgs"][a - 1][b - 1]
                if ch:
                    lines.append(f"    in flight {a}->{b}: " + ", ".join(f"{p['type']}{format_value(p['zxid'])}"
                                                                        for p in ch))
    lines.append(f"  the generated module is kept in {folder}")
    return "\n".join(lines)


def validate_recording(folder: str | Path, *, work: Path | None = None,
                       echo: Callable[[str], None] = lambda s: None) -> ZkValidation:
    """Observe ``folder``'s recording and check it (WireError for a recording that does not decode)."""
    started = time.monotonic()
    observation = observe_dir(folder)
    elapsed = time.monotonic() - started
    echo(f"zk validate: {len(observation.obs)} observations of {observation.servers} servers, "
         f"{observation.txns} transactions, left out: "
         + (", ".join(f"{k} {v}" for k, v in sorted(observation.ignored.items())) or "nothing"))
    result = validate_observation(observation, work=work, echo=echo)
    result.observe_seconds = elapsed
    return result
