"""Parsing TLC 2.15's `-dump dot` output (conformance/graph/dotparse.py) on real dumps from tests/fixtures/dot/
(regenerate.sh there makes them), on hand-broken copies of them, and on generated node lines."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_values import _names, values  # the strategies of canonical values (tests/ is on sys.path, as for conftest)

from conformance.graph.dotparse import (
    Edge,
    Node,
    NodeParser,
    Rank,
    dot_escape,
    dot_unescape,
    iter_statements,
    parse_dot_file,
)
from conformance.tla.valueparse import parse_state
from conformance.tla.values import ParseError, ValueSyntaxError, canonical_json, format_state, model

FIXTURES = Path(__file__).parent / "fixtures" / "dot"
REAL_DUMPS = ["dot_values_colorize.dot", "dot_values_plain.dot", "one_var_nolabels.dot", "channels.dot"]


def statements(name: str, **kw) -> list:
    return list(parse_dot_file(str(FIXTURES / name), **kw))


def nodes_and_edges(name: str) -> tuple[list[Node], list[Edge]]:
    parsed = statements(name)
    return [s for s in parsed if isinstance(s, Node)], [s for s in parsed if isinstance(s, Edge)]


# ---------------------------------------------------------------------------------------------------------------
# Real dumps


@pytest.mark.parametrize("name, distinct, generated, actions", [
    # TLC's own summary line: "67 states generated, 28 distinct states found" (generated = edges + 1 initial)
    ("dot_values_colorize.dot", 28, 67, {"Send", "Vote", "Noop"}),
    ("dot_values_plain.dot", 28, 67, {"Send", "Vote", "Noop"}),
    ("one_var_nolabels.dot", 1, 3, {None}),
    ("channels.dot", 13, 15, {"Propose", "Receive"}),
])
def test_real_dump_has_every_state_and_every_edge(name, distinct, generated, actions):
    nodes, edges = nodes_and_edges(name)
    assert len(nodes) == len({n.id for n in nodes}) == distinct
    assert len(edges) == generated - 1
    assert {e.action for e in edges} == actions
    ids = {n.id for n in nodes}
    assert all(e.src in ids and e.dst in ids for e in edges)
    assert [n.initial for n in nodes] == [True] + [False] * (distinct - 1)


def test_colorize_changes_nothing_but_decoration():
    assert statements("dot_values_colorize.dot") == statements("dot_values_plain.dot")


def test_parallel_edges_and_self_loops_are_kept():
    _, edges = nodes_and_edges("one_var_nolabels.dot")  # actions A and B, both x' = x, no actionlabels
    assert len(edges) == 2 and edges[0] == edges[1] and edges[0].src == edges[0].dst
    nodes, edges = nodes_and_edges("dot_values_colorize.dot")  # Noop == flag /\ UNCHANGED vars: one loop each
    loops = [e.src for e in edges if e.src == e.dst]
    assert all(e.action == "Noop" for e in edges if e.src == e.dst)
    assert sorted(loops) == sorted(n.id for n in nodes if n.state["flag"])


def test_initial_state_of_the_values_spec():
    initial = nodes_and_edges("dot_values_colorize.dot")[0][0]
    assert initial.state == {
        "byIdx": [0, 0],                                            # a function on 1..2 is a sequence
        "count": -1,
        "empty": [],                                                # [s \in {} |-> 0], printed "<< >>"
        "flag": False,
        "msgs": {"$fun": [[model("S1"), []], [model("S2"), []]]},
        "names": 'a"b\\c',                                          # TLA+ "a\"b\\c", DOT-escaped once more
        "nested": [{"type": "X", "zxid": [0, -3]}, {"$set": [[], [1, -2]]}, {"$set": [{"$set": []}, {"$set": ["x"]}]},
                   {"a": {"b": []}}],
        "votes": {"$set": []},
    }
    assert initial.state_json == canonical_json(initial.state)


def test_wrapped_values_and_escaped_strings_in_a_later_state():
    raw = (FIXTURES / "dot_values_colorize.dot").read_text()
    assert "@@\\n  S2 :>" in raw  # TLC wrapped a long value over several label lines
    nodes, _ = nodes_and_edges("dot_values_colorize.dot")
    sent = [m for n in nodes for _, channel in n.state["msgs"]["$fun"] for m in channel]
    assert {"data": "line\nnext tab\t", "mtype": "PROPOSAL", "zxid": [-1, 2]} in sent


def test_single_variable_label_and_exotic_values():
    (node,) = nodes_and_edges("one_var_nolabels.dot")[0]
    x = node.state["x"]
    assert x[:5] == ['q"t', "cr\r", "ff\f", "", "\\"]
    assert x[5] == {"a": 1, "b": 1}                                  # string domain printed as a record
    assert x[8] == {"$set": [2, 3, 4]}                               # 2..4 kept as an interval by TLC
    assert x[15] == {"$fun": [["", 1], ["1", 1], ["a b", 1]]}
    assert x[16] == {"ok": 2}


@pytest.mark.parametrize("name", REAL_DUMPS)
def test_fast_path_and_grammar_agree_on_every_line(name):
    fast, grammar = NodeParser(fast=True), NodeParser(fast=False)
    lines = (FIXTURES / name).read_text().splitlines()
    for lineno, line in enumerate(lines, 1):
        assert fast.parse_line(line, lineno) == grammar.parse_line(line, lineno)


@pytest.mark.parametrize("name", REAL_DUMPS)
def test_label_split_agrees_with_the_state_grammar(name):
    for line in (FIXTURES / name).read_text().splitlines():
        node = NodeParser().parse_line(line)
        if isinstance(node, Node):
            label = line[line.index('label="') + 7:line.rindex('"')]
            assert canonical_json(parse_state(dot_unescape(label))) == node.state_json


@pytest.mark.parametrize("name", REAL_DUMPS)
def test_ranks_are_bfs_levels_of_the_states_with_successors(name):
    # TLC ranks a state when it writes an edge *from* it, so a state without successors is in no rank line.
    parsed = statements(name, ranks=True)
    ranks = [s for s in parsed if isinstance(s, Rank)]
    assert [r.level for r in ranks] == list(range(len(ranks)))
    ranked = [i for r in ranks for i in r.ids]
    assert sorted(ranked) == sorted({s.src for s in parsed if isinstance(s, Edge)})
    initial = {s.id for s in parsed if isinstance(s, Node) and s.initial}
    assert set(ranks[0].ids) == initial


@pytest.mark.parametrize("name", REAL_DUMPS)
def test_same_result_from_a_file_a_list_crlf_and_lines_without_terminators(name):
    text = (FIXTURES / name).read_text()
    expected = statements(name)
    assert list(iter_statements(io.StringIO(text))) == expected
    assert list(iter_statements(text.splitlines())) == expected
    assert list(iter_statements(text.replace("\n", "\r\n").splitlines(keepends=True))) == expected


def test_parse_line_kinds():
    parser = NodeParser()
    assert parser.parse_line("strict digraph DiskGraph {\n") is None
    assert parser.parse_line('edge [colorscheme="paired12"]') is None
    assert parser.parse_line('Send [label="Send",fillcolor=2]') is None
    assert parser.parse_line("}}") is None
    assert parser.parse_line("{rank = same; -1;2;}") == Rank((-1, 2))
    assert parser.parse_line('1 -> -2 [label="A",color="black",fontcolor="black"];') == Edge(1, -2, "A")
    assert parser.parse_line('1 -> 2 [style="dashed"];') == Edge(1, 2, None, stuttering=True)
    assert parser.parse_line("1 -> 2;") == Edge(1, 2, None)
    node = parser.parse_line('-9223372036854775808 [label="/\\\\ x = 1\\n/\\\\ y = s"];')
    assert (node.id, node.state, node.initial) == (-(1 << 63), {"x": 1, "y": model("s")}, False)


# ---------------------------------------------------------------------------------------------------------------
# Broken input: file, line, column, and the offending character under the caret


@pytest.mark.parametrize("name, line, column, char, message", [
    ("garbled.dot", 11, 22, "=", "not a statement TLC writes: unexpected '='"),
    ("truncated.dot", 8, 29, '"', "a quoted string that never ends (is the file truncated?)"),
    ("unknown_statement.dot", 6, 15, "s", "unexpected 'splines'"),
    ("bad_value.dot", 6, None, ",", "in the value of msgs: unexpected ','"),
])
def test_malformed_fixture_is_reported_at_its_place(name, line, column, char, message):
    path = str(FIXTURES / name)
    with pytest.raises(ParseError) as caught:
        statements(name)
    error = caught.value
    assert error.source == path and error.line == line
    assert column is None or error.column == column
    assert error.text[error.column - 1] == char
    assert message in str(error)
    assert str(error).startswith(f"{path}:{line}:{error.column}: ")
    excerpt, caret = str(error).splitlines()[1:3]
    assert excerpt[caret.index("^")] == char


def _lines() -> list[str]:
    return (FIXTURES / "channels.dot").read_text().splitlines()


@pytest.mark.parametrize("lines, line, message", [
    (_lines()[:-3], 39, "ends inside the graph (truncated?)"),
    (_lines()[:-1], 41, "ends inside the graph (truncated?)"),
    ([], 1, "the dump is empty"),
    (_lines() + ["1 -> 2;"], 43, "a statement outside the graph"),
    (_lines()[:-1] + ["}}}"], 42, "a '}' that closes nothing"),
    (_lines() + ["}"], 43, "text after the end of the graph"),
    (_lines()[:-1] + ["}", "strict digraph DiskGraph {"], 43, "a second graph in one file"),
    (_lines()[1:], 1, "expected 'strict digraph DiskGraph {' first"),
    (_lines()[:5] + ['x1 [label="/\\\\ x = 1"];'] + _lines()[5:], 6, "not a 64-bit integer"),
])
def test_structure_errors(lines, line, message):
    with pytest.raises(ParseError) as caught:
        list(iter_statements(lines, "cut.dot"))
    assert caught.value.line == line and message in str(caught.value)


@pytest.mark.parametrize("line, marker, message", [
    ('1 [label="/\\\\ x = 1\\q"];', "\\q", "DOT escape '\\\\q' that TLC never writes"),
    ('1 [label="/\\\\ x = \\"a\\\\q\\""];', "\\\\q", "unknown string escape '\\\\q'"),
    ('1 [label="/\\\\ x = 1\\n/\\\\ x = 2"];', "x = 2", "duplicate variable"),
    ('1 [label="x == 1"];', "x ==", "expected '/\\ variable = value'"),
    ('1 [label="/\\\\ x = <<1,\\n   2,, 3>>"];', ", 3", "in the value of x: unexpected ','"),
    ("9223372036854775808 -> 1;", "9", "does not fit in 64 bits"),
    ('1.5 [label="x = 1"];', "1.5", "must be an integer"),
    ("1 [style=filled];", "1", "a state node without a label"),
])
@pytest.mark.parametrize("fast", [True, False])
def test_line_errors_point_at_the_column(line, marker, message, fast):
    with pytest.raises(ParseError) as caught:
        NodeParser(fast=fast).parse_line(line, 7, "g.dot")
    assert (caught.value.line, caught.value.column) == (7, line.index(marker) + 1)
    assert message in str(caught.value)


def test_error_without_a_line_number_still_gives_the_column():
    with pytest.raises(ParseError, match=r"^part-0003: column 3: "):
        NodeParser().parse_line("1 => 2;", None, "part-0003")


# ---------------------------------------------------------------------------------------------------------------
# Two layers of escaping, on generated values


@pytest.mark.parametrize("text, raw", [
    ('/\\ x = "a\\"b"', '/\\\\ x = \\"a\\\\\\"b\\"'),
    ("a\nb", "a\\nb"),
    ('"\\n"', '\\"\\\\n\\"'),      # the TLA+ escape \n inside a string stays two characters
])
def test_dot_escaping_is_tlcs(text, raw):
    assert dot_escape(text) == raw
    assert dot_unescape(raw) == text


@given(st.text(st.sampled_from('ab\\"\n ')))
def test_dot_unescape_inverts_dot_escape(text):
    assert dot_unescape(dot_escape(text)) == text


def test_dot_unescape_rejects_a_lone_backslash():
    with pytest.raises(ValueSyntaxError) as caught:
        dot_unescape('ab\\"\\')
    assert caught.value.offset == 4


@given(st.dictionaries(_names, values, min_size=1, max_size=4), st.integers(-(1 << 63), (1 << 63) - 1),
       st.booleans(), st.booleans())
def test_generated_state_survives_tlc_label_escaping(state, node_id, initial, fast):
    end = '",style = filled]' if initial else '"];'
    line = f'{node_id} [label="{dot_escape(format_state(state))}{end}'
    node = NodeParser(fast=fast).parse_line(line)
    assert (node.id, node.initial) == (node_id, initial)
    assert node.state_json == canonical_json(state)


@given(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1),
       st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), st.booleans())
def test_generated_edge_line(src, dst, action, fast):
    line = f'{src} -> {dst} [label="{action}",color="3",fontcolor="3"];'
    assert NodeParser(fast=fast).parse_line(line) == Edge(src, dst, action)


@pytest.mark.parametrize("fast", [True, False])
def test_a_record_whose_fields_are_keywords_parses_as_tlc_prints_it(fast):
    """TLC 2.15 prints `[s \\in {"TRUE", "1a"} |-> FALSE]` as a record (seen on its -dump dot output); hypothesis found
    the parser refusing the field TRUE."""
    node = NodeParser(fast=fast).parse_line('7 [label="a = [TRUE |-> FALSE, 1a |-> FALSE]",style = filled]')
    assert node.state == {"a": {"TRUE": False, "1a": False}}
