"""Election notifications of a ZooKeeper run held against spec/FastLeaderElection.tla, from outside.

Theory of operation
-------------------
The proxy sees what each server's QuorumCnxManager put on the wire (`conformance.zk.elections`); module ``VFle``
(`conformance.validate.flemodule`) is FastLeaderElection with what ZooKeeper's transport, threads and Zab add, and
TLC searches it for a behaviour that sends those notifications in the proxy's order.

**Windows.** A fault run's elections are many (333 notifications in 18 rounds in a 60 s run), and one search of them
all grows with what may wait in the send queues (docs/zookeeper.md, "Fault runs' elections"). The run is cut where
nothing crossed any election connection for `QUIET_MS` (finalizeWait is 200 ms; between two elections the servers
are quiet for seconds), and each window is searched from the last state of the behaviour found for the windows
before it (`conformance.validate.flemodule.Span`), so the behaviours of the windows are one behaviour of the run. A
window is searched with the guide from its start, then with the guide from up to `WIDEN` windows back (a
notification a fault held may cross in a later window than the one that queued it, and the start found for the
window may not have queued it), then without the guide from the same starts, latest first; the first search that
makes the window's notifications ends it. Only a search without the guide that finds no behaviour is a departure, and
it is proven when it started at Init (``exact``); from a later start another behaviour of the notifications before
might still go on, and the report says so. A search without the guide that stops at its budget ends the window:
INCONCLUSIVE (one from further back explores more still).

The generated folder of each search is removed, but that of the search a verdict other than a behaviour is taken
from, which the report names.
"""

from __future__ import annotations

import shutil
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from conformance.tla.values import format_value
from conformance.validate.flemodule import PROGRESS_FIELDS, WIDENINGS, Span, fle_config, fle_module
from conformance.validate.observed import check_observed, observed_folder
from conformance.zk.elections import Elections, elections_dir

__all__ = ["FleValidation", "validate_elections", "validate_elections_dir", "windows"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
#: The most distinct states one search explores, and the most seconds it runs (TLCGet("duration")); a search that
#: stops at either has no verdict. A whole fault run's elections can take the guided search hours (docs/zookeeper.md,
#: "Fault runs' elections"): the seconds bound what `zabref zk validate` spends on them.
BUDGET = 2_000_000
BUDGET_SECONDS = 600
#: A gap between two notifications longer than this (ms) ends a window; and how many windows back a window that
#: finds no behaviour from its start is searched again from.
QUIET_MS = 1000
MOST = 20
WIDEN = 2


@dataclass
class FleValidation:
    recording: str
    servers: int
    notifications: int
    after_end: int
    matched: bool = False
    steps: int = 0
    distinct_states: int = 0
    frontier: int = 0
    failure: str | None = None
    inconclusive: bool = False
    tlc_seconds: float = 0.0
    best: dict[str, Any] = field(default_factory=dict)
    runs: int = 0  # TLC runs: every window's, each from where it started, with the guide and without
    guided: bool = False  # the verdict is the guided searches' (every window's; only a match is taken from them)
    guided_frontier: int = 0  # where the furthest guided search that found no behaviour stopped (0: none did)
    windows: int = 0  # windows searched (the last one is where a departure was found)
    rechecked: int = 0  # windows made only by a search from an earlier window's start
    exact: bool = True  # a departure found from Init (False: from a later window's start)
    unread: int = 0  # notifications left out: they crossed after their receiver closed the connection

    @property
    def verdict(self) -> str:
        return "ok" if self.matched else "INCONCLUSIVE" if self.inconclusive else "FAILED"

    def line(self) -> str:
        return (f"zk validate (election): servers={self.servers} notifications={self.notifications} "
                f"after-end={self.after_end} unread={self.unread} windows={self.windows} rechecked={self.rechecked} "
                f"steps={self.steps} states={self.distinct_states} tlc-runs={self.runs} tlc={self.tlc_seconds:.1f}s "
                f"result={self.verdict}")


def windows(el: Elections, quiet_ms: int = QUIET_MS, most: int = MOST) -> list[int]:
    """The last notification of each window: where the next one crossed more than ``quiet_ms`` later, and a window
    of more than ``most`` notifications cut again where its longest gap is, until none is longer."""
    ns = el.notices
    gap = [0] + [ns[k].t_ns - ns[k - 1].t_ns for k in range(1, len(ns))]  # gap[k]: before notification k + 1
    ends = [k for k in range(1, len(ns)) if gap[k] > quiet_ms * 1_000_000] + ([len(ns)] if ns else [])
    out: list[int] = []
    todo = [(lo, hi) for lo, hi in zip([0, *ends], ends)]
    while todo:
        lo, hi = todo.pop(0)
        if hi - lo <= most:
            out.append(hi)
            continue
        cut = max(range(lo + 1, hi), key=lambda k: gap[k])  # the window ends before notification cut + 1
        todo[:0] = [(lo, cut), (cut, hi)]
    return out


@dataclass
class _Search:
    """One TLC run of one window's notifications from one start (the fields `check_observed` fills)."""

    span: Span
    start: int  # the window it started at (0: Init)
    guided: bool
    matched: bool = False
    steps: int = 0
    distinct_states: int = 0
    inconclusive: bool = False
    failure: str | None = None
    tlc_seconds: float = 0.0
    best: dict[str, Any] = field(default_factory=dict)
    end: tuple[tuple[str, str], ...] = ()
    folder: Path = Path()

    @property
    def frontier(self) -> int:
        return int(self.best.get("next", self.span.lo + 1))


@dataclass
class _Start:
    window: int  # the window it starts (0-based)
    span_lo: int  # the notifications before it
    state: tuple[tuple[str, str], ...]  # () : Init
    steps: int  # the behaviour's steps before it


def _search(el: Elections, start: _Start, hi: int, guided: bool, widenings: tuple[str, ...],
            work: Path | None) -> _Search:
    span = Span(start.span_lo, hi, start.state)
    s = _Search(span, start.window, guided)
    module = fle_module(el, span, budget=(BUDGET, BUDGET_SECONDS), widenings=widenings, guided=guided)
    s.folder = observed_folder(SPEC_DIR / "FastLeaderElection.tla", "VFle", module, fle_config(el, span),
                               "zabref-flevalidate-", work)
    s.end = check_observed(s, s.folder, "VFle", "fleprogress", PROGRESS_FIELDS)
    return s


def validate_elections(el: Elections, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                       echo: Callable[[str], None] = lambda s: None, guide: bool = True,
                       quiet_ms: int = QUIET_MS, most: int = MOST, widen: int = WIDEN) -> FleValidation:
    """Check ``el``'s notifications with TLC, window by window (module docstring); never raises for a departure.
    ``guide``: search with the guide first; ``quiet_ms`` and ``most``: where windows end (`windows`; a gap and a
    count larger than the run's: the whole run in one window)."""
    result = FleValidation(el.recording, el.servers, len(el.notices), el.after_end, unread=el.unread)
    bounds = windows(el, quiet_ms, most)
    starts: deque[_Start] = deque([_Start(0, 0, (), 0)], maxlen=widen + 1)
    for k, hi in enumerate(bounds):
        result.windows = k + 1
        back = list(reversed(starts))
        tries = ([(st, True) for st in back] if guide else []) + [(st, False) for st in back]
        missed: list[_Search] = []
        found = None
        for st, guided in tries:
            s = _search(el, st, hi, guided, widenings, work)
            result.runs += 1
            result.tlc_seconds += s.tlc_seconds
            result.distinct_states += s.distinct_states
            if s.matched:
                found = s
                break
            if s.failure is not None and not s.best:  # TLC did not finish: no verdict
                result.inconclusive, result.failure = True, s.failure
                return result
            missed.append(s)
            if s.inconclusive and not guided:  # a search from further back would explore more still
                break
            echo(f"zk validate (election): window {k + 1} (notifications {st.span_lo + 1}-{hi}) from "
                 f"{_where(st.window, st.span_lo)}{' with the guide' if guided else ''}: {s.distinct_states:,} "
                 f"states, none makes notification {s.frontier}"
                 f"{f' (stopped at its budget, {_budget()})' if s.inconclusive else ''}")
        if found is None:
            return _departed(el, result, missed)
        for m in missed:  # kept only for a verdict that is not a behaviour
            shutil.rmtree(m.folder, ignore_errors=True)
        while starts[-1].window > found.start:  # a start the window could not go on from is not gone back to
            starts.pop()
        result.steps = next(st.steps for st in starts if st.window == found.start) + found.steps
        result.guided = found.guided and (k == 0 or result.guided)
        result.rechecked += found.start != k
        starts.append(_Start(k + 1, hi, found.end, result.steps))
        if hi < len(el.notices):
            echo(f"zk validate (election): {hi} of {len(el.notices)} notifications made ({k + 1} windows, "
                 f"{result.tlc_seconds:.0f} s of TLC, {result.distinct_states:,} states)")
    result.matched = True
    return result


def _where(window: int, lo: int) -> str:
    return "Init" if window == 0 else f"window {window + 1}'s start (after notification {lo})"


def _departed(el: Elections, result: FleValidation, missed: list[_Search]) -> FleValidation:
    """No search made the window: the verdict is the furthest-back search without the guide that explored all it
    could reach, else the last without the guide (at its budget: INCONCLUSIVE), else the first guided one."""
    bare = [s for s in missed if not s.guided]
    pick = next((s for s in reversed(bare) if not s.inconclusive), bare[-1] if bare else missed[0])
    guided = [s.frontier for s in missed if s.guided]
    result.best, result.frontier = pick.best, pick.frontier
    result.guided_frontier = max(guided, default=0)
    result.guided = pick.guided
    result.inconclusive = pick.inconclusive or pick.guided
    result.exact = pick.start == 0 and not pick.guided
    result.failure = _report(el, result, pick)
    for m in missed:  # the report names the one kept
        if m is not pick:
            shutil.rmtree(m.folder, ignore_errors=True)
    return result


def _budget() -> str:
    return f"{BUDGET:,} distinct states or {BUDGET_SECONDS:,} s of TLC, whichever came first"


def _report(el: Elections, result: FleValidation, pick: _Search) -> str:
    g, best = result.frontier, result.best
    n = el.notices[g - 1] if 0 < g <= len(el.notices) else None
    where = ("from Init: no behaviour of the spec sends the notifications up to it" if pick.start == 0 else
             f"from the state the behaviour found for the notifications before window {pick.start + 1} reached "
             f"(after notification {pick.span.lo}); another behaviour of those might still go on")
    lines = [f"notification {g} of {len(el.notices)} is the first FastLeaderElection.tla cannot send: "
             + (f"{n.describe()} from {n.sender} to {n.receiver}\n  at {n.where(el.recording)}" if n else "?"),
             f"  checked {where}{' (by the guided search alone)' if pick.guided else ''}",
             "  in the state that sent the longest prefix of them:"]
    for s in range(1, el.servers + 1):
        part = [f"{k}={format_value(best[k][s - 1])}"
                for k in ("state", "logicalclock", "proposedVote", "dataZxid", "dataEpoch", "down") if k in best]
        lines.append(f"    server {s}: " + " ".join(part))
    if "electionMsgs" in best:
        for a in range(1, el.servers + 1):
            for b in range(1, el.servers + 1):
                ch = best["electionMsgs"][a - 1][b - 1]
                if ch:
                    wire = len(best["wire"][a - 1][b - 1])
                    lines.append(f"    {a}->{b}: {len(ch)} notifications, {wire} on the wire; queued: "
                                 + ", ".join(f"{m['state']}({m['leader']})" for m in ch[wire:]))
    if pick.inconclusive:
        lines.append(f"  not proven: the search stopped at its budget ({_budget()})")
    gf = result.guided_frontier
    if not pick.guided and g < gf <= len(el.notices):
        lines.append(f"  the search with the guide went further and found no behaviour that sends notification {gf}: "
                     f"{el.notices[gf - 1].describe()} from {el.notices[gf - 1].sender} to "
                     f"{el.notices[gf - 1].receiver}")
    lines.append(f"  the generated module is kept in {pick.folder}")
    return "\n".join(lines)


def validate_elections_dir(folder: str | Path, *, widenings: tuple[str, ...] = WIDENINGS, work: Path | None = None,
                           echo: Callable[[str], None] = lambda s: None) -> FleValidation:
    """The notifications of ``folder``'s recording checked (WireError for a recording that does not decode)."""
    return validate_elections(elections_dir(folder), widenings=widenings, work=work, echo=echo)
