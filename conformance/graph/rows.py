"""Stage 1 of the trace pipeline: TLC's DOT dump -> rows of nodes and edges, each edge with its action parameters.

Theory of operation: Spark reads the dump as text in partitions of consecutive lines (`textFile`), and
`parse_partition` turns one partition into rows, with one `NodeParser` (and so one value cache) per partition. A
partition knows its index but not the number of its first line, so every row carries (partition, line within the
partition); each partition also yields one COUNT row with its number of lines, and the driver turns the pair into a
file line number (`line_offsets`) without a second pass over the text.

A partition never raises: the first bad line becomes an ERROR row (where, what, the line's text) and the partition
stops, with no COUNT row (its line numbers follow from the partitions before it). The driver then raises a `ParseError` for the earliest ERROR row in the file, so a bad dump always gives the
same message, naming file:line:column, whatever the partitioning.

Each edge label is decoded against `conformance.tla.labels.Labels`, built from the spec's `Next` and the model's constants: the label must
be exactly one instance of one action of Next (`FollowerProcessDIFF__2__1`, `ElectLeader__2__S1_2`), and its
arguments become the action's named parameters in canonical JSON (`{"i":2,"j":1}`; a set is `{"$set":[1,2]}`). A
missing label, an unknown action, a wrong number or kind of arguments, or a server outside the model is an error
naming the line: the pipeline never guesses an action's parameters.

The lines that frame the graph (the `digraph` and `subgraph` openers, closing braces, the colorize legend) are few;
each partition yields them as FRAME rows, and `check_structure` replays `iter_statements`' whole-file checks on them
on the driver: the graph opens first, the braces balance, nothing follows the end, and the file is not truncated.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from conformance.errors import GraphError, InputError, Location
from conformance.graph.dotparse import Edge, Node, NodeParser, Rank
from conformance.tla.labels import Labels
from conformance.tla.values import ParseError

__all__ = ["ROW_FIELDS", "parse_partition", "line_offsets", "first_error", "check_structure"]

# One schema for every row kind (unused fields are None), so that one DataFrame holds the partition's output.
#   NODE:  a=id, s1=state_json, flag=initial            EDGE:  a=src, b=dst, s1=label, s2=action, s3=params_json
#   FRAME: s1=kind of framing line, s2=its text         COUNT: lno=lines in the partition, a/b=first/last non-blank
#   ERROR: b=column, s1=message, s2=line text                  line (None if none), s1="nodes edges initial" 
ROW_FIELDS = ("kind", "pid", "lno", "a", "b", "s1", "s2", "s3", "flag")
NODE, EDGE, FRAME, COUNT, ERROR = "N", "E", "F", "C", "X"


def _error_row(pid: int, lno: int, error: ParseError) -> tuple:
    # Keep a window of the (possibly megabytes long) line around the column; the column moves with it.
    start = max(0, error.column - 1 - 200)
    return (ERROR, pid, lno, None, error.column - start, error.reason, error.text[start:start + 400], None, None)


def parse_partition(pid: int, lines: Iterable[str], labels: Labels, source: str) -> Iterator[tuple]:
    """Rows for the lines of partition `pid`: NODE, EDGE and FRAME rows, then one COUNT row (or an ERROR row)."""
    parser = NodeParser()
    decoded: dict[str | None, tuple[str, str] | str] = {}
    lno = first = last = n_nodes = n_edges = n_initial = 0
    for lno, raw in enumerate(lines, 1):
        line = raw.rstrip("\r\n")
        try:
            result = parser._parse(line, lno, source)
        except ParseError as e:
            yield _error_row(pid, lno, e)
            return
        if isinstance(result, Node):
            n_nodes += 1
            n_initial += result.initial
            yield (NODE, pid, lno, result.id, None, result.state_json, None, None, result.initial)
        elif isinstance(result, Edge):
            found = decoded.get(result.action)
            if found is None:
                try:
                    found = labels.decode(result.action)
                except ValueError as e:
                    found = str(e)
                decoded[result.action] = found
            if isinstance(found, str):
                at = line.find('label="')
                yield _error_row(pid, lno, ParseError(source, lno, at + 8 if at >= 0 else 1, line, found))
                return
            n_edges += 1
            yield (EDGE, pid, lno, result.src, result.dst, result.action, found[0], found[1], None)
        elif not isinstance(result, Rank):
            if result[0] == "blank":
                continue
            yield (FRAME, pid, lno, None, None, result[0], line[:200], None, None)
        first = first or lno
        last = lno
    yield (COUNT, pid, lno, first or None, last or None, f"{n_nodes} {n_edges} {n_initial}", None, None, None)


def line_offsets(counts: dict[int, int]) -> dict[int, int]:
    """{partition: lines in it} -> {partition: number of lines before it in the file}."""
    offsets, total = {}, 0
    for pid in sorted(counts):
        offsets[pid] = total
        total += counts[pid]
    return offsets


def first_error(rows: Iterable[tuple], counts: dict[int, int], source: str, before: int = 0) -> ParseError | None:
    """The ParseError of the earliest ERROR row, or None. `counts` are the COUNT rows' {partition: lines} (a
    partition that stopped at an error has none: its first line follows the lines of the partitions before it) and
    `before` the file lines ahead of the first partition."""
    errors = sorted((r for r in rows if r[0] == ERROR), key=lambda r: (r[1], r[2]))
    if not errors:
        return None
    _, pid, lno, _, column, message, text, _, _ = errors[0]
    ahead = before + sum(n for p, n in counts.items() if p < pid)
    return ParseError(source, ahead + lno, column, text, message)


def check_structure(frames: list[tuple[int, str, str]], first_line: int | None, last_line: int | None,
                    source: str) -> None:
    """`iter_statements`' whole-file checks from the framing lines [(line, kind, text)] and the first and last
    non-blank lines; raises ParseError (or GraphError) naming the line."""
    depth, opened, closed_at, in_legend = 0, False, None, False
    if first_line is None:
        raise GraphError(Location(source, 1), "the dump is empty")
    for line, kind, text in sorted(frames):
        if closed_at is not None:
            raise ParseError(source, line, 1, text, "text after the end of the graph")
        if kind == "graph_open":
            if opened:
                raise ParseError(source, line, 1, text, "a second graph in one file")
            opened, depth = True, 1
            if line != first_line:
                raise InputError(Location(source, first_line, 1), "a statement outside the graph "
                                 "(expected 'strict digraph DiskGraph {' first)")
        elif not opened:
            raise ParseError(source, line, 1, text, "expected 'strict digraph DiskGraph {' first")
        elif kind == "subgraph_open":
            depth += 1
            in_legend = "cluster_legend" in text
        elif kind == "close":
            depth -= text.count("}")
            in_legend = False
            if depth < 0:
                raise ParseError(source, line, text.rfind("}") + 1, text, "a '}' that closes nothing")
            if depth == 0:
                closed_at = line
        elif kind == "legend_node" and not in_legend:
            raise ParseError(source, line, 1, text, "a node whose id is not a 64-bit integer")
    if not opened:
        raise InputError(Location(source, first_line, 1), "expected 'strict digraph DiskGraph {' first")
    if closed_at is None:
        raise InputError(Location(source, last_line, 1), "the dump ends inside the graph (truncated?)")
    if last_line != closed_at:
        raise InputError(Location(source, last_line, 1), f"text after the end of the graph (closed at line {closed_at})")
