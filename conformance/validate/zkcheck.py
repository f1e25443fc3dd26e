"""`zabref zk validate`: is a recorded ZooKeeper run a behaviour of spec/Zab.tla? Asked of TLC, from outside.

Theory of operation
-------------------
1. `conformance.zk.observe` turns the recording into observations of sends (and roles, values, what was left out);
2. `conformance.validate.zkmodule` writes module ``VZk`` (EXTENDS ZabSync: Zab and a client's sync) and its config,
   with the bounds of the run;
3. TLC checks ``VZk`` window by window (`WINDOW` observations each), each window started from the state the one
   before ended in, kept small by conformance/validate/zkrebase.py; a window is searched with the guide first, then
   without it, then from up to `WIDEN` windows back (docs/zookeeper.md, "Windows"). Every window's end reached is
   the verdict "a behaviour of the spec" (``steps`` long: the windows' behaviours are one). A window with no
   behaviour names the first observation the spec cannot take from its start, with its connection, direction and
   byte offset, and the servers' states in the state that made the most; a departure the search without the guide
   could not confirm within its budget is INCONCLUSIVE, saying so.
4. A sync whose proposals are no run of a history (conformance/validate/synccheck.py) is made by no behaviour from
   any state: a search that makes every observation before it names it at once, without the searches further back.

The module lives here, in the validate layer, because it uses the TLC machinery of `conformance.validate` and
`conformance.tla`; `conformance.zk` (a layer below) knows nothing of it. The generated files are written to a new
temporary folder ``zabref-zkvalidate-*``, removed when the run validates and kept (named in the report) when it does
not.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.tla.datafile import DataFile
from conformance.tla.labels import ActionSignature, module_next
from conformance.tla.output import TLCMessage
from conformance.tla.overrides import MODULES, classes
from conformance.tla.tools import SEARCH, Outcome, Toolchain, run_tlc, toolchain
from conformance.tla.valueparse import parse_value
from conformance.tla.values import format_value
from conformance.validate.observed import last_progress, observed_folder, printed
from conformance.validate.synccheck import Hole, first_hole
from conformance.validate.zkrebase import Rebase, plan, rebase, restore
from conformance.validate.zkmodule import (RUN_DATA, WINDOW_DATA, config, goal, reach, run_data, trace_module,
                                           window_data)
from conformance.zk import earlyack
from conformance.zk.knownbugs import at_departure, sightings, summarise
from conformance.zk.observe import Observation, observe_dir_decoded
from conformance.zk.wire import Decoded

__all__ = ["WIDEN", "WINDOW", "ZkValidation", "validate_observation", "validate_recording"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
#: The module VZk extends: Zab.tla with a client's sync (REQUEST and SYNC).
SYNC_MODULE = "ZabSync.tla"
PROGRESS_FIELDS = ("frontier", "rc", "state", "zabState", "leader", "acceptedEpoch", "currentEpoch",
                   "lastCommitted", "history", "msgs")
#: Observations a window holds (docs/zookeeper.md, "Windows": measured), and how many windows back a window that
#: finds no behaviour is checked again from.
WINDOW = 400
WIDEN = 2
#: The guide's lag for three servers; a run of N servers gets LAG * (N - 1) / 2 (`lag_for`).
LAG = 20
#: How far past the first place not made a guided step's observations may be, in the guide's second try: one
#: process's sends to two learners in two steps (two syncs answered at one COMMIT) may be read in either order.
SLACK = 4
#: The most distinct states one search may explore: with the guide, and without it.
BUDGET_GUIDED = 100_000
BUDGET = 200_000


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
    windows: int = 0  # windows checked (a window checked again from further back counts once)
    runs: int = 0  # TLC runs (a window checked again counts each time)
    exact: bool = True  # a departure found from Init (False: from a window's start, `WIDEN` windows back at most)
    inexact: int = 0  # windows checked again without dropping (a state broke the window's coordinates)
    dropped: int = 0  # the most transactions a window's coordinates left out of each history
    named: list[str] = field(default_factory=list)  # the known ZooKeeper bugs the departure's order is (JIRA ids)

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        left = sum(self.ignored.values())
        return (f"zk validate: servers={self.servers} observations={self.observations} txns={self.txns} "
                f"left-out={left} windows={self.windows} tlc-runs={self.runs} dropped={self.dropped} "
                f"inexact={self.inexact} steps={self.steps} "
                f"states={self.distinct_states} observe={self.observe_seconds:.1f}s tlc={self.tlc_seconds:.1f}s "
                f"result={self.verdict}")


def _actions() -> list[ActionSignature]:
    """ZabSync.tla's SyncNext: Zab.tla's actions, each with SyncsDropped (its ZabStep), and ZabSync's own."""
    return module_next(SPEC_DIR / SYNC_MODULE, "SyncNext")


@dataclass
class _Run:
    end: dict[str, Any] | None  # the state the window ended in (the run's coordinates), or None: no state got there
    values: int  # transactions proposed before the end
    steps: int
    states: int
    seconds: float
    printed: list[str]
    error: str | None = None
    budget_hit: bool = False
    inexact: bool = False  # a state broke the window's coordinates: checked again without dropping
    dropped: int = 0  # transactions the window's coordinates left out of each history
    rb: Rebase | None = None  # the window's coordinates


def _in_run(best: dict[str, Any], rb: Rebase | None) -> dict[str, Any]:
    """The fields of a window's state that the report prints (`PROGRESS_FIELDS`), in the run's coordinates."""
    if rb is None or not rb.d:
        return best
    back = restore(best, rb)
    return {k: back[k] for k in best}


@dataclass
class _Start:
    window: int  # the window it starts (0-based)
    state: dict[str, Any] | None  # the run's coordinates; None: Init
    steps: int  # the behaviour's steps before it
    values: int  # transactions proposed before it


def _window(folder: Path, tools: Toolchain, observation: Observation, start: _Start, span: tuple[int, int],
            counts: list[list[int]], cap: list[list[int]], *, final: bool, lag: int, exempt: int,
            slack: int = 0, drop: bool = True) -> _Run:
    """One TLC run: from ``start`` to the first state that made ``counts`` sends (``final``: the whole run, every role
    taken), none past ``cap``; guided when ``lag`` > 0; in coordinates that drop what the window cannot read
    (conformance/validate/zkrebase.py) when ``drop``. ``span``: the observations its sends may be (lo, hi]."""
    n = observation.servers
    if start.state is None:
        rb, anchor, text = Rebase(n, [], -1, 0, 0), None, None
    else:
        rb, anchor = plan(start.state, observation, *span, start.values) if drop else (
            Rebase(n, [], -1, 0, start.values), None)
        text = format_value(rebase(start.state, rb))
    data = DataFile(WINDOW_DATA)
    budget = BUDGET_GUIDED if lag else BUDGET
    for line in window_data(text, counts, cap, final=final, lag=lag, slack=slack, exempt=exempt, budget=budget,
                            coords=rb.window_fields(anchor)):
        data.add(line)
    data.write(folder)
    lines: list[str] = []

    def on_message(msg: TLCMessage) -> None:
        if msg.code == 0:
            lines.extend(msg.text.splitlines())

    started = time.monotonic()
    tlc = run_tlc(folder / "VZk.tla", folder / "VZk.cfg", workers=1, extra_args=("-deadlock",),
                  on_message=on_message, tools=tools, classpath=[classes(tools)], jvm_options=SEARCH)
    seconds = time.monotonic() - started
    whole = printed(lines, "zkend", last=False)  # <<"zkend", state>>
    end_text = None if whole is None else whole[whole.index(",") + 1:-2].strip()
    end, values = None, start.values
    if end_text is not None:
        reached = parse_value(end_text, f"TLC's end of window (kept: {folder})")
        values += len(reached["proposed"]["$set"])
        end = restore(reached, rb)
    error = None if tlc.outcome is Outcome.OK or end is not None else f"{tlc.result_text()}: {tlc.message}"
    inexact = end is None and any('"zkinexact"' in line for line in lines)
    hit = end is None and any('"zkbudget"' in line for line in lines)
    return _Run(end, values, max((tlc.depth or 1) - 1, 0), tlc.distinct_states or 0, seconds, lines, error, hit,
                inexact, rb.d, rb)


def lag_for(servers: int) -> int:
    """The guide's lag for a run of ``servers``: a leader's step sends on each learner's connection, and the proxy
    reads a connection's batch of PROPOSALs before the next one's, so the observations of one step lie up to a batch
    per other learner apart (five servers' first proposals: 8 a connection, the same step's sends 24 apart)."""
    return LAG * max(1, servers - 1) // 2


def validate_observation(observation: Observation, *, work: Path | None = None,
                         echo: Callable[[str], None] = lambda s: None, window: int = WINDOW,
                         widen: int = WIDEN, lag: int | None = None) -> ZkValidation:
    """Check ``observation`` with TLC in windows of ``window`` observations (docs/zookeeper.md, "Windows"); never
    raises for a departure. ``lag``: the guide's (None: `lag_for` the run's servers; 0: no guide)."""
    lag = lag_for(observation.servers) if lag is None else lag
    result = ZkValidation(observation.recording, observation.servers, len(observation.obs), observation.txns,
                          dict(observation.ignored))
    tools = toolchain()
    folder = observed_folder(SPEC_DIR / "Zab.tla", "VZk", trace_module(observation, _actions()),
                             config(observation), "zabref-zkvalidate-", work)
    for module in (SPEC_DIR / SYNC_MODULE, *MODULES):
        shutil.copy(module, folder / module.name)
    run = DataFile(RUN_DATA)
    for line in run_data(observation):
        run.add(line)
    run.write(folder)
    total = len(observation.obs)
    bounds = [*range(window, total, window), total]
    # the starts of the last windows, kept to check a window again from further back
    starts: deque[_Start] = deque([_Start(0, None, 0, 0)], maxlen=widen + 1)
    exempt = 0  # the guide leaves alone packets of observations up to this one (in flight after an unguided window)
    # the first observation no behaviour makes from any state (a sync whose proposals skip a counter, an ACK before
    # the ACK of NEWLEADER), or None
    holes = [h for h in (first_hole(observation), earlyack.first(observation)) if h is not None]
    hole = min(holes, key=lambda h: h.g) if holes else None
    for k, upto in enumerate(bounds):
        final = k == len(bounds) - 1
        hi = min(total, upto + window)
        counts, cap = goal(observation, upto), reach(observation, hi)
        # the guided search from this window's start, in the places' order and then with SLACK; then every
        # behaviour from it; then from further back
        guided = [(starts[-1], lag, slack) for slack in dict.fromkeys((0, SLACK))] if lag else []
        tries = guided + [(st, 0, 0) for st in reversed(starts)]
        missed: list[tuple[_Run, int, int]] = []  # the tries that found no behaviour: (run, start window, guide)
        settled = False  # a try made every observation before the hole: no other try can make the hole
        for start, guide, slack in tries:
            at = start.window
            span = (bounds[at - 1] if at else 0, hi)
            r = _window(folder, tools, observation, start, span, counts, cap, final=final, lag=guide,
                        slack=slack, exempt=exempt)
            if r.inexact:
                result.runs += 1
                result.inexact += 1
                result.tlc_seconds += r.seconds
                r = _window(folder, tools, observation, start, span, counts, cap, final=final, lag=guide,
                            slack=slack, exempt=exempt, drop=False)
            result.runs += 1
            result.tlc_seconds += r.seconds
            result.distinct_states += r.states
            if r.end is not None or r.error is not None:
                break
            missed.append((r, at, guide))
            reached = last_progress(r.printed, "zkprogress", ("frontier",)).get("frontier", "?")
            if hole is not None and reached == hole.g:
                settled = True
                echo(f"zk validate: window {k + 1} made every observation before {hole.g}, {hole.what}, which no "
                     "behaviour makes")
                break
            if r.budget_hit and not guide:  # a search from further back would explore more still
                break
            echo(f"zk validate: window {k + 1} from window {at + 1}'s start"
                 f"{f' with the guide (slack {slack})' if guide else ''} found no behaviour"
                 f"{f' within {BUDGET_GUIDED if guide else BUDGET:,} states' if r.budget_hit else ''} "
                 f"(none made observation {reached}): checked again")
        result.windows = k + 1
        if r.error is not None:
            result.inconclusive = True
            result.failure = f"TLC did not finish window {k + 1} ({r.error})\n  kept: {folder}"
            return result
        if r.end is None:
            result.inconclusive = not settled and any(m.budget_hit for m, _, _ in missed)
            # reported: the search that reached the hole; else the furthest that explored everything it could
            # reach; else the guided one
            r, at, guide = missed[-1] if settled else next(
                ((m, a, g) for m, a, g in reversed(missed) if not m.budget_hit), missed[0])
            result.best = _in_run(last_progress(r.printed, "zkprogress", PROGRESS_FIELDS), r.rb)
            result.frontier = int(result.best.get("frontier", 1))
            result.exact = settled or at == 0 and not guide and not result.inconclusive
            result.failure = _report(observation, result, folder, at, bounds[at - 1] if at else 0, guide,
                                     hole if settled else None)
            return result
        if hole is not None and hole.g <= upto:
            result.inconclusive = True
            result.failure = (f"TLC made observation {hole.g}, {hole.what}, which no behaviour makes by "
                              f"{hole.premise}: the spec or that reading of it is wrong\n  kept: {folder}")
            return result
        if not guide:
            exempt = upto
        while starts[-1].window > start.window:  # a start the window could not go on from is not gone back to
            starts.pop()
        starts.append(_Start(k + 1, r.end, start.steps + r.steps, r.values))
        result.dropped = max(result.dropped, r.dropped)
        result.steps = start.steps + r.steps
        if not final:
            echo(f"zk validate: {upto} of {total} observations made ({k + 1} windows, {result.tlc_seconds:.0f} s of "
                 f"TLC, {result.distinct_states:,} states; the last from {r.dropped} dropped transactions)")
    result.matched = True
    shutil.rmtree(folder, ignore_errors=True)
    return result


def _report(observation: Observation, result: ZkValidation, folder: Path, at: int, after: int, guide: int,
            hole: Hole | earlyack.EarlyAck | None = None) -> str:
    """The departure: the first observation no behaviour made, checked from window ``at``'s start (0: Init), which
    follows observation ``after``, with the guide (``guide`` > 0) or without; ``hole``: it is an observation no
    behaviour makes from any state (conformance/validate/synccheck.py, conformance/zk/earlyack.py), reached with
    every observation before it made."""
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
    where = ("from the spec's Init: no behaviour of the spec makes the observations up to it" if at == 0 else
             f"from the state the behaviour found for the observations before window {at + 1} reached (window "
             f"{at + 1} starts after observation {after}); another behaviour of those might "
             "still go on")
    how = (f"; by the guided search (lag {guide}): the search without the guide stopped at its budget of "
           f"{BUDGET:,} states, so this is not proven" if guide else "")
    checked = f"  checked {where}{how}"
    if hole is not None:
        checked = (f"  a behaviour of the spec makes every observation before it (window {at + 1}'s search found it), "
                   f"and none makes it: {hole.why()}")
    lines = [head, checked, "  in the state that made the longest prefix of the observations:"]
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
                       echo: Callable[[str], None] = lambda s: None,
                       observed: tuple[Decoded, Observation] | None = None) -> ZkValidation:
    """Observe ``folder``'s recording and check it (WireError for a recording that does not decode). ``observed``:
    what `observe_dir_decoded` gave for it already (`zabref zk validate` decodes once for both of its checks)."""
    started = time.monotonic()
    decoded, observation = observed if observed is not None else observe_dir_decoded(folder)
    elapsed = time.monotonic() - started
    echo(f"zk validate: {len(observation.obs)} observations of {observation.servers} servers, "
         f"{observation.txns} transactions, left out: "
         + (", ".join(f"{k} {v}" for k, v in sorted(observation.ignored.items())) or "nothing"))
    result = validate_observation(observation, work=work, echo=echo)
    result.observe_seconds = elapsed
    order = earlyack.name(observation, result.frontier) if result.failure else None
    if order is not None:
        result.named += [order[0]] if order[0] else []
        result.failure = f"{result.failure}\n  the departure's order: {order[1]}"
    found = sightings(folder) if result.failure else []
    if found:
        # what the servers logged themselves, to decide the departure by (docs/zookeeper.md, "Known bugs")
        result.failure += "\n  known bugs in the servers' own logs:" + "".join(f"\n    {k}" for k in summarise(found))
        meta = decoded.recording.meta
        if result.frontier and "started_wall" in meta and "started_ns" in meta:
            o = observation.obs[min(result.frontier, len(observation.obs)) - 1]
            wall = meta["started_wall"] + (o.t_ns - meta["started_ns"]) / 1e9
            result.failure += "".join(f"\n  at the departure: {k}" for k in at_departure(found, o.sender, wall))
    return result
