"""`zabref validate LOGDIR`: check with TLC that the servers' action logs are a behaviour of spec/Zab.tla.

Theory of operation
-------------------
Trace validation as etcd's raft and CCF do it, for TLC 2.15 (no IOUtils, no Json module, no action composition):

1. `conformance.validate.actionlogs` reads ``LOGDIR/actions-<sid>.jsonl`` (every line checked; a torn last line
dropped);
2. `conformance.validate.merge` orders every server's lines into ONE behaviour, numbering the client values as the spec
does;
3. `trace_module` writes a module ``VZab`` that EXTENDS Zab and holds that behaviour as a constant sequence of
   records -- in operators of `CHUNK` records each (one huge tuple expression breaks TLC's front end), the ``l``-th
   record read by ``Rec(l)`` from its chunk, never by concatenating the chunks (``\\o`` of them all is evaluated
   again at every step) -- with a cursor variable ``l``. Its next-state relation is: the ``l``-th record's action with
   its parameters (a ``Check`` record: no action) AND the record's constraints on the state after it: the acting
   server's variables as its line logged them, the packet it took at the head of its channel, the packets it sent
   appended to its channels. Everything else -- the other servers, ``proposed``, ``committed``, ``established``,
   ``faults`` -- is left to TLC. The history is constrained by its length and last transaction (the whole of it after a
   SNAP), which with the step's own semantics pins it down, and keeps the module linear in the log's length;
4. TLC explores it breadth-first from the spec's Init (every server starts from an empty data dir) with
   ``-deadlock``: the behaviour is matched when the search reaches depth ``len + 1``; otherwise the deepest state
   reached says which record no spec step could take, and `diagnose` shows, for that record, what the spec allows
   beside what the log says.

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
from conformance.tla.labels import read_next
from conformance.tla.tools import Outcome, run_tlc, toolchain
from conformance.tla.tracemodule import chunked, dispatch
from conformance.tla.values import format_value
from conformance.validate.actionlogs import read_logs
from conformance.validate.merge import Behaviour, SpecStep, merge, state_before

__all__ = ["CHUNK", "ValidationResult", "trace_module", "validate", "validate_command"]

SPEC_DIR = Path(__file__).resolve().parents[2] / "spec"
#: Records per operator of the generated trace module.
CHUNK = 200
BIG = 1_000_000_000
#: The acting server's variables a record constrains (history apart: see the module docstring).
PER_SERVER = ("acceptedEpoch", "currentEpoch", "state", "zabState", "leader", "lastCommitted", "newEpoch",
              "learnerPhase", "learnerLastZxid", "ackIndex")
_NO_TXN = "[value |-> 0, zxid |-> <<0, 0>>]"


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
    tlc_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.failure is None and self.matched == self.steps

    def line(self) -> str:
        rate = self.steps / (self.merge_seconds + self.tlc_seconds) if self.steps else 0.0
        return (f"validate: servers={self.servers} lines={self.lines} steps={self.steps} matched={self.matched} "
                f"unlogged={self.unlogged} merge={self.merge_seconds:.1f}s tlc={self.tlc_seconds:.1f}s "
                f"steps/s={rate:.0f} result={self.verdict}")

    @property
    def verdict(self) -> str:
        return "ok" if self.passed else "INCONCLUSIVE" if self.inconclusive else "FAILED"


_NO_PACKET = '[data |-> "n/a", type |-> "none", zxid |-> <<0, 0>>]'


def _record(step: SpecStep, n: int) -> str:
    """One step as a TLA+ record. TLC compares only values of one kind, so every field has one kind in every
    record: flags say which parts apply (``hasv``: the server's variables were logged; ``hasr``: a packet was
    taken; ``hfull``: the whole history is compared, after a SNAP or a restart)."""
    e = step.expected
    fields = [f'a |-> "{step.action}"', f"i |-> {step.params.get('i', step.sid)}", f"j |-> {step.params.get('j', 0)}",
              f"s |-> {step.sid}", f"g |-> {'TRUE' if step.go_looking else 'FALSE'}",
              f"hasv |-> {'FALSE' if e is None else 'TRUE'}"]
    if e is None:
        e = {name: 0 for name in PER_SERVER}
        e.update(history=None, hl=0, hlast=None, stagedHistory=None, sl=0, slast=None)
    full = e["history"] is not None

    def txn(t: Any) -> str:
        return format_value(t) if t is not None else _NO_TXN

    v = [f"{name} |-> {format_value(e[name])}" for name in PER_SERVER]
    v += [f"hl |-> {e['hl']}", f"hlast |-> {txn(e['hlast'])}", f"sl |-> {e['sl']}", f"slast |-> {txn(e['slast'])}",
          f"hfull |-> {'TRUE' if full else 'FALSE'}", f"hall |-> {format_value(e['history']) if full else '<<>>'}",
          f"sall |-> {format_value(e['stagedHistory']) if full else '<<>>'}"]
    fields.append("v |-> [" + ", ".join(v) + "]")
    fields.append(f"hasr |-> {'FALSE' if step.recv is None else 'TRUE'}")
    fields.append(f"r |-> {_NO_PACKET if step.recv is None else format_value(step.recv)}")
    out = {k: [] for k in range(1, n + 1)}
    for to, p in step.sends:
        out[to].append(p)
    fields.append("snd |-> " + format_value([out[k] for k in range(1, n + 1)]))
    return "[" + ", ".join(fields) + "]"


def trace_module(behaviour: Behaviour, actions: list[str]) -> str:
    """The text of module VZab (module docstring); ``actions``: Next's actions with their parameter names."""
    records = [_record(s, behaviour.n) for s in behaviour.steps]
    if any(p not in ("i", "j") for _, params in actions for p in params):
        raise ValueError(f"an action of Next takes a parameter other than i and j: {actions}")  # _record's fields
    per = "\n".join(f"    /\\ {v}'[e.s] = e.v.{v}" for v in PER_SERVER)
    chunks = chunked("T", records, "Rec", CHUNK)
    act = dispatch(actions, extra=('e.a = "Check" /\\ UNCHANGED vars',))
    return f"""---------------------------- MODULE VZab ----------------------------
\\* Generated by conformance/validate/command.py from servers' action logs: one record a merged step. Do not edit.
EXTENDS Zab, TLC
VARIABLE l

{chunks}
Steps == {len(records)}

{act}

Logged(e) ==
    /\\ Len(history'[e.s]) = e.v.hl
    /\\ IF e.v.hl = 0 THEN TRUE ELSE history'[e.s][e.v.hl] = e.v.hlast
    /\\ Len(stagedHistory'[e.s]) = e.v.sl
    /\\ IF e.v.sl = 0 THEN TRUE ELSE stagedHistory'[e.s][e.v.sl] = e.v.slast
    /\\ IF e.v.hfull THEN history'[e.s] = e.v.hall /\\ stagedHistory'[e.s] = e.v.sall ELSE TRUE
{per}

\\* IF, not \\/: TLC takes every disjunct of an action as a possible successor, so it would evaluate both sides.
Post(e) == IF e.hasv THEN Logged(e) ELSE TRUE

Took(e) == IF e.hasr THEN msgs[e.j][e.s] /= <<>> /\\ Head(msgs[e.j][e.s]) = e.r ELSE TRUE

Sent(e) == IF e.g THEN TRUE ELSE \\A k \\in Server \\ {{e.s}} : msgs'[e.s][k] = msgs[e.s][k] \\o e.snd[k]

TraceInit == Init /\\ l = 1

TraceNext == /\\ l <= Steps
             /\\ LET e == Rec(l) IN Took(e) /\\ Act(e) /\\ Post(e) /\\ Sent(e)
             /\\ l' = l + 1
=============================================================================
"""


def _config(n: int) -> str:
    return (f"CONSTANTS\n    N = {n}\n    MaxEpoch = {BIG}\n    MaxTxns = {BIG}\n    MaxFaults = {BIG}\n"
            "INIT TraceInit\nNEXT TraceNext\n")


def _next_actions() -> list[tuple[str, tuple[str, ...]]]:

    return [(a.name, a.param_names) for a in read_next(SPEC_DIR / "Zab.tla")]


def validate(logdir: Path, *, work: Path | None = None, echo: Callable[[str], None] = lambda s: None,
             workers: int = 1) -> ValidationResult:
    """Validate the action logs of ``logdir``; InputError for malformed logs, never raises for a departure."""
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
    echo(f"validate: {lines} lines of {n} servers merged into {result.steps} steps "
         f"({result.unlogged} unlogged) in {result.merge_seconds:.1f}s")
    folder = Path(tempfile.mkdtemp(prefix="zabref-validate-", dir=work))
    for name in ("Zab.tla",):
        (folder / name).write_text((SPEC_DIR / name).read_text())
    (folder / "VZab.tla").write_text(trace_module(behaviour, _next_actions()))
    (folder / "VZab.cfg").write_text(_config(n))
    t0 = time.monotonic()
    tlc = run_tlc(folder / "VZab.tla", folder / "VZab.cfg", workers=workers, extra_args=("-deadlock",),
                  tools=toolchain())
    result.tlc_seconds = time.monotonic() - t0
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
                          f"logs\n" + diagnose(logs, behaviour, result.matched)
                          + f"\n  the generated module is kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def _params(step: SpecStep) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(step.params.items()))


def _loc(event: Any) -> Any:

    return Location(event.path, event.line)


def diagnose(logs: Any, behaviour: Behaviour, k: int) -> str:
    """What the spec state was before step ``k`` and what the log says after it, variable by variable."""
    step = behaviour.steps[k]
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
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True, help="TLC worker threads.")
def validate_command(logdir: Path, workers: int) -> None:
    """Check with TLC that the action logs in LOGDIR (zabref serve --action-log) are a behaviour of spec/Zab.tla.

    Exit codes: 0 the logs are a behaviour of the spec; 1 they depart from it (the report names the line, the
    server and the action); 3 bad input (a malformed log); 4 no verdict (TLC did not finish, or the toolchain
    failed)."""
    try:
        result = validate(logdir, echo=click.echo, workers=workers)
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
