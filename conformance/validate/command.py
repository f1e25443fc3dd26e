"""`zabref validate LOGDIR`: check with TLC that the servers' action logs are a behaviour of spec/Zab.tla.

Theory of operation
-------------------
Trace validation as etcd's raft and CCF do it, for TLC 2.15 (no IOUtils, no Json module, no action composition):

1. `conformance.validate.actionlogs` reads ``LOGDIR/actions-<sid>.jsonl`` (every line checked; a torn last line
dropped);
2. `conformance.validate.merge` orders every server's lines into ONE behaviour, numbering the client values as the spec
does;
3. `trace_module` writes a module ``VZab`` that EXTENDS Zab and reads that behaviour's records from a data file
   beside it, one a line (``Rec(l)``: ZabrefData's ``Datum``, conformance/tla/datafile.py; TLC's parser never reads
   them), with a cursor variable ``l``. Its next-state relation is: the ``l``-th record's action with
   its parameters (a ``Check`` record: no action) AND the record's constraints on the state after it: the acting
   server's variables as its line logged them, the packet it took at the head of its channel, the packets it sent
   appended to its channels. Everything else -- the other servers, ``proposed``, ``committed``, ``established``,
   ``faults`` -- is left to TLC. The history is constrained by its length and last transaction (the whole of it after a
   SNAP), which with the step's own semantics pins it down, and keeps the module linear in the log's length;
4. With ``--window 0``, TLC explores it breadth-first from the spec's Init (every server starts from an empty data
   dir) with ``-deadlock``: the behaviour is matched when the search reaches depth ``len + 1``; otherwise the deepest
   state reached says which record no spec step could take, and `diagnose` shows, for that record, what the spec
   allows beside what the log says.
5. By default (`_validate_windows`) the merge hands its steps to `conformance.validate.chain.Cutter`, which cuts
   them into windows of ``--window`` steps, each starting from the state the logs give at its first step, its
   histories rebased; `conformance.validate.windows` checks them, several per TLC run, in a process pool or on
   Spark, while the merge goes on. A window whose end state is not the next one's start is checked again joined with
   the next; one whose rebasing TLC found inexact, again without it; the first window that fails decides, and is
   reported as step 4 reports (docs/validation.md, "Windows", says why this is the whole check's verdict).

Bounds: the validation model sets MaxEpoch, MaxTxns and MaxFaults far above what any logged run reaches, so only the
protocol's own guards decide (a fault is any step the spec counts as one: a timeout of a live connection, a stale
election decision, a crash). Measured speed: docs/performance.md.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import click

from conformance.errors import ConformanceError, InputError, Location, MergeError
from conformance.tla.datafile import DataFile
from conformance.tla.overrides import MODULES, classes
from conformance.tla.labels import read_next
from conformance.tla.tools import Outcome, run_tlc, toolchain
from conformance.tla.values import format_value
from conformance.validate.actionlogs import read_logs
from conformance.validate.chain import Cutter, Plan, record, spec_files
from conformance.validate.chain import config as chain_config
from conformance.validate.chain import helpers as chain_helpers
from conformance.validate.chain import PER_SERVER, PLACE, STEP, VARIABLES
from conformance.validate.merge import Behaviour, SpecStep, merge, state_before, step_at
from conformance.validate.windows import (DATA, BatchOutcome, Window, batch_module, check_batch, check_batches,
                                         cpu_workers, write_batch)

__all__ = ["ValidationResult", "trace_module", "validate", "validate_command"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
BIG = 1_000_000_000


@dataclass
class ValidationResult:
    logdir: str
    servers: int
    lines: int  # lines read
    steps: int  # spec steps (and checks) in the merged behaviour
    matched: int  # how many of them TLC matched
    unlogged: int
    notes: list[str] = field(default_factory=list)
    failure: str | None = None
    inconclusive: bool = False  # TLC did not finish the check: no verdict on the logs
    merge_seconds: float = 0.0
    tlc_seconds: float = 0.0  # TLC's wall time, summed over its runs (they may run side by side)
    wall_seconds: float = 0.0
    windows: int = 0  # 0: the whole behaviour in one run
    tlc_runs: int = 0
    states: int = 0
    passes: int = 0
    rechecked: int = 0  # windows checked again (joined with the next, without rebasing, or for their own verdict)
    whole: int = 0  # TLC runs of a batch checked again with whole states fingerprinted (windows.check_batch)

    @property
    def passed(self) -> bool:
        return self.failure is None and self.matched == self.steps

    def line(self) -> str:
        wall = self.wall_seconds or (self.merge_seconds + self.tlc_seconds)
        rate = self.steps / wall if self.steps and wall else 0.0
        windows = (f"windows={self.windows} tlc_runs={self.tlc_runs} whole={self.whole} rechecked={self.rechecked} "
                   if self.windows else "")
        return (f"validate: servers={self.servers} lines={self.lines} steps={self.steps} matched={self.matched} "
                f"unlogged={self.unlogged} {windows}merge={self.merge_seconds:.1f}s tlc={self.tlc_seconds:.1f}s "
                f"wall={wall:.1f}s steps/s={rate:.0f} result={self.verdict}")

    @property
    def verdict(self) -> str:
        return "ok" if self.passed else "INCONCLUSIVE" if self.inconclusive else "FAILED"


def trace_module(behaviour: Behaviour, actions: list[tuple[str, tuple[str, ...]]]) -> tuple[str, DataFile]:
    """The text of module VZab, the whole behaviour from Init (module docstring), and its data file (a record a
    line, read with ZabrefData's Datum: conformance/tla/datafile.py); ``actions``: Next's actions with their
    parameter names. The records and the step formula are a window's (conformance/validate/chain.py)."""
    data = DataFile(DATA)
    for s in behaviour.steps:
        data.add(record(s, behaviour.n))
    return f"""---------------------------- MODULE VZab ----------------------------
\\* Generated by conformance/validate/command.py from servers' action logs: one record a merged step, read from
\\* {DATA}. Do not edit.
EXTENDS Zab, ZabrefData, ZabrefSeq, TLC
VARIABLE l

{chain_helpers(actions)}

Rec(k) == Datum("{DATA}", k)
Steps == {len(data.lines)}

TraceInit == Init /\\ l = 1

TraceNext == /\\ l <= Steps
             /\\ LET e == Rec(l) IN {STEP}
             /\\ l' = l + 1
=============================================================================
""", data


def _config(n: int, late: bool = False) -> str:
    return chain_config(n, late) + "INIT TraceInit\nNEXT TraceNext\n"


def _next_actions() -> list[tuple[str, tuple[str, ...]]]:

    return [(a.name, a.param_names) for a in read_next(SPEC_DIR / "Zab.tla")]


def validate(logdir: Path, *, work: Path | None = None, echo: Callable[[str], None] = lambda s: None,
             workers: int = 1, window: int | None = None, batch: int | None = None,
             master: str | None = None) -> ValidationResult:
    """Validate the action logs of ``logdir``; InputError for malformed logs, never raises for a departure.

    ``window``: steps per window (docs/validation.md, "Windows"; default `WINDOW`); 0 checks the whole behaviour
    from Init in one TLC run. ``batch``: windows per TLC run (default: `BATCH_STEPS` steps' worth). ``workers``:
    TLC runs side by side in a process pool; ``master``: a Spark master URL instead (``local[2]``, ``spark://...``).
    """
    started = time.monotonic()
    logs = read_logs(logdir)
    lines = sum(len(e) for e in logs.events.values())
    n = max(logs.events)
    result = ValidationResult(str(logdir), n, lines, 0, 0, 0, list(logs.notes))
    for s, events in logs.events.items():
        first = events[0].fields["vars"]
        if first.get("history") or first.get("accepted_epoch") or first.get("current_epoch"):
            raise InputError(_loc(events[0]), f"server {s} starts with data on its disk: validation starts from "
                                              "the spec's Init, every server with an empty data directory")
    window = WINDOW if window is None else window
    if window == 0:
        return _validate_whole(logs, result, started, work=work, echo=echo, workers=workers)
    return _validate_windows(logs, result, started, window=window, batch=batch, work=work, echo=echo,
                             workers=workers, master=master)


#: Steps per window, and steps per TLC run (windows are grouped into batches of about this many steps), by default.
WINDOW = 1_000
BATCH_STEPS = 5_000


def _validate_whole(logs: Any, result: ValidationResult, started: float, *, work: Path | None,
                    echo: Callable[[str], None], workers: int) -> ValidationResult:
    """The whole behaviour in one TLC run from Init (``--window 0``)."""
    n = result.servers
    try:
        behaviour = merge(logs)
    except MergeError as e:
        result.failure = str(e)
        result.merge_seconds = time.monotonic() - started
        return result
    result.steps = len(behaviour.steps)
    result.unlogged = sum(s.unlogged for s in behaviour.steps)
    result.notes = behaviour.notes
    result.merge_seconds = time.monotonic() - started
    echo(f"validate: {result.lines} lines of {n} servers merged into {result.steps} steps "
         f"({result.unlogged} unlogged) in {result.merge_seconds:.1f}s")
    folder = Path(tempfile.mkdtemp(prefix="zabref-validate-", dir=work))
    for spec in (SPEC_DIR / "Zab.tla", *MODULES):
        shutil.copyfile(spec, folder / spec.name)
    text, data = trace_module(behaviour, _next_actions())
    data.write(folder)
    (folder / "VZab.tla").write_text(text)
    (folder / "VZab.cfg").write_text(_config(n, logs.late))
    t0 = time.monotonic()
    tools = toolchain()
    tlc = run_tlc(folder / "VZab.tla", folder / "VZab.cfg", workers=workers, extra_args=("-deadlock",),
                  tools=tools, classpath=[classes(tools)])
    result.tlc_seconds = time.monotonic() - t0
    result.tlc_runs = 1
    result.states = tlc.distinct_states or 0
    if tlc.outcome is not Outcome.OK or tlc.depth is None:
        result.failure = (f"TLC did not finish the check ({tlc.result_text()}): {tlc.message}\n"
                          f"  the generated module is kept in {folder}")
        result.inconclusive = True
        return result
    result.matched = min(tlc.depth - 1, result.steps)
    if result.matched < result.steps:
        step = behaviour.steps[result.matched]
        result.failure = (f"step {result.matched + 1} of {result.steps}: no step of spec/Zab.tla takes "
                          f"{step.action}({_params(step)}) at server {step.sid} with the variables {step.where} "
                          f"logs\n" + diagnose(logs, step, result.matched)
                          + f"\n  the generated module is kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return result


class _Pass:
    """One merge of the logs cut into windows by ``plan``, the windows grouped into batches and checked (in a
    process pool while the merge goes on, or on Spark after it)."""

    def __init__(self, logs: Any, n: int, plan: Plan, per_batch: int, folder: Path, *, workers: int,
                 master: str | None) -> None:
        self.logs, self.n, self.plan, self.per_batch, self.folder = logs, n, plan, per_batch, folder
        self.workers, self.master = workers, master
        self.pending: list[Window] = []
        self.batches: dict[str, list[tuple[int, int]]] = {}  # folder -> [(first, count)]
        self.futures: list[Any] = []
        self.outcomes: list[BatchOutcome] = []
        self.helpers = chain_helpers(_next_actions())
        self.pool: Any = None

    def emit(self, win: Window) -> None:
        self.pending.append(win)
        if sum(w.count for w in self.pending) >= self.per_batch:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        name = f"b{len(self.batches):05d}"
        module = batch_module("VZabW", "Zab", VARIABLES, self.helpers, STEP, self.pending, PLACE)
        path = write_batch(self.folder / name, "VZabW", module, chain_config(self.n, self.logs.late),
                           spec_files(SPEC_DIR),
                           self.pending)
        self.batches[str(path)] = [(w.first, w.count) for w in self.pending]
        self.pending = []
        if self.pool is not None:
            self.futures.append(self.pool.submit(check_batch, str(path)))
        elif not self.master:
            self.outcomes.append(check_batch(str(path)))

    def run(self) -> tuple[Cutter, Behaviour]:
        import concurrent.futures as cf  # noqa: PLC0415
        import multiprocessing as mp  # noqa: PLC0415

        if self.workers > 1 and not self.master:
            # forkserver: a worker does not start as a copy of this process, which holds the logs read (gigabytes
            # for a long run); forked, each worker's garbage collector would touch, and so copy, all of it
            self.pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("forkserver"))
        try:
            cutter = Cutter(self.n, self.plan, self.emit)
            behaviour = merge(self.logs, sink=cutter)
            cutter.finish()
            self.flush()
            self.merged = time.monotonic()
            self.inline = sum(o.seconds for o in self.outcomes)  # TLC run during the merge (no pool, no master)
            if self.pool is not None:
                self.outcomes = [f.result() for f in self.futures]
            elif self.master:
                self.outcomes = check_batches(list(self.batches), master=self.master)
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)
        return cutter, behaviour


def _validate_windows(logs: Any, result: ValidationResult, started: float, *, window: int, batch: int | None,
                      work: Path | None, echo: Callable[[str], None], workers: int,
                      master: str | None) -> ValidationResult:
    """The behaviour as a chain of windows (docs/validation.md, "Windows"; conformance/validate/chain.py)."""
    n = result.servers
    per_batch = (batch or max(1, BATCH_STEPS // window)) * window
    folder = Path(tempfile.mkdtemp(prefix="zabref-validate-", dir=work))
    plan = Plan(window)
    status: dict[int, tuple[Any, ...]] = {}  # a window's first step -> its verdict
    final: tuple[Any, ...] | None = None
    passes = 0
    while True:
        passes += 1
        p = _Pass(logs, n, plan, per_batch, folder / f"pass{passes}", workers=workers, master=master)
        t0 = time.monotonic()
        try:
            cutter, behaviour = p.run()
        except MergeError as e:
            result.failure = str(e)
            result.merge_seconds = time.monotonic() - started
            return result
        if passes == 1:
            result.steps = cutter.count
            result.unlogged = cutter.unlogged
            result.notes = behaviour.notes
            result.windows = len(cutter.firsts)
            result.merge_seconds = p.merged - t0 - p.inline
            echo(f"validate: {result.lines} lines of {n} servers merged into {result.steps} steps "
                 f"({result.unlogged} unlogged), {result.windows} windows of {window}, in "
                 f"{time.monotonic() - started:.1f}s wall")
        result.tlc_runs += len(p.outcomes)
        result.whole += sum(1 for o in p.outcomes if o.rechecked)
        result.tlc_seconds += sum(o.seconds for o in p.outcomes)
        result.states += sum(o.states for o in p.outcomes)
        for o in p.outcomes:
            members = p.batches[o.folder]
            for first, _ in members:
                status.pop(first, None)
            if o.kind == "ok":
                status.update((first, ("ok",)) for first, _ in members)
            elif o.kind == "departure":
                status[o.window] = ("departure", o.record)
            elif o.kind in ("end", "inexact"):
                status[o.window] = (o.kind,)
            elif len(members) == 1:
                status[members[0][0]] = ("error", o.message, o.folder)
        # the verdict: the first window that is not confirmed decides
        todo: set[int] = set()
        firsts = cutter.firsts
        k = 0
        while k < len(firsts):
            first = firsts[k]
            st = status.get(first)
            if st is None:
                todo.add(first)
            elif st[0] == "departure" and not todo:
                final = ("departure", first + st[1])
                break
            elif st[0] == "error" and not todo:
                final = st
                break
            elif st[0] == "end":
                if k + 1 < len(firsts):
                    plan.joined.add(firsts[k + 1])
                    status.pop(first, None)
                    status.pop(firsts[k + 1], None)
                    todo.add(first)
                    k += 1
            elif st[0] == "inexact":
                plan.plain.add(first)
                status.pop(first, None)
                todo.add(first)
            elif st[0] in ("departure", "error"):
                break  # a verdict after a window still to be checked again: check that one first
            k += 1
        if final is not None or not todo:
            break
        plan.only = todo
        per_batch = 1  # one window per TLC run from here: each gets its own verdict
        result.rechecked += len(todo)
    result.passes = passes
    result.wall_seconds = time.monotonic() - started
    if final is None:
        result.matched = result.steps
        shutil.rmtree(folder, ignore_errors=True)
        return result
    if final[0] == "error":
        result.failure = f"TLC did not finish the check of a window: {final[1]}\n  the generated module is kept in {final[2]}"
        result.inconclusive = True
        return result
    k = final[1]
    result.matched = k
    step = step_at(logs, k)
    result.failure = (f"step {k + 1} of {result.steps}: no step of spec/Zab.tla takes "
                      f"{step.action}({_params(step)}) at server {step.sid} with the variables {step.where} "
                      f"logs\n" + diagnose(logs, step, k) + f"\n  the generated modules are kept in {folder}")
    return result


def _params(step: SpecStep) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(step.params.items()))


def _loc(event: Any) -> Any:

    return Location(event.path, event.line)


def diagnose(logs: Any, step: SpecStep, k: int) -> str:
    """What the spec state was before step ``k`` and what the log says after it, variable by variable."""
    before = state_before(logs, k)
    lines = [f"  line: {step.where}", f"  action: {step.action}({_params(step)})"]
    if step.recv is not None:
        j = step.params.get("j")
        head = before["msgs"][j - 1][step.sid - 1][:1]
        lines.append(f"  took: {format_value(step.recv)}; head of msgs[{j}][{step.sid}] before: "
                     f"{format_value(head[0]) if head else '<<>>'}")
    if step.sends:
        lines.append("  sent: " + ", ".join(f"{p['type']}{format_value(p['zxid'])} to {to}" for to, p in step.sends)
                     + f" (logged; learnerPhase[{step.sid}] before: {format_value(before['learnerPhase'][step.sid - 1])})")
    if step.expected is not None:
        for name in PER_SERVER:
            was = before[name][step.sid - 1]
            now = step.expected[name]
            if was != now:
                lines.append(f"  {name}[{step.sid}]: {format_value(was)} -> {format_value(now)} (logged)")
        h = before["history"][step.sid - 1]
        lines.append(f"  history[{step.sid}]: {len(h)} transactions, last {format_value(h[-1]) if h else 'none'} -> "
                     f"{step.expected['hl']}, last {format_value(step.expected['hlast']) if step.expected['hlast'] else 'none'} (logged)")
    return "\n".join(lines)


@click.command("validate")
@click.argument("logdir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--window", type=click.IntRange(0), default=WINDOW, show_default=True,
              help="Steps per window, each checked from the state the logs give at its start (0: the whole "
                   "behaviour from Init in one TLC run).")
@click.option("--batch", type=click.IntRange(1), default=None,
              help=f"Windows per TLC run. [default: {BATCH_STEPS} steps' worth]")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="TLC runs side by side (a process pool); with --window 0, TLC worker threads. [default: the "
                   "machine's cores]")
@click.option("--master", default=None,
              help="Check the windows as a Spark job on this master (local[N], spark://host:port) instead of a "
                   "process pool.")
def validate_command(logdir: Path, window: int, batch: int | None, workers: int | None, master: str | None) -> None:
    """Check with TLC that the action logs in LOGDIR (zabref serve --action-log) are a behaviour of spec/Zab.tla.

    Exit codes: 0 the logs are a behaviour of the spec; 1 they depart from it (the report names the line, the
    server and the action); 3 bad input (a malformed log); 4 no verdict (TLC did not finish, or the toolchain
    failed)."""
    try:
        if workers is None:
            workers = 1 if window == 0 else cpu_workers()
        result = validate(logdir, echo=click.echo, workers=workers, window=window, batch=batch, master=master)
    except InputError as e:
        click.echo(f"validate: {e}", err=True)
        raise SystemExit(3) from None
    except ConformanceError as e:
        click.echo(f"validate: {e}", err=True)
        raise SystemExit(4) from None
    for note in result.notes:
        click.echo(f"validate: note: {note}")
    if result.failure:
        click.echo(f"validate: {result.failure}", err=True)
    click.echo(result.line())
    raise SystemExit(0 if result.passed else 4 if result.inconclusive else 1)
