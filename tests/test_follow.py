"""The parse stage streamed (`zabref traces --stream`, conformance/graph/follow.py): the dump read in byte ranges while
it is written gives the same Parquet rows as the whole file, a bad line stops the writer and names its file line, and
a writer that fails leaves nothing behind.

The writer is TLC itself in the end-to-end test and a stand-in otherwise: a Python child that writes a dump to the
partial file `run_tlc` would use, in slices with pauses (so the stream sees many batches), then renames it as
`run_tlc` does, or fails."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pipeline import SPEC, _run

from conformance.errors import PipelineError
from conformance.graph.follow import DumpFollower, read_lines, split_range
from conformance.tla.values import ParseError


@pytest.fixture(scope="module")
def spark():
    from conformance.graph.spark import session

    return session("local[2]")


WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from conformance.tla.tools import partial_dump
    src, dot = sys.argv[1], Path(sys.argv[2])
    step, bad_line, code = (int(x) for x in sys.argv[3:6])
    lines = Path(src).read_bytes().splitlines(keepends=True)
    if bad_line:
        lines[bad_line - 1] = b"garbled -> line\\n"
    data = b"".join(lines)
    partial = partial_dump(dot, os.getpid())
    with open(partial, "wb") as f:
        for at in range(0, len(data), step):
            if code and at > len(data) // 2:
                break
            f.write(data[at:at + step])
            f.flush()
            time.sleep(0.25)
    if bad_line:
        time.sleep(120)  # a TLC still running when the stream finds the bad line: the follower must stop it
    if code:
        os.unlink(partial)
        sys.exit(code)
    os.replace(partial, dot)
""")


def _writer(source: Path, dot: Path, step: int, bad_line: int = 0, code: int = 0) -> list[str]:
    return [sys.executable, "-c", WRITER, str(source), str(dot), str(step), str(bad_line), str(code)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="ab\n", max_size=30), max_size=8), st.integers(1, 6), st.data())
def test_consecutive_ranges_read_every_line_once(tmp_path_factory, chunks, parts, data) -> None:
    path = tmp_path_factory.mktemp("ranges") / "f"
    text = "".join(chunks)
    path.write_text(text)
    size = len(text)
    cuts = sorted(data.draw(st.lists(st.integers(0, size), max_size=5)))
    read = []
    for a, b in zip([0, *cuts], [*cuts, size]):
        read += list(read_lines(str(path), a, b))
    assert read == text.splitlines(keepends=True)
    pieces = split_range(0, size, parts)
    assert pieces == [] if size == 0 else pieces[0][0] == 0 and pieces[-1][1] == size
    assert all(a < b for a, b in pieces) and all(x[1] == y[0] for x, y in zip(pieces, pieces[1:]))


def _rows(spark, parquet: str) -> tuple[list, list]:
    return (sorted(map(tuple, spark.read.parquet(f"{parquet}/nodes").collect())),
            sorted(map(tuple, spark.read.parquet(f"{parquet}/edges").collect())))


def _parse_stream(spark, command, dot: Path, parquet: str, chunk: int):
    from conformance.graph.pipeline import load_model, parse_stream

    lines: list[str] = []
    with DumpFollower(command, dot, chunk, poll=0.05) as follower:
        try:
            result = parse_stream(spark, follower, load_model(SPEC, "tiny"), parquet, 2, lines.append)
        finally:
            proc = follower.proc
    return result, lines, proc


def test_a_dump_read_while_it_is_written_gives_the_rows_of_the_whole_file(spark, tiny_dot: Path,
                                                                       tmp_path: Path) -> None:
    from conformance.graph.pipeline import load_model, parse_graph

    whole = str(tmp_path / "whole.parquet")
    parse_graph(spark, str(tiny_dot), load_model(SPEC, "tiny"), whole, 3, lambda line: None)
    dot = tmp_path / "tiny.dot"
    (nodes, edges, n_nodes, n_edges), lines, _ = _parse_stream(spark, _writer(tiny_dot, dot, 1 << 20), dot,
                                                               str(tmp_path / "streamed.parquet"), 2 << 20)
    batches = [line for line in lines if "as TLC writes it" in line]
    assert len(batches) >= 4, lines  # read in many ranges, not once at the end
    assert _rows(spark, whole) == _rows(spark, str(tmp_path / "streamed.parquet"))
    assert (n_nodes, n_edges) == (nodes.count(), edges.count())
    assert dot.read_bytes() == tiny_dot.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["streamed.parquet", "tiny.dot", "whole.parquet"]


def test_a_bad_line_in_a_late_batch_stops_the_writer_and_names_its_line(spark, tiny_dot: Path,
                                                                        tmp_path: Path) -> None:
    dot = tmp_path / "tiny.dot"
    bad = len(tiny_dot.read_bytes().splitlines()) * 3 // 5  # batches before it, and more written after it
    started = time.monotonic()
    with pytest.raises(ParseError) as err:
        _parse_stream(spark, _writer(tiny_dot, dot, 1 << 20, bad_line=bad), dot, str(tmp_path / "g.parquet"), 2 << 20)
    assert str(err.value).startswith(f"{dot}:{bad}:"), str(err.value)
    assert time.monotonic() - started < 100  # the writer (asleep for 120 s) was stopped, not waited for
    assert list(tmp_path.iterdir()) == []  # no Parquet, no link, and the stopped writer's partial dump removed


def test_a_writer_that_fails_ends_the_stream_with_its_exit_code(spark, tiny_dot: Path,
                                                                tmp_path: Path) -> None:
    dot = tmp_path / "tiny.dot"
    with pytest.raises(PipelineError, match="exited with code 12"):
        _parse_stream(spark, _writer(tiny_dot, dot, 1 << 20, code=12), dot, str(tmp_path / "g.parquet"), 2 << 20)
    assert list(tmp_path.iterdir()) == []


def test_zabref_traces_stream_runs_tlc_and_gives_the_traces_of_the_dump(spark, tiny_dot: Path, tmp_path: Path) -> None:
    expected = tmp_path / "expected"
    whole, _ = _run(spark, tiny_dot, expected, parquet=str(tmp_path / "whole.parquet"))
    tmp_path = tmp_path / "streamed"
    tmp_path.mkdir()
    dot = tmp_path / "tiny.dot"
    summary, lines = _run(spark, dot, tmp_path / "traces", parquet=str(tmp_path / "graph.parquet"),
                          stream_chunk=1 << 20)
    assert any(line.startswith("traces: stream: zabref check --config tiny") for line in lines)
    assert dot.is_file() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    names = sorted(p.name for p in expected.glob("*.jsonl.gz"))
    assert names and names == sorted(p.name for p in (tmp_path / "traces").glob("*.jsonl.gz"))
    for name in names:
        assert (tmp_path / "traces" / name).read_bytes() == (expected / name).read_bytes(), name
    assert (summary.states, summary.edges, summary.traces) == (whole.states, whole.edges, whole.traces)
