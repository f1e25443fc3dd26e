"""Check a long behaviour with TLC as a chain of windows, each from a state known in full, side by side.

Theory of operation
-------------------
This module knows nothing of Zab's variables: it takes windows -- each a start state (every variable of the spec as
a TLA+ value), the window's step records (TLA+ values the caller's step formula reads), the state the caller expects
at the window's end, and an optional invariant -- and checks them with TLC. So any validator that can
say what the state was at some point of a run (conformance/validate/chain.py for zabref's action logs; a ZooKeeper
recording's validator could do the same) can reuse it.

Several windows go into ONE module and one TLC run (`batch_module`), so that the JVM's start and the parse of the
spec are paid once per batch, not once per window. The records and the states are not in the module's text: they
are the lines of a data file beside it (``data.tlav``), read with ZabrefData's ``Datum`` (conformance/tla/datafile.py),
so TLC's parser reads only the spec and the batch's few definitions. A variable ``w`` says which window a state
belongs to, ``Init`` is the disjunction of the windows' start states, and ``l`` is the position of the next record
in the batch's records (window ``w``'s are ``First[w] .. Last[w]``). From the last position a window only stutters,
so with TLC's deadlock check ON a state of a window from which its next record cannot be taken is reported as a
deadlock, with its ``w`` and ``l``: that record is where the behaviour departs from the spec.

Two invariants. ``EndOK`` -- at a window's end the state is the expected one (the chain's next window starts from
it: conformance/validate/chain.py and docs/validation.md say why this makes the chain equivalent to one check from
the start). ``Exact`` -- the caller's condition on every state of the window (chain.py: the rebasing of histories is
exact), kept in a variable ``xok``: the window's ``exact`` decides it at the start state and each step ANDs the
window's ``exact_step``, a formula of the step's record ``e`` and of both states, so a condition over everything a
state holds (thousands of packets in a channel) can be checked where it changes instead of in every state.

Each window is one chain of states (from a known state a record has at most one successor: chain.py says why), so
TLC first fingerprints only a state's place (``VIEW Place``): ``<<w, l, xok>>`` and what the caller's ``place``
summarizes of the state (chain.py: the small variables whole, each sequence by its length and end elements), not
states that can hold thousands of transactions. Identical successors of one step -- Zab.tla's disjunctive guards
(Crash's ``state[i] /= LOOKING \\/ lastCommitted[i] > 0``) give TLC the same successor twice -- have one place;
two successors that differ in their place are two places at one position, so a pass that found exactly (records
+ windows) places (each window's start and each record's successor) is one chain a window. Any other count, and
any verdict other than a pass, is checked again with whole states fingerprinted, as before the VIEW, and that
verdict stands (`check_batch`).

`check_batches` runs the batches' TLC checks in a process pool on this machine (``workers``) or as a Spark job
(``master``: ``local[N]``, ``spark://host:port``): each task reads its module from a folder every worker can see
and returns a small `BatchOutcome`. TLC itself runs with one worker thread per batch.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from conformance.tla.datafile import DataFile
from conformance.tla.overrides import MODULES, classes

__all__ = ["Window", "BatchOutcome", "batch_module", "write_batch", "check_batch", "check_batches"]

DATA = "data.tlav"


@dataclass
class Window:
    """One window of a chain: ``first`` is the 0-based number of its first step in the whole behaviour."""

    index: int
    first: int
    records: list[str]  # TLA+ values, each on one line (conformance/tla/values.py's format_value syntax)
    init: dict[str, str]  # variable -> TLA+ value
    end: dict[str, str] | None  # the state expected after the last record (None: not compared)
    exact: str | None = None  # a TLA+ predicate over the state, checked at the window's start state
    exact_step: str | None = None  # a TLA+ action formula of the record e: checked at every step (``x``)
    meta: dict = field(default_factory=dict)  # the caller's (e.g. the rebasing's coordinates)
    end_also: str = ""  # a TLA+ formula the end state must also satisfy (with ``end``)

    @property
    def count(self) -> int:
        return len(self.records)


@dataclass
class BatchOutcome:
    """What TLC said of a batch. ``kind``: ok | departure (window ``window``'s record ``record``, 0-based within the
    window, could not be taken) | end (a window's end state is not the expected one) | inexact (a window's Exact
    failed) | error (no verdict: TLC failed). ``windows``: the indexes of the windows in the batch."""

    folder: str
    windows: list[int]
    kind: str
    window: int | None = None
    record: int | None = None
    message: str = ""
    seconds: float = 0.0
    states: int = 0
    end_state: dict[str, str] | None = None  # with kind == "end": TLC's state at the window's end
    rechecked: str = ""  # why and how the batch was checked again with whole states (`check_batch`)


def batch_module(name: str, extends: str, variables: Sequence[str], helpers: str, step: str,
                 windows: Sequence[Window], place: str = "") -> tuple[str, DataFile]:
    """The text of one module checking ``windows`` (module docstring) and its data file. ``helpers``: TLA+
    definitions the step formula uses; ``step``: a formula of the record ``e`` (the spec's action and its
    constraints), ``variables``: the spec's variables (all of them); ``place``: what of a state, beside its window
    and position, the fingerprints by place hold (a TLA+ expression over the state; module docstring)."""
    data = DataFile(DATA)
    first, last = [], []
    for win in windows:  # the records first, so that record k is line k
        first.append(len(data.lines) + 1)
        for rec in win.records:
            data.add(rec)
        last.append(len(data.lines))
    inits, ends, exacts, steps = [], [], [], []
    for k, win in enumerate(windows, 1):
        inits.append(f"Start{k} ==\n" + "\n".join(f"    /\\ {v} = {data.datum(win.init[v])}" for v in variables))
        end = win.end or {}
        conj = [f"    /\\ {v} = {data.datum(end[v])}" for v in variables if v in end]
        if win.end is not None and win.end_also:
            conj.append(f"    /\\ {win.end_also}")
        ends.append(f"End{k} ==\n" + ("\n".join(conj) if conj else "    TRUE"))
        exacts.append(f"ExactStart{k} == {win.exact or 'TRUE'}")
        steps.append(f"ExactStep{k}(e) == {win.exact_step or 'TRUE'}")
    k_all = range(1, len(windows) + 1)
    allvars = ", ".join([*variables, "l", "w", "xok"])
    nl = "\n"
    init = " \\/ ".join(f"(w = {k} /\\ l = {first[k - 1]} /\\ Start{k} /\\ xok = ExactStart{k})" for k in k_all)
    end_ok = " [] ".join(f"w = {k} -> End{k}" for k in k_all)
    exact_step = " [] ".join(f"w = {k} -> ExactStep{k}(e)" for k in k_all)
    module = f"""---------------------------- MODULE {name} ----------------------------
\\* Generated by conformance/validate/windows.py: {len(windows)} window(s) of a chain, one record a step, the records
\\* and states read from {DATA} (conformance/tla/datafile.py). Do not edit.
EXTENDS {extends}, ZabrefData, ZabrefSeq, TLC
VARIABLES l, w, xok

{helpers}

Rec(k) == Datum("{DATA}", k)
First == <<{", ".join(map(str, first))}>>
Last == <<{", ".join(map(str, last))}>>

{nl.join(inits)}

{nl.join(ends)}

{nl.join(exacts)}

{nl.join(steps)}

ExactStep(e) == CASE {exact_step}

BatchInit == \\/ {init}

\\* From a window's end it only stutters: with the deadlock check on, a state that cannot take its record is a deadlock.
BatchNext == \\/ /\\ l <= Last[w]
                /\\ LET e == Rec(l) IN ({step}) /\\ xok' = (xok /\\ ExactStep(e))
                /\\ l' = l + 1 /\\ w' = w
             \\/ l = Last[w] + 1 /\\ UNCHANGED <<{allvars}>>

EndOK == l = Last[w] + 1 => CASE {end_ok}
Exact == xok
\\* Each window is one chain of states: TLC tells its states apart by their place (module docstring).
Place == <<w, l, xok{", " + place if place else ""}>>
=============================================================================
"""
    return module, data


def write_batch(folder: Path, name: str, module: tuple[str, DataFile], config: str, spec_files: Iterable[Path],
                windows: Sequence[Window]) -> Path:
    """Write one batch into its own folder (the module and its data file, its config, the spec files it extends
    with ZabrefData, and which windows it holds with their first steps), so that any worker that sees the folder can
    check it."""
    folder.mkdir(parents=True, exist_ok=True)
    for spec in (*spec_files, *MODULES):
        shutil.copyfile(spec, folder / spec.name)
    text, data = module
    data.write(folder)
    (folder / f"{name}.tla").write_text(text)
    (folder / f"{name}.cfg").write_text(config + "INIT BatchInit\nNEXT BatchNext\nINVARIANT Exact\nINVARIANT EndOK\n"
                                             "VIEW Place\n")
    (folder / "windows.txt").write_text("".join(f"{win.index} {win.first} {win.count}\n" for win in windows))
    return folder


_INT = re.compile(r"-?\d+")


def check_batch(folder: str, name: str = "VZabW") -> BatchOutcome:
    """TLC on one batch folder (`write_batch`); picklable, for a process pool or a Spark task. First with the
    fingerprints by place (``VIEW Place``); a pass that found exactly one place a record and window stands, anything
    else (a step with two successors that differ in their place, or a verdict other than a pass) is checked again
    with whole states fingerprinted, and that run's verdict stands (module docstring)."""
    path = Path(folder)
    index = [tuple(map(int, line.split())) for line in (path / "windows.txt").read_text().split("\n") if line]
    t0 = time.monotonic()
    out = _check(path, name, index, f"{name}.cfg")
    if out.kind == "ok" and out.states == sum(c for _, _, c in index) + len(index):
        return out
    whole = path / f"{name}.whole.cfg"
    whole.write_text("".join(line for line in (path / f"{name}.cfg").read_text().splitlines(keepends=True)
                             if not line.startswith("VIEW ")))
    again = _check(path, name, index, whole.name)
    again.seconds = time.monotonic() - t0
    again.rechecked = f"{out.kind} by place ({out.states} places); whole states: {again.kind}"
    return again


def _check(path: Path, name: str, index: list[tuple[int, ...]], config: str) -> BatchOutcome:
    from conformance.tla.tools import SHORT_RUN, Outcome, run_tlc, toolchain  # noqa: PLC0415 (in the worker)

    folder = str(path)
    windows = [i for i, _, _ in index]
    t0 = time.monotonic()
    try:
        tools = toolchain()
        tlc = run_tlc(path / f"{name}.tla", path / config, workers=1, tools=tools, classpath=[classes(tools)],
                      jvm_options=SHORT_RUN)
    except Exception as e:  # noqa: BLE001 -- any failure to run TLC is no verdict, reported with its words
        return BatchOutcome(folder, windows, "error", message=f"{type(e).__name__}: {e}",
                            seconds=time.monotonic() - t0)
    seconds = time.monotonic() - t0
    states = tlc.distinct_states or 0
    if tlc.outcome is Outcome.OK:
        return BatchOutcome(folder, windows, "ok", seconds=seconds, states=states)
    last = dict(tlc.trace[-1].variables) if tlc.trace else {}
    if not last:  # an initial state: TLC prints it in its message, not as a trace
        last = {m[1]: m[2] for m in re.finditer(r"^\s*/\\ (w|l) = (\d+)\s*$", tlc.message, re.M)}
    if "w" not in last or "l" not in last:
        return BatchOutcome(folder, windows, "error", message=f"{tlc.result_text()}: {tlc.message}"[:2000],
                            seconds=seconds, states=states)
    wk, pos = int(last["w"]), int(last["l"])
    win, first, _ = index[wk - 1]
    offset = sum(c for _, _, c in index[:wk - 1])
    record = pos - offset - 1
    if tlc.outcome is Outcome.DEADLOCK:
        return BatchOutcome(folder, windows, "departure", win, record, seconds=seconds, states=states)
    if tlc.outcome is Outcome.INVARIANT_VIOLATED and tlc.violated in ("EndOK", "Exact"):
        kind = "end" if tlc.violated == "EndOK" else "inexact"
        return BatchOutcome(folder, windows, kind, win, record, message=tlc.message[:500], seconds=seconds,
                            states=states, end_state={k: v for k, v in last.items() if k not in ("l", "w", "xok")})
    return BatchOutcome(folder, windows, "error", message=f"{tlc.result_text()}: {tlc.message}"[:2000],
                        seconds=seconds, states=states)


def _pool_map(folders: Iterable[str], workers: int) -> Iterator[BatchOutcome]:
    """Outcomes as they come (batches may be submitted while the caller still produces them)."""
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("forkserver")) as pool:
        pending = [pool.submit(check_batch, f) for f in folders]
        for fut in cf.as_completed(pending):
            yield fut.result()


def check_batches(folders: Sequence[str], *, workers: int = 1, master: str | None = None,
                  on_outcome: Callable[[BatchOutcome], None] = lambda o: None) -> list[BatchOutcome]:
    """Check every batch folder: in this process (one worker, no master), a process pool of ``workers``, or a Spark
    job on ``master``. Outcomes in the order of ``folders``."""
    out: dict[str, BatchOutcome] = {}
    if master:
        from conformance.graph.spark import session  # noqa: PLC0415 (Spark loads only when asked)

        spark = session(master)
        sc = spark.sparkContext
        n = max(1, len(folders))
        for o in sc.parallelize(list(folders), n).map(check_batch).collect():
            out[o.folder] = o
            on_outcome(o)
    elif workers <= 1 or len(folders) <= 1:
        for f in folders:
            o = check_batch(f)
            out[f] = o
            on_outcome(o)
    else:
        for o in _pool_map(folders, min(workers, len(folders))):
            out[o.folder] = o
            on_outcome(o)
    return [out[f] for f in folders]


def cpu_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
