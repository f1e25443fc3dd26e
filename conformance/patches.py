"""Exact text patches: the one mechanism behind spec mutations (spec/mutations) and seeded bugs (conformance/bugs).

Theory of operation: a patch is a list of `[[replace]]` tables -- `file`, `find`, `with` -- applied to a scratch copy
of a folder. Each `find` must occur exactly once in its file: text that no longer occurs (the spec or the code
changed) or occurs twice is an error naming the patch, never a silent no-op.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Replacement", "read_replacements", "apply_replacements"]


@dataclass(frozen=True)
class Replacement:
    file: str
    find: str
    with_: str


def read_replacements(tables: Iterable[dict], default_file: str | None = None) -> tuple[Replacement, ...]:
    """The `[[replace]]` tables of a patch file (KeyError/TypeError when one is malformed: the caller names the
    file)."""
    reps = []
    for table in tables:
        file = table.get("file", default_file)
        if file is None:
            raise KeyError("file")
        if Path(file).is_absolute() or ".." in Path(file).parts:
            raise ValueError(f"file {file!r} must be a relative path inside the patched folder")
        reps.append(Replacement(file, table["find"], table["with"]))
    return tuple(reps)


def apply_replacements(root: Path, replacements: Iterable[Replacement], patch: Path, error: type[Exception],
                       what: str) -> None:
    """Apply every replacement in place under root (a scratch copy); `what` names the folder in messages."""
    for rep in replacements:
        target = Path(root) / rep.file
        try:
            text = target.read_text(encoding="utf-8")
        except OSError as exc:
            raise error(f"{patch}: cannot read {what}/{rep.file}: {exc}") from None
        count = text.count(rep.find)
        if count != 1:
            raise error(f"{patch}: the text to replace occurs {count} times in {what}/{rep.file}, not once "
                        f"({what} changed; update the patch):\n{rep.find}")
        target.write_text(text.replace(rep.find, rep.with_), encoding="utf-8")
