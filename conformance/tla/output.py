"""Reading what TLC and SANY print.

Theory of operation: TLC runs with `-tool`, which brackets every message as

    @!@!@STARTMSG 2110:1 @!@!@
    Invariant SmallSum is violated.
    @!@!@ENDMSG 2110 @!@!@

where 2110 is a code from TLC's `tlc2.output.EC` and 1 a severity from `tlc2.output.MP` (0 none, 1 error, 2 TLC
bug, 3 warning, 4 state). Codes are stable across TLC releases and are what the Toolbox and the VS Code extension
read, so the verdict here is decided by codes, never by matching English sentences; a message's text is read only
for the numbers and names inside it (which invariant, how many states). Lines outside any bracket (SANY's
"Parsing file ...", Java's own errors) become messages with code 0.

SANY has no such mode. Its output is read line by line into `Diagnostic`s: parse and lexical errors give a line
and column in the file being parsed at the time; semantic errors and warnings give "line L, col C to ... of module
M", mapped back to M's file through the "Parsing file" lines. SANY exits 0 even on semantic errors, so the caller
must look at the diagnostics, not only at the exit code.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from conformance.errors import Diagnostic, Location


class Code(enum.IntEnum):
    """The `tlc2.output.EC` codes this module acts on."""

    OTHER = 0  # a line outside any STARTMSG/ENDMSG bracket
    INVARIANT_VIOLATED_INITIAL = 2107
    PROPERTY_VIOLATED_INITIAL = 2108
    INVARIANT_VIOLATED_BEHAVIOR = 2110
    ACTION_PROPERTY_VIOLATED_BEHAVIOR = 2112
    DEADLOCK_REACHED = 2114
    TEMPORAL_PROPERTY_VIOLATED = 2116
    BEHAVIOR_UP_TO_THIS_POINT = 2121
    BACK_TO_STATE = 2122
    STARTING = 2185
    FINISHED = 2186
    COMPUTING_INIT = 2189
    INIT_GENERATED = 2190
    CHECKING_TEMPORAL_PROPS = 2192
    SUCCESS = 2193
    SEARCH_DEPTH = 2194
    STATS = 2199
    PROGRESS_STATS = 2200
    COVERAGE_START = 2201
    COVERAGE_END = 2202
    STATE_PRINT2 = 2217
    STATE_PRINT3 = 2218
    VERSION = 2262
    COVERAGE_NEXT = 2772
    COVERAGE_INIT = 2773


class Severity(enum.IntEnum):
    """`tlc2.output.MP` message classes."""

    NONE = 0
    ERROR = 1
    TLC_BUG = 2
    WARNING = 3
    STATE = 4


@dataclass(frozen=True)
class TLCMessage:
    """One TLC message: its EC code (0 for a bare line), severity and text without the brackets."""

    code: int
    severity: int
    text: str


class MessageSplitter:
    """Turns TLC's `-tool` output, fed one line at a time, into `TLCMessage`s."""

    _START = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
    _END = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")

    def __init__(self) -> None:
        self._open: list[tuple[int, int, list[str]]] = []  # TLC may nest brackets: keep a stack

    def feed(self, line: str) -> list[TLCMessage]:
        line = line.rstrip("\r\n")
        if m := self._START.match(line):
            self._open.append((int(m[1]), int(m[2]), []))
            return []
        if (m := self._END.match(line)) and self._open:
            code, severity, lines = self._open.pop()
            return [TLCMessage(code, severity, "\n".join(lines).rstrip("\n"))]
        if self._open:
            self._open[-1][2].append(line)
            return []
        return [TLCMessage(Code.OTHER, Severity.NONE, line)]

    def close(self) -> list[TLCMessage]:
        """Messages left open when TLC died mid-message."""
        out = [TLCMessage(code, sev, "\n".join(lines)) for code, sev, lines in reversed(self._open)]
        self._open.clear()
        return out


class Outcome(str, enum.Enum):
    OK = "ok"
    INVARIANT_VIOLATED = "invariant violated"
    PROPERTY_VIOLATED = "property violated"
    DEADLOCK = "deadlock"
    ERROR = "error"


@dataclass(frozen=True)
class TraceState:
    """One state of a counterexample: its number, the action that led to it, and each variable's TLA+ text."""

    index: int
    action: str  # "Initial predicate", an action name, "Stuttering" or "Back to state"
    location: str | None  # "line 7, col 9 to line 7, col 42 of module Toy" when TLC gives one
    variables: tuple[tuple[str, str], ...]

    def render(self) -> str:
        where = f" {self.location}" if self.location else ""
        body = "\n".join(f"/\\ {name} = {value}" for name, value in self.variables)
        return f"State {self.index}: <{self.action}{where}>\n{body}\n"


@dataclass(frozen=True)
class ActionCoverage:
    """TLC's `-coverage` line for one action: `<Name line L, col C ... of module M>: distinct:generated`."""

    action: str
    module: str
    line: int
    column: int
    distinct: int  # states this action found first
    generated: int  # states this action generated, new or not


@dataclass
class Verdict:
    """What the messages of one TLC run said; `conformance.tla.tools` adds the run's context around it."""

    outcome: Outcome = Outcome.ERROR
    violated: str | None = None
    message: str = ""
    distinct_states: int | None = None
    states_generated: int | None = None
    states_left: int | None = None
    depth: int | None = None
    trace: list[TraceState] = field(default_factory=list)
    coverage: list[ActionCoverage] = field(default_factory=list)
    tlc_version: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)  # the last bare lines, for errors that come with no code


_NUM = r"([\d,]+)"
_STATS = re.compile(rf"{_NUM} states generated.*?{_NUM} distinct states found.*?{_NUM} states left on queue")
_DEPTH = re.compile(r"depth of the complete state graph search is (\d+)")
_NAMED = re.compile(r"(?:Invariant|property) (\S+?) is violated")
_STATE_HEAD = re.compile(r"^(\d+): (?:(Back to state): )?<(.*?)(?: (line \d+, col \d+ to line \d+, col \d+ of module \w+))?>\s*$"
                         r"|^(\d+): (Stuttering)\s*$")
_COVERAGE = re.compile(r"^<(\w+) line (\d+), col (\d+) to line \d+, col \d+ of module (\w+)>: (\d+):(\d+)")
_VIOLATIONS = {
    Code.INVARIANT_VIOLATED_INITIAL: Outcome.INVARIANT_VIOLATED,
    Code.INVARIANT_VIOLATED_BEHAVIOR: Outcome.INVARIANT_VIOLATED,
    Code.PROPERTY_VIOLATED_INITIAL: Outcome.PROPERTY_VIOLATED,
    Code.ACTION_PROPERTY_VIOLATED_BEHAVIOR: Outcome.PROPERTY_VIOLATED,
    Code.TEMPORAL_PROPERTY_VIOLATED: Outcome.PROPERTY_VIOLATED,
    Code.DEADLOCK_REACHED: Outcome.DEADLOCK,
}


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_state(text: str) -> TraceState:
    """Parse one STATE_PRINT message: `N: <Action line ...>` then `/\\ var = value` conjuncts."""
    head, _, body = text.partition("\n")
    m = _STATE_HEAD.match(head)
    if not m:
        raise ValueError(f"not a TLC state header: {head!r}")
    if m[5]:  # a liveness counterexample ends stuttering: no variables follow
        return TraceState(int(m[5]), m[6], None, ())
    # `N: Back to state: <Action ...>` closes a liveness counterexample's loop (state N repeats)
    action = m[2] or m[3]
    conjuncts: list[str] = []
    for line in body.rstrip("\n").split("\n"):
        if line.startswith("/\\ ") or not conjuncts:
            conjuncts.append(line.removeprefix("/\\ "))
        else:  # a long value TLC wrapped onto indented lines
            conjuncts[-1] += "\n" + line
    variables = []
    for conjunct in conjuncts:
        name, eq, value = conjunct.partition(" = ")
        if eq:
            variables.append((name.strip(), value))
    return TraceState(int(m[1]), action, m[4], tuple(variables))


def read_messages(messages: Iterable[TLCMessage], verdict: Verdict | None = None) -> Verdict:
    """Fold TLC's messages into a `Verdict` (the outcome stays ERROR until a success or a violation is seen)."""
    v = verdict or Verdict()
    for msg in messages:
        code, text = msg.code, msg.text
        if code == Code.OTHER:
            v.tail = (v.tail + [text])[-20:]
        elif code == Code.VERSION:
            v.tlc_version = text.strip()
        elif code == Code.SUCCESS:
            v.outcome, v.message = Outcome.OK, text.strip()
        elif code in _VIOLATIONS:
            v.outcome, v.message = _VIOLATIONS[Code(code)], text.strip()
            named = _NAMED.search(text)
            v.violated = named[1] if named else None
        elif code in (Code.STATE_PRINT2, Code.STATE_PRINT3, Code.BACK_TO_STATE):
            v.trace.append(parse_state(text))
        elif code in (Code.STATS, Code.PROGRESS_STATS):
            if m := _STATS.search(text):
                v.states_generated, v.distinct_states, v.states_left = (_int(g) for g in m.groups())
        elif code == Code.SEARCH_DEPTH:
            if m := _DEPTH.search(text):
                v.depth = int(m[1])
        elif code == Code.COVERAGE_START:
            v.coverage = []  # TLC repeats the whole table periodically: keep the latest
        elif code in (Code.COVERAGE_NEXT, Code.COVERAGE_INIT):
            if m := _COVERAGE.match(text):
                v.coverage.append(ActionCoverage(m[1], m[4], int(m[2]), int(m[3]), int(m[5]), int(m[6])))
        elif msg.severity in (Severity.ERROR, Severity.TLC_BUG) and code != Code.BEHAVIOR_UP_TO_THIS_POINT:
            v.errors.append(text.strip())
        elif msg.severity == Severity.WARNING:
            v.warnings.append(text.strip())
    return v


def settle(v: Verdict, exit_code: int) -> Verdict:
    """Decide the outcome once TLC has exited: success needs both TLC's success message and exit code 0."""
    if v.outcome is Outcome.OK and (exit_code != 0 or v.errors):
        v.outcome = Outcome.ERROR
    if v.outcome is Outcome.ERROR:
        lines = v.errors or [line for line in v.tail if line.strip()][-5:]
        v.message = "\n".join(lines) or f"TLC exited with code {exit_code} and printed no error"
    return v


# --- SANY ---------------------------------------------------------------------------------------------------------

_PARSING = re.compile(r"^Parsing file (.+)$")
_SEMANTIC_LOC = re.compile(r"^line (\d+), col (\d+) to line \d+, col \d+ of module (\w+)\s*$")
_AT_LINE = re.compile(r"at line (\d+), column (\d+)")
_LEXICAL = re.compile(r"^Lexical error at line (\d+), column (\d+)\.\s*(.*)$")
_NOT_FOUND = re.compile(r"^(?:Cannot find the specified file (.+?)\.|File does not exist: (\S+))")


def parse_sany_output(lines: Iterable[str]) -> tuple[list[Diagnostic], list[Diagnostic]]:
    """Errors and warnings from SANY's output, each located at file:line:column."""
    modules: dict[str, str] = {}
    current = "<unknown>"
    errors: list[Diagnostic] = []
    warnings: list[Diagnostic] = []
    section: list[Diagnostic] | None = None  # where located blocks go: errors or warnings
    block: tuple[Location, list[str]] | None = None
    parse_error: list[str] | None = None

    def flush() -> None:
        nonlocal block
        if block is not None and section is not None:
            section.append(Diagnostic(block[0], " ".join(block[1]) or "(no message)"))
        block = None

    for raw in lines:
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if parse_error is not None:  # inside "***Parse Error***" up to "Residual stack trace"
            if stripped.startswith("Residual stack trace") or stripped.startswith("Fatal errors"):
                text = "; ".join(parse_error)
                at = _AT_LINE.search(text)
                loc = Location(current, int(at[1]), int(at[2])) if at else Location(current)
                errors.append(Diagnostic(loc, f"parse error: {text}"))
                parse_error = None
            elif stripped:
                parse_error.append(stripped)
            continue
        if m := _PARSING.match(stripped):
            current = m[1]
            modules[Path(current).stem] = current
        elif stripped == "***Parse Error***":
            flush()
            parse_error = []
        elif m := _LEXICAL.match(stripped):
            errors.append(Diagnostic(Location(current, int(m[1]), int(m[2])), f"lexical error: {m[3]}"))
        elif m := _NOT_FOUND.match(stripped):
            errors.append(Diagnostic(Location(m[1] or m[2]), "file not found"))
        elif stripped.startswith("*** Errors:"):
            flush()
            section = errors
        elif stripped.startswith("*** Warnings:"):
            flush()
            section = warnings
        elif section is not None and (m := _SEMANTIC_LOC.match(stripped)):
            flush()
            block = (Location(modules.get(m[3], f"{m[3]}.tla"), int(m[1]), int(m[2])), [])
        elif block is not None and stripped:
            block[1].append(stripped)
    flush()
    return errors, warnings
