"""The conformance package's one exception tree.

Theory of operation: every error the toolchain, the graph pipeline or the replay driver raises is a
`ConformanceError`, split by who must act on it:

- `ToolchainError`: the machine lacks something (java, tla2tools.jar) or it does not run. Fix the machine.
- `InputError`: a file we were given is wrong. It names the place (`file:line:column`, or a record number) and,
  when the file is readable, quotes the line with a caret under the column, as lark does.
- `SpecError`: SANY or TLC rejected the TLA+ modules or the model config; it carries every diagnostic.

A model-checking *verdict* (an invariant violated, a deadlock) is not an exception: it is the result of a run
(`conformance.tla.tools.TLCResult`). Later stages add their own subclasses below these.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


class ConformanceError(Exception):
    """Root of every error the conformance package raises."""


class ToolchainError(ConformanceError):
    """java or tla2tools.jar is missing, or cannot be run; the message says what was tried."""


@dataclass(frozen=True)
class Location:
    """A place in an input file; line and column count from 1, as editors and TLA+ tools do."""

    file: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def excerpt(self) -> str:
        """The quoted source line with a caret under the column, or "" when the file cannot be read."""
        if self.line is None:
            return ""
        try:
            raw = Path(self.file).read_bytes()
            if raw[:2] == b"\x1f\x8b":  # a gzipped trace: quote the line of its text, not of its bytes
                raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile):
            return ""
        lines = raw.decode("utf-8", errors="replace").splitlines()
        if not 1 <= self.line <= len(lines):
            return ""
        text = lines[self.line - 1].expandtabs(1)
        caret = "" if self.column is None else "\n    " + " " * (self.column - 1) + "^"
        return f"    {text}{caret}"


@dataclass(frozen=True)
class Diagnostic:
    """One message about one place."""

    location: Location
    message: str

    def render(self) -> str:
        excerpt = self.location.excerpt()
        head = f"{self.location}: {self.message}"
        return f"{head}\n{excerpt}" if excerpt else head


class InputError(ConformanceError):
    """A file we were given is malformed; `location` says where."""

    def __init__(self, location: Location, message: str) -> None:
        self.location = location
        self.diagnostic = Diagnostic(location, message)
        super().__init__(self.diagnostic.render())


class SpecError(ConformanceError):
    """SANY or TLC rejected the spec or its config; `diagnostics` holds every message, in the order given."""

    def __init__(self, tool: str, diagnostics: Sequence[Diagnostic], summary: str = "") -> None:
        self.tool = tool
        self.diagnostics = tuple(diagnostics)
        head = summary or f"{tool} rejected the spec"
        body = "\n".join(d.render() for d in self.diagnostics)
        super().__init__(f"{head}:\n{body}" if body else head)


class SpecFormatError(ConformanceError):
    """The spec is not in the form the toolchain reads (e.g. a disjunct of Next it cannot label); names the line."""


# --- the trace pipeline (conformance/graph/pipeline.py, graphparse.py, traces.py)
# -------------------------------------------


class GraphError(InputError):
    """A state graph whose every line is well-formed but which is wrong as a whole (an edge to a state the dump
    never lists, no initial state); `location` names the DOT line."""


class TraceFormatError(InputError):
    """A trace file that is not a well-formed zabref trace; `location` names the file and line (1 = the header)."""


class PipelineError(ConformanceError):
    """The pipeline cannot do what it was asked (an output folder that holds other files, an unknown config)."""


# --- the replay driver (conformance/replay/driver.py, conform.py, seeded.py, minimize.py)
# -------------------------------------


class TraceActionError(InputError):
    """A trace step the replay driver cannot take: an action name it does not know, or parameters missing or of the
    wrong shape; `location` names the trace file and the step's line (line 1 is the header, step k is line k + 2)."""

    def __init__(self, trace: str, step: int, message: str) -> None:
        self.trace, self.step = trace, step
        super().__init__(Location(trace, step + 2), f"step {step}: {message}")


class ConformanceMismatch(ConformanceError):
    """The implementation's state departed from the trace's: the first step where it did, the action taken, and for
    each differing spec variable its expected (spec) and actual (implementation) value."""

    def __init__(self, trace: str, step: int, action: str, expected: dict, actual: dict, message: str = "") -> None:
        self.trace, self.step, self.action, self.expected, self.actual = trace, step, action, expected, actual
        names = ", ".join(sorted(expected)) or "none"
        super().__init__(f"{trace}: step {step} ({action}): {message or 'state differs'}; variables: {names}")


class SeededBugError(ConformanceError):
    """A seeded bug (conformance/replay/bugs/NAME.toml) that is unknown, malformed, or no longer applies to zabref/."""


class MinimizeError(ConformanceError):
    """The minimizer cannot start: no graph, a trace that does not fail, a graph that does not hold the trace."""


class MergeError(ConformanceError):
    """No order of the servers' action logs is a behaviour of the spec by the merge's rules (`zabref validate`); the
    message says where it stuck."""
