"""Reading servers' action logs (zabref/runtime/actionlog.py) for `zabref validate`: every line checked, nothing
guessed.

Theory of operation
-------------------
A log folder holds ``actions-<sid>.jsonl``, one per server. `read_logs` reads every file whole and turns each line
into an `Event` (server, line number, kind, timestamp, and the fields of its kind), checking each field's type.
Lines are read as bytes and decoded by ``orjson`` (which checks the UTF-8 itself): the standard library's ``json``
took 300 s of the 697 s that validating a run of 795k steps took. A line that is not what the format says -- not
UTF-8 included -- is an `InputError` naming the file and line -- except a torn LAST line of a file (no newline at
the end, or not JSON): the process died while writing it, and the step it describes never took effect (the runtime
flushes the log before a batch's storage and packets), so it is dropped and reported in `Logs.notes`. A server's
lines are numbered ``n`` = 0, 1, ... within each process; a jump is an error (a lost line would be a step the
validator cannot see).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from conformance.errors import InputError, Location

__all__ = ["Event", "Logs", "read_logs", "KINDS"]

KINDS = ("restart", "step", "closed")
_NAME = re.compile(r"^actions-(\d+)\.jsonl$")


@dataclass(frozen=True)
class Event:
    """One line of one server's log."""

    sid: int
    line: int  # 1-based line number in its file
    path: str
    t: int  # time.monotonic_ns() when it was written
    kind: str  # restart | step | closed
    fields: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class Logs:
    """Every server's events in its own order, and what the reader noticed (torn last lines)."""

    events: dict[int, list[Event]]
    notes: list[str] = field(default_factory=list)
    late: bool = False  # the servers ran with [cluster] leader_logs_late (their restart lines say so)


def _fail(path: Path, line: int | None, message: str) -> InputError:
    return InputError(Location(str(path), line or None), message)


def _check(path: Path, line: int, obj: Any, types: dict[str, type | tuple[type, ...]], what: str) -> None:
    if not isinstance(obj, dict):
        raise _fail(path, line, f"{what}: expected a JSON object")
    for key, kind in types.items():
        if key not in obj:
            raise _fail(path, line, f"{what}: missing field {key!r}")
        value = obj[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise _fail(path, line, f"{what}: field {key!r} is {type(value).__name__}, expected {kind}")


_COMMON = {"sid": int, "n": int, "t": int, "kind": str}
_BY_KIND = {
    "restart": {"vars": dict},
    "step": {"action": str, "params": dict, "sends": list, "persist": list, "vars": dict},
    "closed": {"peer": int, "vars": dict},
}


def read_log(path: Path, sid: int) -> tuple[list[Event], str | None]:
    """One server's events; the second value says why a torn last line was dropped (None: there was none). The file
    is read a line at a time, and the transactions of the histories the lines hold (a restart's history on disk, a
    SNAP's staged history -- or a DIFF's or TRUNC's that is not a prefix of the history, or any of older logs: each
    the whole history, and a long run logs hundreds) are kept once (`_Transactions`), so memory grows with the run's
    transactions and lines, not with lines x history."""
    txns = _Transactions()
    events: list[Event] = []
    expected_n = 0
    torn = None
    pending: tuple[int, bytes] | None = None  # the previous line, read only once the next shows it was not the last
    try:
        with path.open("rb") as f:  # bytes: orjson checks the UTF-8, and a bad byte is an error of its line
            for k, raw in enumerate(f, 1):
                if pending is not None:
                    expected_n = _event(path, sid, *pending, events, expected_n, txns, last=False)
                pending = (k, raw)
    except OSError as e:
        raise _fail(path, 0, f"cannot read: {e}") from None
    if pending is not None:
        k, raw = pending
        if not raw.endswith(b"\n"):
            torn = f"{path}:{k}: torn last line dropped (the process died while writing it)"
        else:
            try:
                _event(path, sid, k, raw, events, expected_n, txns, last=True)
            except _TornLast as e:
                torn = f"{path}:{k}: torn last line dropped (not JSON: {e})"
    if events and events[0].kind != "restart":
        raise _fail(path, events[0].line, "the log does not start with the process's start (a 'restart' line)")
    return events, torn


class _TornLast(Exception):  # noqa: N818 -- the last line is not JSON: torn, not malformed
    pass


class _Transactions:
    """One copy of each (zxid, value) pair the histories of a log's lines name: a line's history becomes a list of
    references to them (tuples, which unpack and index as the lists they replace)."""

    def __init__(self) -> None:
        self.held: dict[tuple[Any, Any], tuple[Any, Any]] = {}

    def history(self, h: Any) -> Any:
        if not isinstance(h, list):
            return h
        held = self.held
        out = []
        for t in h:
            if isinstance(t, list) and len(t) == 2:
                key = (t[0], t[1])
                out.append(held.setdefault(key, key))
            else:
                out.append(t)  # not a pair: left as it is, for the merge to refuse with its words
        return out


def _event(path: Path, sid: int, k: int, raw: bytes, events: list[Event], expected_n: int, txns: _Transactions, *,
           last: bool) -> int:
    """Check line ``k`` and append its event; returns the next expected ``n``. (orjson refuses what the writer never
    writes -- NaN, bytes that are not UTF-8 -- and reads an integer beyond 64 bits as a float: every integer the
    writer writes fits, since its orjson refuses wider ones -- zxids are below 2^63, connection ids int64 -- and a
    float where ``sid``, ``n`` or ``t`` belong is refused below.)"""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:  # a ValueError, as json's is
        if last:
            raise _TornLast(str(e)) from None
        raise _fail(path, k, f"not JSON: {e}") from None
    _check(path, k, obj, _COMMON, "action log line")
    kind = obj["kind"]
    if kind not in _BY_KIND:
        raise _fail(path, k, f"unknown kind {kind!r} (known: {', '.join(KINDS)})")
    _check(path, k, obj, _BY_KIND[kind], f"{kind} line")
    if obj["sid"] != sid:
        raise _fail(path, k, f"line of server {obj['sid']} in the log of server {sid}")
    if kind == "restart":
        expected_n = 0
    if obj["n"] != expected_n:
        raise _fail(path, k, f"line number n={obj['n']}, expected {expected_n}: a line is missing")
    fields = {key: v for key, v in obj.items() if key not in _COMMON}
    v = fields["vars"]
    for name in ("history", "staged_history"):
        if name in v:
            v[name] = txns.history(v[name])
    events.append(Event(sid, k, str(path), obj["t"], kind, fields))
    return expected_n + 1


def read_logs(folder: Path) -> Logs:
    """Every ``actions-<sid>.jsonl`` of ``folder``; InputError if there is none or one is malformed."""
    folder = Path(folder)
    files = sorted((int(m[1]), p) for p in folder.glob("actions-*.jsonl") if (m := _NAME.match(p.name)))
    if not files:
        raise _fail(folder, 0, "no action logs (actions-<sid>.jsonl) in this folder")
    logs = Logs({})
    for sid, path in files:
        events, torn = read_log(path, sid)
        logs.events[sid] = events
        if torn:
            logs.notes.append(torn)
    restarts = [e for events in logs.events.values() for e in events if e.kind == "restart"]
    logs.late = bool(restarts) and bool(restarts[0].fields.get("leader_logs_late", False))
    for e in restarts:
        if bool(e.fields.get("leader_logs_late", False)) != logs.late:
            raise _fail(Path(e.path), e.line, f"this server {'logs' if not logs.late else 'does not log'} late "
                                              f"(leader_logs_late) and {restarts[0].where} says the opposite: one "
                                              "run, one setting")
    return logs
