"""The trace file format (conformance/graph/traces.py): round trip, reproducible bytes, errors that name file:line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conformance.errors import PipelineError, TraceFormatError
from conformance.graph.traces import OutputDir, Step, Trace, TraceHeader, dump_trace, read_trace, spec_sha256

HEADER = TraceHeader("ab" * 32, "tiny", {"N": 3, "MaxEpoch": 1}, "TLC2 Version 2.15", "action",
                     ("ElectLeader__2__S1_2",))
STATE0 = {"state": ["LOOKING", "LOOKING", "LOOKING"], "proposed": {"$set": []}, "faults": 0}
STATE1 = {"state": ["LOOKING", "LEADING", "FOLLOWING"], "proposed": {"$set": [[1, 2]]}, "faults": 0}
TRACE = Trace(HEADER, (
    Step(0, "Init", {}, None, -6845051193718918192, STATE0),
    Step(1, "ElectLeader", {"i": 2, "Q": {"$set": [1, 2]}}, "ElectLeader__2__S1_2", 3889891172804996002, STATE1),
))


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    dump_trace(path, TRACE)
    assert read_trace(path) == TRACE


def test_files_are_byte_for_byte_reproducible(tmp_path: Path) -> None:
    dump_trace(tmp_path / "a.jsonl.gz", TRACE)
    dump_trace(tmp_path / "b.jsonl.gz", TRACE)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()


def test_header_is_the_first_line_with_every_field(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    dump_trace(path, TRACE)
    header = json.loads(gzip.open(path, "rt").readline())
    assert header == {"format": "zabref-trace", "version": 1, "spec_sha256": "ab" * 32, "config": "tiny",
                      "constants": {"N": 3, "MaxEpoch": 1}, "tlc_version": "TLC2 Version 2.15",
                      "criterion": "action", "covers": ["ElectLeader__2__S1_2"]}


def _lines(path: Path) -> list[str]:
    return gzip.open(path, "rt").read().splitlines()


def _write_lines(path: Path, lines: list[str]) -> None:
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def _edit(line: str, **changes) -> str:
    obj = json.loads(line)
    for key, value in changes.items():
        if value is KeyError:
            del obj[key]
        else:
            obj[key] = value
    return json.dumps(obj)


@pytest.mark.parametrize("line, edit, message", [
    (1, lambda s: s[:-5], "not JSON"),
    (3, lambda s: s.replace('"index":1', '"index":1,,'), "not JSON"),
    (1, lambda s: _edit(s, format="other"), "this reader knows"),
    (1, lambda s: _edit(s, spec_sha256=KeyError), "lacks spec_sha256"),
    (1, lambda s: _edit(s, criterion="random"), "unknown criterion"),
    (1, lambda s: _edit(s, covers=["FollowerTimeout__1"]), "covers labels the trace never takes"),
    (2, lambda s: _edit(s, action="ElectLeader"), "only step 0, is the initial state"),
    (3, lambda s: _edit(s, index=7), "step index 7, expected 1"),
    (3, lambda s: _edit(s, node="12"), "'node' has the wrong type"),
    (3, lambda s: _edit(s, label=None), "needs the label"),
    (3, lambda s: _edit(s, state={"faults": 0}), "variables differ"),
    (3, lambda s: _edit(s, extra=1), "unknown extra"),
])
def test_corrupt_trace_names_file_and_line(tmp_path: Path, line: int, edit, message: str) -> None:
    path = tmp_path / "t.jsonl.gz"
    dump_trace(path, TRACE)
    lines = _lines(path)
    lines[line - 1] = edit(lines[line - 1])
    _write_lines(path, lines)
    with pytest.raises(TraceFormatError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}:{line}")
    assert message in str(err.value)


def test_truncated_gzip_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    dump_trace(path, TRACE)
    path.write_bytes(path.read_bytes()[:-12])
    with pytest.raises(TraceFormatError, match=f"^{path}: not a readable gzip"):
        read_trace(path)


def test_a_header_alone_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    dump_trace(path, TRACE)
    _write_lines(path, _lines(path)[:1])
    with pytest.raises(TraceFormatError, match="at least its initial state"):
        read_trace(path)


def test_spec_hash_covers_the_model_s_modules_and_cfg_only(tmp_path: Path) -> None:
    (tmp_path / "Zab.tla").write_text("---- MODULE Zab ----\n====\n")
    (tmp_path / "MC_x.tla").write_text("---- MODULE MC_x ----\nEXTENDS Zab, TLC\n====\n")
    (tmp_path / "MC_x.cfg").write_text("CONSTANTS N = 3\n")
    before = spec_sha256(tmp_path, "x")
    (tmp_path / "README.md").write_text("docs do not count")
    (tmp_path / "Other.tla").write_text("---- MODULE Other ----\n====\n")  # nor a module the model does not use
    (tmp_path / "MC_y.cfg").write_text("CONSTANTS N = 5\n")  # nor another model
    assert spec_sha256(tmp_path, "x") == before
    for name, text in (("MC_x.cfg", "CONSTANTS N = 5\n"), ("Zab.tla", "---- MODULE Zab ----\nX == 1\n====\n")):
        (tmp_path / name).write_text(text)
        assert spec_sha256(tmp_path, "x") != before, name
        before = spec_sha256(tmp_path, "x")


def test_output_dir_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "traces"
    with pytest.raises(RuntimeError):
        with OutputDir(target) as tmp:
            (tmp / "a.jsonl.gz").write_bytes(b"x")
            raise RuntimeError("boom")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with OutputDir(target) as tmp:
        (tmp / "manifest.json").write_text("{}")
    assert sorted(p.name for p in target.iterdir()) == ["manifest.json"]
    with OutputDir(target) as tmp:  # a previous run's folder is replaced
        (tmp / "manifest.json").write_text('{"again": 1}')
    assert (target / "manifest.json").read_text() == '{"again": 1}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


def test_output_dir_refuses_a_folder_that_is_not_a_trace_folder(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(PipelineError, match="not a trace folder"):
        OutputDir(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "keep me"
