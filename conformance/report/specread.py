"""Reading spec/Zab.tla as text for the auditor's map: its top-level definitions, their comments, its variables.

Theory of operation: a definition runs from its ``Name(...) ==`` line to the blank line that ends it, with the
comment block right above it; the variables are the VARIABLES block, each with its comment; `next_groups` reads which
actions Next groups under which heading; `primed` follows definitions to the variables an action primes. No TLA+
parser is needed for this: the spec keeps one definition a paragraph (tests/test_auditmap.py checks the map).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from conformance.errors import SpecFormatError

IDENT = re.compile(r"[A-Za-z_]\w*")  # a TLA+ identifier

__all__ = ["IDENT", "Definition", "read_definitions", "comment_text", "read_variables", "next_groups", "primed"]


_DEF = re.compile(r"^([A-Za-z]\w*)\s*(?:\(([^)]*)\))?\s*==")


@dataclass(frozen=True)
class Definition:
    """A top-level operator of the spec: its text (from its first line to the blank line ending it) and the comment
    right above it."""

    name: str
    line: int  # 1-based line of "Name(...) =="
    end_line: int
    text: str
    comment: str
    comment_line: int


def read_definitions(spec_path: Path) -> dict[str, Definition]:
    """Every top-level `Name == ...` / `Name(params) == ...` of a module, with the comment lines right above it."""
    lines = Path(spec_path).read_text(encoding="utf-8").splitlines()
    defs: dict[str, Definition] = {}
    for k, line in enumerate(lines):
        m = _DEF.match(line)
        if not m or m.group(1) in ("VARIABLES", "CONSTANTS"):
            continue
        end = k + 1
        while end < len(lines) and lines[end].strip() and lines[end][:1].isspace():
            end += 1
        top = k
        while top > 0 and lines[top - 1].startswith(("\\*", "(*")):
            top -= 1
        defs[m.group(1)] = Definition(m.group(1), k + 1, end, "\n".join(lines[k:end]),
                                      "\n".join(lines[top:k]), top + 1)
    return defs


def comment_text(comment: str) -> str:
    """A TLA+ comment as plain prose: box borders and comment marks removed, lines joined."""
    out = []
    for line in comment.splitlines():
        s = line.strip()
        if s.startswith("\\*"):
            s = s[2:]
        s = s.strip().removeprefix("(*").removesuffix("*)").strip()
        if s.strip("*") == "":
            continue
        out.append(s)
    return " ".join(out)


def read_variables(spec_path: Path) -> list[tuple[str, int, str, str]]:
    """(name, line, comment, group heading) for each name of the VARIABLES block, in order."""
    lines = Path(spec_path).read_text(encoding="utf-8").splitlines()
    try:
        start = next(k for k, line in enumerate(lines) if line.strip() == "VARIABLES")
    except StopIteration:
        raise SpecFormatError(f"{spec_path}: no VARIABLES block") from None
    out, group = [], ""
    for k in range(start + 1, len(lines)):
        s = lines[k].strip()
        if not s:
            break
        heading = re.match(r"^\\\*\s*-+\s*(.*?)\s*-+\s*$", s)
        if heading:
            group = heading.group(1)
            continue
        m = re.match(r"^(\w+),?\s*(?:\\\*\s*(.*))?$", s)
        if not m:
            raise SpecFormatError(f"{spec_path}:{k + 1}: not a variable line: {s!r}")
        out.append((m.group(1), k + 1, m.group(2) or "", group))
    return out


def next_groups(spec_path: Path) -> dict[str, str]:
    """Action name -> the comment heading its group in Next ("Phase 1: discovery")."""
    lines = Path(spec_path).read_text(encoding="utf-8").splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("Next =="))
    groups, current = {}, ""
    for line in lines[start + 1:]:
        s = line.strip()
        if not s:
            break
        if s.startswith("\\*"):
            current = s[2:].strip()
        elif s.startswith("\\/"):
            m = re.search(r"([A-Z]\w*)\s*(?:\(|$)", s.split(":")[-1])
            if m:
                groups[m.group(1)] = current
    return groups


def primed(name: str, defs: dict[str, Definition], variables: list[str], seen: set[str] | None = None) -> set[str]:
    """The variables `name`'s definition primes, itself or through the operators it calls."""
    seen = set() if seen is None else seen
    seen.add(name)
    text = defs[name].text.split("==", 1)[1]
    out = {v for v in variables if re.search(rf"\b{v}'", text)}
    for ident in set(IDENT.findall(text)):
        if ident in defs and ident not in seen:
            out |= primed(ident, defs, variables, seen)
    return out
