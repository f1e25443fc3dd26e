"""Streaming parser of the state graph TLC 2.15 dumps with `-dump dot[,actionlabels][,colorize]`.

Theory of operation: TLC writes one DOT statement per physical line (newlines inside labels are escaped; measured
on real dumps, see tests/fixtures/dot/), so a line is the unit of work: `NodeParser.parse_line` turns one line into
a `Node`, an `Edge`, a `Rank` or None (framing, settings, the colorize legend), and needs no other line. That makes
it usable per Spark partition (`mapPartitions` over the lines of `textFile`); `iter_statements` adds the checks
that need the whole file (the graph is opened first, closed last, nothing follows it, no truncation).

A line is matched in two ways that must agree: a regular expression for the two lines TLC writes millions of
times (a state node, an edge with an action label), built from TLC's own format strings, and the grammar
conformance/grammars/dot.lark for everything, including every line the fast path does not match and every error.
A node label is DOT-unescaped (`dot_unescape`), split into "/\\ var = value" conjuncts, and each value text is
parsed by a `ValueParser`, memoized per distinct text: the same value text recurs in thousands of states.

Every malformed line raises `ParseError` naming source:line:column, quoting the line with a caret; a value error
inside a label points at the column of the bad character in the DOT line itself.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Iterable, Iterator, Union

import lark

from conformance.tla.valueparse import ValueParser, expected_text
from conformance.tla.values import IDENTIFIER, ParseError, Value, ValueSyntaxError

__all__ = ["Node", "Edge", "Rank", "Statement", "NodeParser", "iter_statements", "parse_dot_file",
           "dot_escape", "dot_unescape"]

_INT64 = range(-(1 << 63), 1 << 63)


@dataclass(frozen=True, slots=True)
class Node:
    """A state: its TLC fingerprint, {variable: canonical value} (shared, do not mutate), its canonical JSON."""

    id: int
    state: dict[str, Value]
    initial: bool
    state_json: str


@dataclass(frozen=True, slots=True)
class Edge:
    """One generated transition. `action` is None when TLC ran without `actionlabels` or wrote no label;
    `stuttering` marks TLC's dashed edges. Parallel edges and self-loops are kept, one Edge per line."""

    src: int
    dst: int
    action: str | None
    stuttering: bool = False


@dataclass(frozen=True, slots=True)
class Rank:
    """A `{rank = same; ...}` line: the states TLC found at BFS level `level` (0 = initial states).

    TLC writes the rank lines in level order, so only a reader of the whole file knows `level`: it is None from
    `NodeParser.parse_line` and set by `iter_statements`."""

    ids: tuple[int, ...]
    level: int | None = None


Statement = Union[Node, Edge, Rank]


# ---------------------------------------------------------------------------------------------------------------
# DOT string escaping, exactly as tlc2.util.DotStateWriter.states2dot: \ -> \\, " -> \", newline -> \n


def dot_escape(text: str) -> str:
    """The body of a DOT string for `text` (no quotes), as TLC writes it."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def dot_unescape(raw: str) -> str:
    """The text of a DOT string body; an escape TLC never writes raises ValueSyntaxError at its offset in `raw`."""
    if "\\" not in raw:
        return raw
    # Splitting on escaped backslashes first leaves pieces in which every backslash starts a \" or \n escape.
    pieces = [p.replace('\\"', '"').replace("\\n", "\n") for p in raw.split("\\\\")]
    if any("\\" in p for p in pieces):
        i = 0
        while i < len(raw):
            if raw[i] == "\\":
                if raw[i + 1:i + 2] not in ('\\', '"', "n"):
                    raise ValueSyntaxError(i, f"DOT escape {raw[i:i + 2]!r} that TLC never writes")
                i += 1
            i += 1
    return "\\".join(pieces)


def _raw_offset(raw: str, text_offset: int) -> int:
    """The offset in the escaped `raw` of the character at `text_offset` in dot_unescape(raw)."""
    i = j = 0
    while j < text_offset and i < len(raw):
        i += 2 if raw[i] == "\\" else 1
        j += 1
    return i


# ---------------------------------------------------------------------------------------------------------------
# The hot lines, from TLC's format strings: `ID [label="...",style = filled]` / `ID [label="..."];`,
# `ID -> ID [label="%s",color="%s",fontcolor="%s"];` and `{rank = same; ID;ID;...}` (megabytes long in a big
# dump). Anything else, and any id out of the 64-bit range, goes through the grammar.

_QUOTED_BODY = r'[^"\\]*(?:\\.[^"\\]*)*'
_FAST_NODE = re.compile(r'(-?[0-9]+) \[label="(' + _QUOTED_BODY + r')"(?:(,style = filled\])|\];)', re.S)
_FAST_RANK = re.compile(r"\{rank = same; ((?:-?[0-9]+;)*)\}")
_FAST_EDGE = re.compile(r'(-?[0-9]+) -> (-?[0-9]+) \[label="([A-Za-z_0-9]*)",color="[^"\\]*",fontcolor="[^"\\]*"\];')


@lark.v_args(inline=True)
class _DotStatements(lark.Transformer):
    """Rule name -> a small tuple; dotparse gives it meaning, with the line's source and number at hand."""

    def line(self, statement=None):
        return statement if statement is not None else ("blank",)

    def attr(self, name, value):
        return (str(name), value)

    def attrs(self, *pairs):
        return dict(pairs)

    def node(self, node_id, attrs):
        return ("node", node_id, attrs)

    def edge(self, src, dst, attrs=None):
        return ("edge", src, dst, attrs or {})

    def rank(self, rank, same, *ids):
        return ("rank", rank, same, ids)

    def graph_open(self, name):
        return ("graph_open", str(name))

    def subgraph_open(self, name, *items):
        return ("subgraph_open", str(name))

    def setting(self, name, value):
        return ("setting",)

    def defaults(self, attrs):
        return ("defaults",)

    def close(self):
        return ("close",)


@functools.cache
def _dot_lark() -> lark.Lark:
    grammar = resources.files("conformance").joinpath("grammars/dot.lark").read_text(encoding="utf-8")
    return lark.Lark(grammar, parser="lalr", lexer="basic", start="line", transformer=_DotStatements(),
                     maybe_placeholders=False)


@functools.cache
def _dot_terminal_texts() -> dict[str, str]:
    texts = {"$END": "end of line"}
    for terminal in _dot_lark().terminals:
        texts[terminal.name] = repr(terminal.pattern.value) if terminal.pattern.type == "str" else terminal.name
    return texts


class NodeParser:
    """Parses lines of a TLC DOT dump; build one per process or Spark partition (it owns the value cache).

    `fast=False` sends every line through the grammar (the tests check both ways agree).
    """

    def __init__(self, cache_size: int = 1 << 16, fast: bool = True) -> None:
        self.values = ValueParser(cache_size)
        self.fast = fast

    # -- one line --------------------------------------------------------------------------------------------

    def parse_line(self, line: str, lineno: int | None = None, source: str = "<dot>") -> Node | Edge | Rank | None:
        """One physical line (its line terminator may be included) -> Node, Edge, Rank, or None for framing."""
        result = self._parse(line.rstrip("\r\n"), lineno, source)
        return result if isinstance(result, (Node, Edge, Rank)) else None

    def _parse(self, line: str, lineno: int | None, source: str):
        """Like parse_line, but framing lines come back as the grammar's tuples (for iter_statements' checks)."""
        if self.fast:
            m = _FAST_EDGE.fullmatch(line)
            if m:
                return Edge(self._id(m.group(1), m.start(1), line, lineno, source),
                            self._id(m.group(2), m.start(2), line, lineno, source), m.group(3) or None)
            m = _FAST_NODE.fullmatch(line)
            if m:
                return self._node(m.group(1), m.start(1), m.group(2), m.start(2), m.group(3) is not None,
                                  line, lineno, source)
            m = _FAST_RANK.fullmatch(line)
            if m:
                ids = m.group(1).split(";")[:-1]
                if all(-(1 << 63) <= int(i) < (1 << 63) for i in ids):
                    return Rank(tuple(map(int, ids)))
        return self._parse_with_grammar(line, lineno, source)

    def _parse_with_grammar(self, line: str, lineno: int | None, source: str):
        try:
            statement = _dot_lark().parse(line)
        except lark.exceptions.UnexpectedCharacters as e:
            bad = line[e.pos_in_stream]
            why = ("a quoted string that never ends (is the file truncated?)" if bad == '"'
                   else f"unexpected character {bad!r}")
            raise self._error(line, lineno, source, e.pos_in_stream, why) from None
        except lark.exceptions.UnexpectedToken as e:
            at = len(line) if e.token.type == "$END" else e.token.start_pos
            what = "end of line" if e.token.type == "$END" else repr(str(e.token))
            raise self._error(line, lineno, source, at, f"not a statement TLC writes: unexpected {what}, expected "
                              f"one of: {expected_text(e.expected, _dot_terminal_texts())}") from None
        kind = statement[0]
        if kind == "node":
            _, node_id, attrs = statement
            if node_id.type == "ID":
                return ("legend_node", str(node_id))
            label = attrs.get("label")
            if label is None or label.type != "QSTRING":
                raise self._error(line, lineno, source, node_id.start_pos, "a state node without a label")
            style = attrs.get("style")
            return self._node(node_id, node_id.start_pos, label[1:-1], label.start_pos + 1,
                              style is not None and style.strip('"') == "filled", line, lineno, source)
        if kind == "edge":
            _, src, dst, attrs = statement
            label = attrs.get("label")
            action = self._unescape(label[1:-1], label.start_pos + 1, line, lineno, source) if label else ""
            style = attrs.get("style")
            return Edge(self._id(src, src.start_pos, line, lineno, source),
                        self._id(dst, dst.start_pos, line, lineno, source), action or None,
                        style is not None and style.strip('"') == "dashed")
        if kind == "rank":
            _, rank, same, ids = statement
            if (rank, same) != ("rank", "same"):
                raise self._error(line, lineno, source, rank.start_pos, "expected '{rank = same; ...}'")
            return Rank(tuple(self._id(t, t.start_pos, line, lineno, source) for t in ids))
        return statement

    # -- pieces ----------------------------------------------------------------------------------------------

    def _node(self, id_text, id_at, raw_label, label_at, initial, line, lineno, source) -> Node:
        node_id = self._id(id_text, id_at, line, lineno, source)
        text = self._unescape(raw_label, label_at, line, lineno, source)
        if text.startswith("/\\ "):
            conjuncts, offset, sep = text[3:].split("\n/\\ "), 3, 4
        else:
            conjuncts, offset, sep = [text], 0, 0
        state, fragments = {}, []
        for conjunct in conjuncts:
            name, eq, value_text = conjunct.partition(" = ")
            if not eq or not IDENTIFIER.fullmatch(name) or name in state:
                why = "duplicate variable" if name in state else "expected '/\\ variable = value'"
                raise self._error(line, lineno, source, label_at + _raw_offset(raw_label, offset), why)
            value_at = offset + len(name) + 3
            try:
                state[name] = self.values.parse(value_text)
                fragments.append((name, self.values.parse_json(value_text)))
            except ValueSyntaxError as e:
                raise self._error(line, lineno, source, label_at + _raw_offset(raw_label, value_at + e.offset),
                                  f"in the value of {name}: {e.message}") from None
            offset += len(conjunct) + sep
        fragments.sort()
        state_json = "{" + ",".join(f'"{name}":{fragment}' for name, fragment in fragments) + "}"
        return Node(node_id, dict(sorted(state.items())), initial, state_json)

    def _id(self, text, at, line, lineno, source) -> int:
        try:
            value = int(text)
        except ValueError:
            raise self._error(line, lineno, source, at, f"a state id must be an integer, not {str(text)!r}") from None
        if value not in _INT64:
            raise self._error(line, lineno, source, at, f"state id {value} does not fit in 64 bits")
        return value

    def _unescape(self, raw, at, line, lineno, source) -> str:
        try:
            return dot_unescape(raw)
        except ValueSyntaxError as e:
            raise self._error(line, lineno, source, at + e.offset, e.message) from None

    @staticmethod
    def _error(line, lineno, source, at, message) -> ParseError:
        return ParseError(source, lineno, at + 1, line, message)


def iter_statements(lines: Iterable[str], source_name: str = "<dot>", parser: NodeParser | None = None,
                    ranks: bool = False) -> Iterator[Statement]:
    """Nodes and edges (and Rank lines if `ranks`) of a whole dump, in file order, checking its structure.

    The first statement must open the graph; braces must balance, and nothing may follow the closing one. A file
    that ends inside the graph (TLC killed, a copy cut short) raises ParseError at its last line.
    """
    parser = parser or NodeParser()
    depth, lineno, last, level = 0, 0, "", 0
    opened = closed = in_legend = False
    for lineno, raw in enumerate(lines, 1):
        line = last = raw.rstrip("\r\n")
        result = parser._parse(line, lineno, source_name)
        if isinstance(result, (Node, Edge, Rank)):
            if depth == 0:
                raise ParseError(source_name, lineno, 1, line, "a statement outside the graph")
            if isinstance(result, Rank):
                if ranks:
                    yield Rank(result.ids, level)
                level += 1
                continue
            yield result
            continue
        kind = result[0]
        if kind == "blank":
            continue
        if closed:
            raise ParseError(source_name, lineno, 1, line, "text after the end of the graph")
        if kind == "graph_open":
            if opened:
                raise ParseError(source_name, lineno, 1, line, "a second graph in one file")
            opened, depth = True, 1
        elif not opened:
            raise ParseError(source_name, lineno, 1, line, "expected 'strict digraph DiskGraph {' first")
        elif kind == "subgraph_open":
            depth += 1
            in_legend = result[1] == "cluster_legend"
        elif kind == "close":
            depth -= line.count("}")
            in_legend = False
            if depth < 0:
                raise ParseError(source_name, lineno, line.rfind("}") + 1, line, "a '}' that closes nothing")
            closed = depth == 0
        elif kind == "legend_node" and not in_legend:
            raise ParseError(source_name, lineno, 1, line, "a node whose id is not a 64-bit integer")
    if not closed:
        what = "is empty" if not opened else "ends inside the graph (truncated?)"
        raise ParseError(source_name, max(lineno, 1), len(last) + 1, last, f"the dump {what}")


def parse_dot_file(path: str, parser: NodeParser | None = None, ranks: bool = False) -> Iterator[Statement]:
    """`iter_statements` over a file, read line by line (a dump can be gigabytes)."""
    with open(path, encoding="utf-8", newline="") as f:
        yield from iter_statements(f, path, parser, ranks)
