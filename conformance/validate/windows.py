"""Check a long behaviour with TLC as a chain of windows, each from a state known in full, side by side.

Theory of operation
-------------------
This module knows nothing of Zab's variables: it takes windows -- each a start state (every variable of the spec as
a TLA+ constant expression), the window's step records (TLA+ records the caller's step formula reads), the state the
caller expects at the window's end, and an optional invariant -- and checks them with TLC. So any validator that can
say what the state was at some point of a run (conformance/validate/chain.py for zabref's action logs; a ZooKeeper
recording's validator could do the same) can reuse it.

Several windows go into ONE module and one TLC run (`batch_module`), so that the JVM's start and the parse of the
spec are paid once per batch, not once per window: a variable ``w`` says which window a state belongs to, ``Init``
is the disjunction of the windows' start states, and ``l`` is the position of the next record in the batch's records
(window ``w``'s are ``First[w] .. Last[w]``). From the last position a window only stutters, so with TLC's deadlock
check ON a state of a window from which its next record cannot be taken is reported as a deadlock, with its ``w``
and ``l``: that record is where the behaviour departs from the spec. Two invariants: ``EndOK`` -- at a window's
end the state is the expected one (the chain's next window starts from it: conformance/validate/chain.py and
docs/validation.md say why this makes the chain equivalent to one check from the start); ``Exact`` -- the caller's
condition, checked on every state (chain.py: the rebasing of histories is exact).

`check_batches` runs the batches' TLC checks in a process pool on this machine (``workers``) or as a Spark job
(``master``: ``local[N]``, ``spark://host:port``): each task reads its module from a folder every worker can see
and returns a small `BatchOutcome`. TLC itself runs with one worker thread per batch.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from conformance.tla.tracemodule import chunked

__all__ = ["Window", "BatchOutcome", "batch_module", "write_batch", "check_batch", "check_batches"]

CHUNK = 200


@dataclass
class Window:
    """One window of a chain: ``first`` is the 0-based number of its first step in the whole behaviour."""

    index: int
    first: int
    records: list[str]
    init: dict[str, str]  # variable -> TLA+ constant expression
    end: dict[str, str] | None  # the state expected after the last record (None: not compared)
    exact: str | None = None  # a TLA+ predicate over the state, TLC checks it on every state of the window
    meta: dict = field(default_factory=dict)  # the caller's (e.g. the rebasing's coordinates)
    defs: str = ""  # TLA+ definitions its records refer to (names unique to the window)
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


def batch_module(name: str, extends: str, variables: Sequence[str], helpers: str, step: str,
                 windows: Sequence[Window]) -> str:
    """The text of one module checking ``windows`` (module docstring). ``helpers``: TLA+ definitions the step
    formula uses; ``step``: a formula of the record ``e`` (the spec's action and its constraints), ``variables``:
    the spec's variables (all of them)."""
    records: list[str] = []
    first, last = [], []
    for win in windows:
        first.append(len(records) + 1)
        records.extend(win.records)
        last.append(len(records))
    chunks = chunked("T", records, "Rec", CHUNK)
    defs = "\n".join(win.defs for win in windows if win.defs)
    inits, ends, exacts = [], [], []
    for k, win in enumerate(windows, 1):
        inits.append(f"Start{k} ==\n" + "\n".join(f"    /\\ {v} = {win.init[v]}" for v in variables))
        end = win.end or {}
        conj = [f"    /\\ {v} = {end[v]}" for v in variables if v in end]
        if win.end is not None and win.end_also:
            conj.append(f"    /\\ {win.end_also}")
        ends.append(f"End{k} ==\n" + ("\n".join(conj) if conj else "    TRUE"))
        exacts.append(f"Exact{k} == {win.exact or 'TRUE'}")
    k_all = range(1, len(windows) + 1)
    allvars = ", ".join([*variables, "l", "w"])
    nl = "\n"
    init = " \\/ ".join(f"(w = {k} /\\ l = {first[k - 1]} /\\ Start{k})" for k in k_all)
    end_ok = " [] ".join(f"w = {k} -> End{k}" for k in k_all)
    exact = " [] ".join(f"w = {k} -> Exact{k}" for k in k_all)
    return f"""---------------------------- MODULE {name} ----------------------------
\\* Generated by conformance/validate/windows.py: {len(windows)} window(s) of a chain, one record a step. Do not edit.
EXTENDS {extends}, TLC
VARIABLES l, w

{helpers}

{defs}

{chunks}
First == <<{", ".join(map(str, first))}>>
Last == <<{", ".join(map(str, last))}>>

{nl.join(inits)}

{nl.join(ends)}

{nl.join(exacts)}

BatchInit == \\/ {init}

\\* From a window's end it only stutters: with the deadlock check on, a state that cannot take its record is a deadlock.
BatchNext == \\/ /\\ l <= Last[w]
                /\\ LET e == Rec(l) IN {step}
                /\\ l' = l + 1 /\\ w' = w
             \\/ l = Last[w] + 1 /\\ UNCHANGED <<{allvars}>>

EndOK == l = Last[w] + 1 => CASE {end_ok}
Exact == CASE {exact}
=============================================================================
"""


def write_batch(folder: Path, name: str, module: str, config: str, spec_files: Iterable[Path],
                windows: Sequence[Window]) -> Path:
    """Write one batch into its own folder (the module, its config, the spec files it extends, and which windows
    it holds with their first steps), so that any worker that sees the folder can check it."""
    folder.mkdir(parents=True, exist_ok=True)
    for spec in spec_files:
        shutil.copyfile(spec, folder / spec.name)
    (folder / f"{name}.tla").write_text(module)
    (folder / f"{name}.cfg").write_text(config + "INIT BatchInit\nNEXT BatchNext\nINVARIANT Exact\nINVARIANT EndOK\n")
    (folder / "windows.txt").write_text("".join(f"{win.index} {win.first} {win.count}\n" for win in windows))
    return folder


_INT = re.compile(r"-?\d+")


def check_batch(folder: str, name: str = "VZabW") -> BatchOutcome:
    """TLC on one batch folder (`write_batch`); picklable, for a process pool or a Spark task."""
    from conformance.tla.tools import Outcome, run_tlc, toolchain  # noqa: PLC0415 (in the worker)

    path = Path(folder)
    index = [tuple(map(int, line.split())) for line in (path / "windows.txt").read_text().split("\n") if line]
    windows = [i for i, _, _ in index]
    t0 = time.monotonic()
    try:
        tlc = run_tlc(path / f"{name}.tla", path / f"{name}.cfg", workers=1, tools=toolchain())
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
                            states=states, end_state={k: v for k, v in last.items() if k not in ("l", "w")})
    return BatchOutcome(folder, windows, "error", message=f"{tlc.result_text()}: {tlc.message}"[:2000],
                        seconds=seconds, states=states)


def _pool_map(folders: Iterable[str], workers: int) -> Iterator[BatchOutcome]:
    """Outcomes as they come (batches may be submitted while the caller still produces them)."""
    with cf.ProcessPoolExecutor(max_workers=workers) as pool:
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
