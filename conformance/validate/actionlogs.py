"""Reading servers' action logs (zabref/runtime/actionlog.py) for `zabref validate`: every line checked, nothing
guessed.

Theory of operation
-------------------
A log folder holds ``actions-<sid>.jsonl``, one per server. `read_logs` reads every file whole and turns each line
into an `Event` (server, line number, kind, timestamp, and the fields of its kind), checking each field's type.
A line that is not what the format says is an `InputError` naming the file and line -- except a torn LAST line of
a file (no newline at the end, or not JSON): the process died while writing it, and the step it describes never
took effect (the runtime flushes the log before a batch's storage and packets), so it is dropped and reported in
`Logs.notes`. A server's lines are numbered ``n`` = 0, 1, ... within each process; a jump is an error (a lost line
would be a step the validator cannot see).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    """One server's events; the second value says why a torn last line was dropped (None: there was none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(path, 0, f"cannot read: {e}") from None
    lines = text.split("\n")
    torn = None
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        torn = f"{path}:{len(lines)}: torn last line dropped (the process died while writing it)"
        lines.pop()
    events: list[Event] = []
    expected_n = 0
    for k, raw in enumerate(lines, 1):
        try:
            obj = json.loads(raw)
        except ValueError as e:
            if k == len(lines) and torn is None:
                torn = f"{path}:{k}: torn last line dropped (not JSON: {e})"
                break
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
        expected_n += 1
        fields = {key: v for key, v in obj.items() if key not in _COMMON}
        events.append(Event(sid, k, str(path), obj["t"], kind, fields))
    if events and events[0].kind != "restart":
        raise _fail(path, events[0].line, "the log does not start with the process's start (a 'restart' line)")
    return events, torn


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
    return logs
