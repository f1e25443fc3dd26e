"""The conformance trace file: gzip JSON Lines, one trace per file, read back with every field checked.

Theory of operation: a trace is a path through TLC's state graph from an initial state. Its file holds a header
line, then one line per step (docs/traces.md has the full format):

    {"format":"zabref-trace","version":1,"spec_sha256":...,"config":"ci","constants":{"N":3,...},
     "tlc_version":"TLC2 Version 2.15 ...","criterion":"action","covers":["FollowerProcessDIFF__2__1"]}
    {"index":0,"action":"Init","params":{},"label":null,"node":3889891172804996002,"state":{...}}
    {"index":1,"action":"ElectLeader","params":{"Q":{"$set":[1,2]},"i":2},"label":"ElectLeader__2__S1_2",...}

`state` is the spec state after the step in the canonical form of conformance/tla/values.py, so the replay compares it
with the implementation's state by plain equality. The writer never re-serializes a state: the pipeline hands it the
canonical JSON text it already has (`step_line`). Files are byte-for-byte reproducible (gzip with no name and no
time stamp). `read_trace` checks every line and names file:line on the first problem (`TraceFormatError`).

`OutputDir` makes a folder of outputs appear whole or not at all: everything is written into a temporary sibling,
which is renamed into place only when the block ends without an exception.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from conformance.errors import Location, PipelineError, TraceFormatError
from zabref.storage.atomic import staged_folder

__all__ = ["FORMAT", "VERSION", "TraceHeader", "Step", "Trace", "spec_sha256", "model_modules", "step_line",
           "header_line", "write_trace", "read_trace", "OutputDir", "MANIFEST", "write_manifest"]

FORMAT, VERSION, MANIFEST = "zabref-trace", 1, "manifest.json"
CRITERIA = ("action", "edge", "scenario")  # scenario: a committed regression trace (conformance/replay/regress.py)


@dataclass(frozen=True)
class TraceHeader:
    spec_sha256: str
    config: str
    constants: dict[str, Any]
    tlc_version: str
    criterion: str
    covers: tuple[str, ...]

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": VERSION, "spec_sha256": self.spec_sha256, "config": self.config,
                "constants": self.constants, "tlc_version": self.tlc_version, "criterion": self.criterion,
                "covers": list(self.covers)}


@dataclass(frozen=True)
class Step:
    """One step: the action taken (Init for step 0), its parameters by name, the edge label, the state after it."""

    index: int
    action: str
    params: dict[str, Any]
    label: str | None
    node: int
    state: dict[str, Any]


@dataclass(frozen=True)
class Trace:
    header: TraceHeader
    steps: tuple[Step, ...]

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.steps[1:])


def spec_sha256(spec_dir: Path, config: str) -> str:
    """SHA-256 over the files model ``config`` is made of: MC_<config>.tla and every module of ``spec_dir`` it
    EXTENDS or INSTANCEs, transitively (`model_modules`), in name order, then MC_<config>.cfg; for each its name, a
    NUL, the SHA-256 of its bytes in hex, and a newline. An edit to any of them changes it; another model added to
    the folder, or a file of another model edited, does not (the trace cache is keyed by its first 16 digits)."""
    spec_dir = Path(spec_dir)
    files = [spec_dir / f"{name}.tla" for name in model_modules(spec_dir, f"MC_{config}")]
    digest = hashlib.sha256()
    for path in files + [spec_dir / f"MC_{config}.cfg"]:
        digest.update(f"{path.name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()


_USES = re.compile(r"\b(?:EXTENDS|INSTANCE)\b([^\n]*)")


def model_modules(spec_dir: Path, root: str) -> list[str]:
    """The modules of ``spec_dir`` that module ``root`` is made of (itself included), sorted: those it EXTENDS or
    INSTANCEs, transitively. A name with no file in the folder (a standard module: TLC, Sequences) is skipped."""
    found: set[str] = set()
    todo = [root]
    while todo:
        name = todo.pop()
        path = Path(spec_dir) / f"{name}.tla"
        if name in found or not path.is_file():
            continue
        found.add(name)
        text = re.sub(r"\\\*[^\n]*|\(\*.*?\*\)", "", path.read_text(), flags=re.S)  # comments
        for match in _USES.finditer(text):
            todo += re.findall(r"[A-Za-z_][A-Za-z0-9_]*", match.group(1).split("WITH")[0])
    return sorted(found)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def header_line(header: TraceHeader) -> str:
    # Fields in the documented order (format first), constants sorted.
    obj = header.to_json()
    obj["constants"] = dict(sorted(obj["constants"].items()))
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def step_line(index: int, action: str, params_json: str, label: str | None, node: int, state_json: str) -> str:
    """A step's line from canonical JSON texts (params and state are embedded as they are, not re-serialized)."""
    return (f'{{"index":{index},"action":{_dumps(action)},"params":{params_json},"label":{_dumps(label)},'
            f'"node":{node},"state":{state_json}}}')


def write_trace(path: Path, header: TraceHeader, lines: Iterable[str]) -> None:
    """Write a trace (header, then the step lines) to `path`, reproducibly; callers write into an OutputDir."""
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
        f.write((header_line(header) + "\n").encode())
        for line in lines:
            f.write((line + "\n").encode())


def dump_trace(path: Path, trace: Trace) -> None:
    """Write a `Trace` built in Python (tests, tools); the pipeline uses `write_trace` with pre-rendered steps."""
    write_trace(path, trace.header, (
        step_line(s.index, s.action, _dumps(s.params), s.label, s.node, _dumps(s.state)) for s in trace.steps))


# ---------------------------------------------------------------------------------------------------------------
# Reading, with every field checked

_HEADER_TYPES = {"format": str, "version": int, "spec_sha256": str, "config": str, "constants": dict,
                 "tlc_version": str, "criterion": str, "covers": list}
_STEP_TYPES = {"index": int, "action": str, "params": dict, "label": (str, type(None)), "node": int, "state": dict}


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write a trace folder's manifest.json (`MANIFEST`): indented, keys sorted, one final newline."""
    (Path(folder) / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _fail(path: Path, line: int, message: str) -> TraceFormatError:
    return TraceFormatError(Location(str(path), line), message)


def _check_fields(path: Path, line: int, obj: Any, types: dict, what: str) -> None:
    if not isinstance(obj, dict):
        raise _fail(path, line, f"the {what} must be a JSON object, not {type(obj).__name__}")
    missing = [k for k in types if k not in obj]
    extra = sorted(set(obj) - set(types))
    if missing or extra:
        raise _fail(path, line, f"the {what} " + "; ".join(
            ([f"lacks {', '.join(missing)}"] if missing else []) + ([f"has unknown {', '.join(extra)}"] if extra else [])))
    for key, kind in types.items():
        if not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
            raise _fail(path, line, f"{what} field {key!r} has the wrong type ({type(obj[key]).__name__})")


def _lines(path: Path) -> list[str]:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise TraceFormatError(Location(str(path)), f"not a readable gzip text file: {e}") from None


def read_trace(path: Path) -> Trace:
    """Read and check a trace file; TraceFormatError names file:line on the first problem."""
    path = Path(path)
    lines = _lines(path)
    if not lines:
        raise _fail(path, 1, "empty file: expected a header line")
    objs = []
    for number, text in enumerate(lines, 1):
        try:
            objs.append(json.loads(text))
        except json.JSONDecodeError as e:
            raise TraceFormatError(Location(str(path), number, e.colno), f"not JSON: {e.msg}") from None
    head = objs[0]
    _check_fields(path, 1, head, _HEADER_TYPES, "header")
    if head["format"] != FORMAT or head["version"] != VERSION:
        raise _fail(path, 1, f"format {head['format']!r} version {head['version']}: this reader knows "
                             f"{FORMAT!r} version {VERSION}")
    if head["criterion"] not in CRITERIA:
        raise _fail(path, 1, f"unknown criterion {head['criterion']!r} (known: {', '.join(CRITERIA)})")
    header = TraceHeader(head["spec_sha256"], head["config"], head["constants"], head["tlc_version"],
                         head["criterion"], tuple(head["covers"]))
    if len(objs) < 2:
        raise _fail(path, 1, "a trace needs at least its initial state (step 0)")
    steps = []
    for number, obj in enumerate(objs[1:], 2):
        _check_fields(path, number, obj, _STEP_TYPES, "step")
        index = number - 2
        if obj["index"] != index:
            raise _fail(path, number, f"step index {obj['index']}, expected {index}")
        if (index == 0) != (obj["action"] == "Init"):
            raise _fail(path, number, "step 0, and only step 0, is the initial state (action 'Init')")
        if index == 0 and (obj["params"] or obj["label"] is not None):
            raise _fail(path, number, "step 0 (Init) has no parameters and no label")
        if index > 0 and obj["label"] is None:
            raise _fail(path, number, "a step after the initial state needs the label of its edge")
        if steps and set(obj["state"]) != set(steps[0].state):
            raise _fail(path, number, "the state's variables differ from the initial state's: "
                                      f"{sorted(set(obj['state']) ^ set(steps[0].state))}")
        steps.append(Step(obj["index"], obj["action"], obj["params"], obj["label"], obj["node"], obj["state"]))
    missing = set(header.covers) - {s.label for s in steps[1:]}
    if missing:
        raise _fail(path, 1, f"covers labels the trace never takes: {', '.join(sorted(missing))}")
    return Trace(header, tuple(steps))


# ---------------------------------------------------------------------------------------------------------------
# Whole folders, atomically


class OutputDir:
    """`with OutputDir(target) as tmp:` write into tmp; on success tmp becomes target, on an exception it vanishes.

    A target that exists is replaced only when it is empty or holds a previous run's manifest.json (so a wrong
    path never deletes someone's files); the old folder is removed after the new one is in place.
    """

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        if self.target.exists() and (not self.target.is_dir() or (
                any(self.target.iterdir()) and not (self.target / MANIFEST).is_file())):
            raise PipelineError(f"{self.target} exists and is not a trace folder (no {MANIFEST}); "
                                "refusing to replace it")

    def __enter__(self) -> Path:
        self._staged = staged_folder(self.target)
        return self._staged.__enter__()

    def __exit__(self, kind, value, tb) -> None:
        self._staged.__exit__(kind, value, tb)
