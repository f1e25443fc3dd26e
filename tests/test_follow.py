"""The parse stage streamed (`zabref traces --stream`, conformance/graph/follow.py): the dump read in byte ranges while
it is written gives the same Parquet rows as the whole file, a bad line stops the writer and names its file line, and
a writer that fails leaves nothing behind.

The writer is TLC itself in the end-to-end test and a stand-in otherwise: a Python child that writes a dump to the
partial file `run_tlc` would use, in slices with pauses (so the stream sees many batches), then renames it as
`run_tlc` does, or fails."""

from __future__ import annotations

import errno
import gzip
import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pipeline import SPEC, _run

from conformance.errors import PipelineError
from conformance.graph.cache import ensure_traces
from conformance.graph.follow import DumpFollower, read_lines, release, split_range
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
    pause = float(sys.argv[6])
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
            time.sleep(pause)
    if bad_line:
        time.sleep(120)  # a TLC still running when the stream finds the bad line: the follower must stop it
    if code:
        os.unlink(partial)
        sys.exit(code)
    os.replace(partial, dot)
""")


CHUNK, STEP = 8 << 10, 8 << 10  # batches of 8 to 16 KB of the 160 KB dump; the stand-in writes 8 KB every 50 ms


def _writer(source: Path, dot: Path, step: int, bad_line: int = 0, code: int = 0, pause: float = 0.05) -> list[str]:
    return [sys.executable, "-c", WRITER, str(source), str(dot), str(step), str(bad_line), str(code), str(pause)]


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


def test_batches_are_whole_lines_in_order_and_a_line_longer_than_a_batch_is_one(tmp_path: Path) -> None:
    """Without Spark: the ranges a follower yields while a writer appends cover the file once, in order, each ending
    at a line's end, between chunk and 2 * chunk bytes while the writer runs (a longer single line: a range of its
    own), the rest once it has exited."""
    lines = [f"{k} {'x' * (k % 50)}\n".encode() for k in range(3000)]
    lines[1500] = b"L" * 9000 + b"\n"  # longer than 2 * chunk
    source = tmp_path / "source.dot"
    source.write_bytes(b"".join(lines))
    dot = tmp_path / "out" / "g.dot"
    chunk = 2048
    with DumpFollower(_writer(source, dot, 4096, pause=0.25), dot, chunk, poll=0.01) as follower:
        ranges = list(follower.batches())
    data = source.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(data[end - 1:end] == b"\n" for _, end in ranges)
    sizes = [b - a for a, b in ranges[:-1]]
    assert all(chunk <= n <= 2 * chunk or n == 9001 for n in sizes), sizes
    assert 9001 in sizes  # the long line came while the writer ran: one range, from its start to its end
    assert len(ranges) > 10


def _rows(spark, parquet: str) -> tuple[list, list]:
    return (sorted(map(tuple, spark.read.parquet(f"{parquet}/nodes").collect())),
            sorted(map(tuple, spark.read.parquet(f"{parquet}/edges").collect())))


@pytest.fixture(scope="module")
def streamed(spark, tmp_path_factory):
    """`zabref traces --stream` on model two (TLC writes the dump, the pipeline parses it as it grows; the smallest
    model, 160 KB of DOT, so batches of 32 KB): (folder, summary, progress lines); the folder holds two.dot,
    graph.parquet and traces/."""
    folder = tmp_path_factory.mktemp("streamed")
    summary, lines = _run(spark, folder / "two.dot", folder / "traces", parquet=str(folder / "graph.parquet"),
                          stream_chunk=4 * CHUNK)
    return folder, summary, lines


@pytest.mark.deep
def test_zabref_traces_stream_runs_tlc_and_gives_the_traces_of_the_finished_dump(spark, streamed, tmp_path) -> None:
    folder, summary, lines = streamed
    # the same dump parsed whole once TLC has finished it (`zabref traces --graph two.dot`, no --stream)
    whole = tmp_path / "whole"
    _run(spark, folder / "two.dot", whole / "traces", parquet=str(whole / "graph.parquet"))
    assert any(line.startswith("traces: stream: zabref check --config two") for line in lines)
    assert any(line.startswith("traces: parse: TLC exited after") for line in lines)
    assert sorted(p.name for p in folder.iterdir()) == ["graph.parquet", "traces", "two.dot"]
    assert _rows(spark, str(folder / "graph.parquet")) == _rows(spark, str(whole / "graph.parquet"))
    names = sorted(p.name for p in (whole / "traces").glob("*.jsonl.gz"))
    assert names and names == sorted(p.name for p in (folder / "traces").glob("*.jsonl.gz"))
    for name in names:  # the same lines, headers included
        ours, theirs = (gzip.decompress((f / name).read_bytes()).splitlines() for f in (folder / "traces",
                                                                                         whole / "traces"))
        assert ours == theirs, name
    manifest = json.loads((whole / "traces" / "manifest.json").read_text())
    assert summary.states == manifest["coverage"]["states"] and summary.traces == len(names)
    # and the test command's cache holds the traces a stream gives (conformance/graph/cache.py generates by streaming)
    cached = ensure_traces("two")
    assert sorted(p.name for p in cached.glob("*.jsonl.gz")) == names



def _parse_stream(spark, command, dot: Path, parquet: str, chunk: int):
    from conformance.graph.pipeline import load_model, parse_stream

    lines: list[str] = []
    with DumpFollower(command, dot, chunk, poll=0.05) as follower:
        result = parse_stream(spark, follower, load_model(SPEC, "two"), parquet, 2, lines.append)
    return result, lines


def test_a_dump_read_in_many_batches_gives_the_rows_of_the_whole_file(spark, streamed, tmp_path: Path) -> None:
    source = streamed[0] / "two.dot"
    dot = tmp_path / "two.dot"
    (nodes, edges, n_nodes, n_edges), lines = _parse_stream(spark, _writer(source, dot, STEP), dot,
                                                            str(tmp_path / "g.parquet"), CHUNK)
    batches = [line for line in lines if "as TLC writes it" in line]
    assert len(batches) >= 4, lines  # read in many ranges while the writer wrote, not once at the end
    assert _rows(spark, str(tmp_path / "g.parquet")) == _rows(spark, str(streamed[0] / "graph.parquet"))
    assert (n_nodes, n_edges) == (nodes.count(), edges.count())
    assert dot.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.parquet", "two.dot"]


def test_a_bad_line_in_a_middle_batch_stops_the_writer_and_names_its_line(spark, streamed, tmp_path: Path) -> None:
    source = streamed[0] / "two.dot"
    dot = tmp_path / "two.dot"
    bad = len(source.read_bytes().splitlines()) * 3 // 5  # batches before it, and more written after it
    started = time.monotonic()
    with pytest.raises(ParseError) as err:
        _parse_stream(spark, _writer(source, dot, STEP, bad_line=bad), dot, str(tmp_path / "g.parquet"), CHUNK)
    assert str(err.value).startswith(f"{dot}:{bad}:"), str(err.value)
    assert time.monotonic() - started < 100  # the writer (asleep for 120 s) was stopped, not waited for
    assert list(tmp_path.iterdir()) == []  # no Parquet, no link, and the stopped writer's partial dump removed


def test_a_writer_that_fails_ends_the_stream_with_its_exit_code(spark, streamed, tmp_path: Path) -> None:
    dot = tmp_path / "two.dot"
    with pytest.raises(PipelineError, match="exited with code 12"):
        _parse_stream(spark, _writer(streamed[0] / "two.dot", dot, STEP, code=12), dot,
                      str(tmp_path / "g.parquet"), CHUNK)
    assert list(tmp_path.iterdir()) == []


def test_stream_refuses_a_graph_it_cannot_write_locally(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from conformance.graph.pipeline import traces_command

    result = CliRunner().invoke(traces_command, ["--graph", "hdfs:///zab/ci.dot", "--out", str(tmp_path / "out"),
                                                 "--config", "ci", "--spec-dir", str(SPEC), "--stream"])
    assert result.exit_code == 2 and "--stream writes the dump itself, to a local path" in result.output
    assert list(tmp_path.iterdir()) == []


def test_release_frees_the_blocks_wholly_inside_the_range_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "f"
    data = bytes(range(256)) * 4096  # 1 MiB, no zero run longer than one byte
    path.write_bytes(data)
    os.sync()
    before = path.stat().st_blocks
    block = os.stat(path).st_blksize
    assert release(path, 100, 150) == 100  # no whole block inside: nothing freed
    freed = release(path, 100, 600_000)
    assert freed == 600_000 // block * block
    assert path.stat().st_size == len(data) and path.stat().st_blocks < before
    now = path.read_bytes()
    assert now[:block] == data[:block]  # the block holding byte 100 was not wholly inside
    assert now[block:freed] == bytes(freed - block)
    assert now[freed:] == data[freed:]


def test_a_discarding_follower_frees_what_is_parsed_and_every_range_still_reads_whole(tmp_path: Path) -> None:
    """Without Spark: each range is read as the parse reads it (`read_lines`, which reads the byte before the range)
    and then given back (`parsed`); every line is read once and whole, so the byte before each next range was kept,
    and the dump's disk blocks are mostly freed by the end. Every line is one disk block long, so every range ends
    on a block's end: freeing the block that holds a range's last byte would swallow the next range's first line."""
    (tmp_path / "probe").write_bytes(b"")
    block = (tmp_path / "probe").stat().st_blksize
    lines = [f"{k} ".encode().ljust(block - 1, b"y") + b"\n" for k in range(600)]
    source = tmp_path / "source.dot"
    source.write_bytes(b"".join(lines))
    dot = tmp_path / "out" / "g.dot"
    read: list[str] = []
    with DumpFollower(_writer(source, dot, 64 << 10, pause=0.02), dot, 16 << 10, poll=0.01, discard=True) as f:
        for start, end in f.batches():
            read += read_lines(str(f.link), start, end)
            f.parsed(end)
        assert f.warning is None and f.freed > len(source.read_bytes()) * 9 // 10
        assert f.link.stat().st_blocks * 512 < (len(source.read_bytes()) - f.freed) + (64 << 10)
    assert read == [line.decode() for line in lines]


def test_stream_with_discard_dump_leaves_no_dump_and_the_same_traces(spark, streamed, tmp_path: Path) -> None:
    summary, lines = _run(spark, tmp_path / "two.dot", tmp_path / "traces", parquet=str(tmp_path / "graph.parquet"),
                          stream_chunk=4 * CHUNK, discard_dump=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.parquet", "traces"]
    assert any("the dump was freed as it was parsed and deleted" in line for line in lines)
    assert _rows(spark, str(tmp_path / "graph.parquet")) == _rows(spark, str(streamed[0] / "graph.parquet"))
    ours = {p.name: gzip.decompress(p.read_bytes()) for p in (tmp_path / "traces").glob("*.jsonl.gz")}
    theirs = {p.name: gzip.decompress(p.read_bytes()) for p in (streamed[0] / "traces").glob("*.jsonl.gz")}
    assert ours and ours == theirs
    assert json.loads((tmp_path / "traces" / "manifest.json").read_text())["graph"] == str(tmp_path / "graph.parquet")


def test_discard_dump_without_stream_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from conformance.graph.pipeline import traces_command

    result = CliRunner().invoke(traces_command, ["--graph", str(tmp_path / "ci.dot"), "--out", str(tmp_path / "out"),
                                                 "--config", "ci", "--spec-dir", str(SPEC), "--discard-dump"])
    assert result.exit_code == 2 and "--discard-dump" in result.output and "only with --stream" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code, warned", [(errno.EOPNOTSUPP, True), (errno.EIO, False)])
def test_a_file_system_that_cannot_punch_holes_gets_a_warning_and_an_io_error_stops(tmp_path: Path, monkeypatch,
                                                                                    code, warned) -> None:
    """Without a writer: `parsed` on a follower whose `release` fails. A file system without hole punching is warned
    about once and the stream goes on (the dump is still deleted at the end); any other error stops it, named."""
    import conformance.graph.follow as follow

    calls = []

    def fail(path, start, end):
        calls.append((start, end))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(follow, "release", fail)
    with DumpFollower([sys.executable, "-c", "pass"], tmp_path / "g.dot", 1 << 20, discard=True) as f:
        if warned:
            f.parsed(1 << 20)
            f.parsed(2 << 20)  # warned once: not tried again
            assert f.warning is not None and os.strerror(code) in f.warning and f.freed == 0 and len(calls) == 1
        else:
            with pytest.raises(PipelineError, match=os.strerror(code)):
                f.parsed(1 << 20)
