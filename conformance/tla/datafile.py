"""Values a generated module reads from a file instead of its own text: ``Datum(file, k)`` of module ZabrefData.

SANY, TLC's parser, spends about a millisecond of CPU on each step record a validation module spells out, more than
TLC spends checking the step (docs/performance.md). So the records, and the states a window starts and ends in, are
written one value a line into a data file beside the module, and the module reads line ``k`` with
``Datum("<file>", k)``, which TLC evaluates with the Java class ZabrefData (conformance/tla/overrides.py says how;
copy its `MODULES` beside the module and run TLC with its `classes`).

A value is written as format_value writes it (conformance/tla/values.py); the Java reader takes exactly that syntax
(integers, strings, booleans, tuples, sets, records) and normalizes sets and records as TLC does, so a value read
from the file equals the same value computed by the spec. A line it cannot read stops TLC naming the file, the line
and the column.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DataFile"]


class DataFile:
    """The lines of a data file being built; `add` returns a value's line number (1-based), `write` writes them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lines: list[str] = []

    def add(self, text: str) -> int:
        if "\n" in text or "\r" in text:
            raise ValueError(f"a value of {self.name} spans lines: {text[:80]!r}")
        self.lines.append(text)
        return len(self.lines)

    def datum(self, text: str) -> str:
        """The TLA+ expression reading ``text`` back: ``Datum("<name>", k)``."""
        return f'Datum("{self.name}", {self.add(text)})'

    def write(self, folder: Path) -> Path:
        path = folder / self.name
        path.write_text("".join(line + "\n" for line in self.lines))
        return path
