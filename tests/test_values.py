"""The canonical form of TLA+ values (conformance/tla/values.py, docs/values.md): parsing TLC's text, printing it back,
the one order, the one JSON text, and errors that point at the bad character."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.tla.valueparse import ValueParser, parse_state, parse_value
from conformance.tla.values import (
    ParseError,
    canonical_json,
    canonicalize,
    equal,
    format_state,
    format_value,
    is_canonical,
    make_function,
    make_record,
    make_set,
    model,
    sort_key,
)

# ---------------------------------------------------------------------------------------------------------------
# TLC's text -> canonical JSON. Texts are as TLC 2.15 prints them (see tests/fixtures/dot/*.dot).


@pytest.mark.parametrize("text, expected", [
    ("0", "0"),
    ("-3", "-3"),
    ("2147483647", "2147483647"),
    ("TRUE", "true"),
    ("FALSE", "false"),
    ('""', '""'),
    (r'"a\"b\\c"', r'"a\"b\\c"'),                       # TLA+ escapes: \" and \\
    (r'"line\nnext tab\t"', r'"line\nnext tab\t"'),     # \n and \t: the two characters become one
    (r'"cr\r ff\f"', r'"cr\r ff\f"'),
    ("s1", '{"$model":"s1"}'),
    ("S_2", '{"$model":"S_2"}'),
    ("<<>>", "[]"),
    ("<< >>", "[]"),                                    # how TLC prints an empty function or record
    ("<<1, -2>>", "[1,-2]"),
    ("<<<<>>>>", "[[]]"),
    ("<<<<1>>, <<<<>>>>>>", "[[1],[[]]]"),
    ("{}", '{"$set":[]}'),
    ("{3, 1, 2}", '{"$set":[1,2,3]}'),
    ("{1, 1}", '{"$set":[1]}'),
    ("{s2, s1}", '{"$set":[{"$model":"s1"},{"$model":"s2"}]}'),
    ("{<<1, -2>>, <<>>}", '{"$set":[[],[1,-2]]}'),
    ("2..4", '{"$set":[2,3,4]}'),
    ("-1..0", '{"$set":[-1,0]}'),
    ("[zxid |-> <<1, 0>>, mtype |-> \"ACK\"]", '{"mtype":"ACK","zxid":[1,0]}'),
    ("[a |-> [b |-> <<>>]]", '{"a":{"b":[]}}'),
    ("(s1 :> 0 @@ s2 :> -1)", '{"$fun":[[{"$model":"s1"},0],[{"$model":"s2"},-1]]}'),
    ("(s2 :> 0 @@ s1 :> -1)", '{"$fun":[[{"$model":"s1"},-1],[{"$model":"s2"},0]]}'),
    ("(0 :> 0 @@ 1 :> 1 @@ 2 :> 2)", '{"$fun":[[0,0],[1,1],[2,2]]}'),
    ("(1 :> 1 @@ 3 :> 3)", '{"$fun":[[1,1],[3,3]]}'),
    ("(2 :> \"b\" @@ 1 :> \"a\")", '["a","b"]'),        # domain 1..n: a sequence, whatever the notation
    ("(\"y\" :> 1 @@ \"x\" :> 2)", '{"x":2,"y":1}'),     # domain of strings: a record
    ("(\"1\" :> 1 @@ \"\" :> 1 @@ \"a b\" :> 1)",        # not all identifiers: TLC prints a function
     '{"$fun":[["",1],["1",1],["a b",1]]}'),
    ("(<<1, 2>> :> \"p\" @@ <<0>> :> \"q\")", '{"$fun":[[[0],"q"],[[1,2],"p"]]}'),
    ("( s1 :>\n      << [ zxid |-> <<-1, 2>>,\n           data |-> \"x\" ] >> @@\n  s2 :> <<>> )",
     '{"$fun":[[{"$model":"s1"},[{"data":"x","zxid":[-1,2]}]],[{"$model":"s2"},[]]]}'),  # TLC's wrapping
])
def test_parse_value_gives_the_canonical_form(text, expected):
    assert canonical_json(parse_value(text)) == expected


@pytest.mark.parametrize("value, text", [
    (-3, "-3"),
    (True, "TRUE"),
    ('a"b\\c\n', r'"a\"b\\c\n"'),
    (model("s1"), "s1"),
    ([], "<<>>"),
    ([1, [2]], "<<1, <<2>>>>"),
    ({"$set": [1, 2]}, "{1, 2}"),
    ({"b": 1, "a": False}, "[a |-> FALSE, b |-> 1]"),
    ({"$fun": [[model("s1"), 0]]}, "(s1 :> 0)"),
])
def test_format_value_prints_tlc_notation(value, text):
    assert format_value(value) == text


def test_format_state_uses_conjuncts_except_for_a_single_variable():
    assert format_state({"x": 1, "y": []}) == "/\\ x = 1\n/\\ y = <<>>"
    assert format_state({"x": 1}) == "x = 1"
    assert parse_state("/\\ x = 1\n/\\ y = <<\n   2 >>") == {"x": 1, "y": [2]}
    assert parse_state("x = {}") == {"x": {"$set": []}}


# ---------------------------------------------------------------------------------------------------------------
# The order and the constructors


@pytest.mark.parametrize("smaller, larger", [
    (False, True), (True, -5), (-5, 3), (3, ""), ("a", "b"), ("b", model("a")), (model("a"), model("b")),
    (model("z"), []), ([], [0]), ([0, 9], [1]), ([9], {"a": 0}), ({"a": 1}, {"a": 2}), ({"a": 9}, {"b": 0}),
    ({"b": 0}, {"$set": []}), ({"$set": [1]}, {"$set": [2]}), ({"$set": [1]}, {"$set": [1, 2]}),
    ({"$set": [9]}, {"$fun": [[0, 0]]}), ({"$fun": [[0, 0]]}, {"$fun": [[0, 1]]}),
])
def test_sort_key_orders_kinds_then_values(smaller, larger):
    assert sort_key(smaller) < sort_key(larger)


def test_constructors_normalize():
    assert make_set([3, 1, 3, True]) == {"$set": [True, 1, 3]}
    assert canonical_json(make_set([1, True])) == '{"$set":[true,1]}'  # TRUE and 1 are two members
    assert make_record([("b", 1), ("a", 2)]) == {"a": 2, "b": 1}
    assert make_record([]) == []
    assert make_function([]) == []
    assert make_function([(2, "y"), (1, "x")]) == ["x", "y"]
    assert make_function([("k", 0)]) == {"k": 0}
    assert make_function([("$set", 0)]) == {"$fun": [["$set", 0]]}  # not a record: "$" fields are tags
    assert make_function([(model("b"), 1), (model("a"), 2)]) == {"$fun": [[model("a"), 2], [model("b"), 1]]}
    with pytest.raises(ValueError, match="twice"):
        make_function([(model("a"), 1), (model("a"), 2)])
    with pytest.raises(ValueError, match="record field"):
        make_record([("a b", 1)])
    with pytest.raises(ValueError, match="model value"):
        model("TRUE")


def test_canonicalize_maps_plain_python():
    assert canonicalize((1, frozenset({3, 2}), {"f": (True,)})) == [1, {"$set": [2, 3]}, {"f": [True]}]
    assert canonicalize({2: "b", 1: "a"}) == ["a", "b"]
    assert canonicalize({0: "a"}) == {"$fun": [[0, "a"]]}
    assert canonicalize({"$set": [2, 1, 2]}) == {"$set": [1, 2]}
    with pytest.raises(TypeError):
        canonicalize(1.5)


def test_equal_tells_true_from_one():
    assert [True] == [1]  # the Python trap that `equal` exists for
    assert not equal([True], [1])
    assert equal({"b": 1, "a": 2}, {"a": 2, "b": 1})


def test_canonical_json_is_compact_and_sorted():
    assert canonical_json({"b": [1, "é"], "a": {"$model": "m"}}) == '{"a":{"$model":"m"},"b":[1,"é"]}'


def test_value_parser_memoizes_and_shares_results():
    parser = ValueParser(maxsize=8)
    first = parser.parse("<<1, {2}>>")
    assert parser.parse("<<1, {2}>>") is first
    assert parser.parse_json("<<1, {2}>>") == '[1,{"$set":[2]}]'
    assert "1 misses" in parser.cache_info()


# ---------------------------------------------------------------------------------------------------------------
# Errors point at the character


@pytest.mark.parametrize("text, line, column, message", [
    ("<<1, >>", 1, 6, "unexpected '>>'"),
    ("[a |-> ]", 1, 8, "unexpected ']'"),
    (r'"a\q"', 1, 3, "unknown string escape"),
    ("<<1", 1, 4, "unexpected end of input"),
    ("{1,\n  2,\n  #}", 3, 3, "unexpected character '#'"),
    ("[a |-> 1, a |-> 2]", 1, 1, "same field twice"),
    ("(s1 :> 1 @@ s1 :> 2)", 1, 1, "key s1 twice"),
    ("1 2", 1, 3, "unexpected '2'"),
    ("", 1, 1, "unexpected end of input"),
])
def test_parse_errors_name_line_and_column(text, line, column, message):
    with pytest.raises(ParseError) as caught:
        parse_value(text, source="v.txt")
    error = caught.value
    assert (error.source, error.line, error.column) == ("v.txt", line, column)
    assert message in str(error)
    assert str(error).startswith(f"v.txt:{line}:{column}: ")
    excerpt, caret = str(error).splitlines()[1:3]
    assert excerpt == "    " + text.splitlines()[line - 1] if text else excerpt.strip() == ""
    assert caret == " " * (4 + column - 1) + "^"


def test_error_excerpt_of_a_huge_line_is_a_window():
    text = "<<" + "1, " * 100_000 + "@>>"
    with pytest.raises(ParseError) as caught:
        parse_value(text)
    shown = str(caught.value).splitlines()[1]
    assert len(shown) < 120 and "@" in shown


# ---------------------------------------------------------------------------------------------------------------
# Properties over arbitrary values

_names = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True)
_scalars = st.one_of(
    st.booleans(),
    st.integers(-(2 ** 31), 2 ** 31 - 1),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
    _names.map(model),
)


def _function(pairs):
    unique = {canonical_json(k): (k, v) for k, v in pairs}
    return make_function(unique.values())


values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.lists(inner, max_size=4).map(make_set),
    st.dictionaries(_names, inner, min_size=1, max_size=4).map(lambda d: make_record(d.items())),
    st.lists(st.tuples(inner, inner), max_size=4).map(_function),
), max_leaves=24)


@settings(max_examples=300)
@given(values)
def test_format_then_parse_round_trips(value):
    assert canonical_json(parse_value(format_value(value))) == canonical_json(value)


@given(values)
def test_generated_values_are_canonical_and_json_round_trips(value):
    assert is_canonical(value)
    assert canonical_json(json.loads(canonical_json(value))) == canonical_json(value)


@given(st.lists(values, max_size=6))
def test_make_set_is_order_free_and_idempotent(members):
    once = make_set(members)
    assert canonical_json(make_set(reversed(members))) == canonical_json(once)
    assert canonical_json(make_set(once["$set"])) == canonical_json(once)
    keys = [sort_key(m) for m in once["$set"]]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


@given(st.dictionaries(_names, values, min_size=1, max_size=4))
def test_state_round_trips_through_label_text(state):
    assert canonical_json(parse_state(format_state(state))) == canonical_json(state)


# ---------------------------------------------------------------------------------------------------------------
# The memoizing parser splits long composites at their top level; it must agree with the grammar exactly.


def _wrapped(text: str, seed: int) -> str:
    """TLC-style wrapping: a newline and indentation after some ", " separators (never inside a string)."""
    count = iter(range(10 ** 6))

    def wrap(match):
        if match.group() != ", " or (next(count) + seed) % 3:
            return match.group()
        return ",\n" + " " * (seed % 7)

    return re.sub(r'"(?:[^"\\]|\\.)*"|, ', wrap, text)


@settings(max_examples=300)
@given(values, st.integers(0, 1000))
def test_split_and_memo_agree_with_the_grammar(value, seed):
    text = _wrapped(format_value(value), seed)
    parser = ValueParser()
    parser.SPLIT_ABOVE = 0  # split everything composite
    assert canonical_json(parser.parse(text)) == canonical_json(parse_value(text)) == canonical_json(value)


@pytest.mark.parametrize("text", [
    "<<1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, ,>>",
    "(aaaaaaaaaaaaaaaaaaaaa :> 1 @@ aaaaaaaaaaaaaaaaaaaaa :> 2 @@ b :> 3)",
    "[field_one |-> 1, field_two |-> 2, field_one |-> 3, x |-> <<>>]",
    '[field_one |-> 1, "field two" |-> 2, field_three |-> 3, x |-> <<>>]',
    "{<<1, 2>>, <<3, 4>>, <<5, 6>>, <<7, 8>>, <<9, 10>>} extra tokens",
    "<<[a |-> 1], [a |-> 2], [a |-> 3], [a |-> 4], [a |-> 5], [a |-> 6)>>",
])
def test_memoizing_parser_reports_errors_like_the_grammar(text):
    from conformance.tla.valueparse import parse_raw
    from conformance.tla.values import ValueSyntaxError
    with pytest.raises(ValueSyntaxError) as by_grammar:
        parse_raw(text)
    with pytest.raises(ValueSyntaxError) as by_memo:
        ValueParser().parse(text)
    assert (by_memo.value.offset, by_memo.value.message) == (by_grammar.value.offset, by_grammar.value.message)
