"""TLC's operators written in Java (conformance/tla/overrides.py). ZabrefData's Datum: TLC reads the values of a data
file (conformance/tla/datafile.py), equal to the same values computed by TLC itself, and a line it cannot read stops
the check naming the file, the line and the column. ZabrefSeq's IsSuffix: the class answers as the TLA+ definition
does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.tla import datafile, overrides
from conformance.tla.tools import Outcome, run_tlc, toolchain
from conformance.tla.values import format_value

pytestmark = pytest.mark.usefixtures("tla")


def _tlc(folder: Path, extends: str, step: str, *, with_class: bool = True):
    """TLC on module T (EXTENDS ``extends``, the override modules beside it) whose one step from x = 0 is ``step``,
    then x = 1 stutters: a false condition in ``step`` is a deadlock at x = 0."""
    for module in overrides.MODULES:
        shutil.copyfile(module, folder / module.name)
    (folder / "T.tla").write_text(
        f"---- MODULE T ----\nEXTENDS {extends}, TLC\nVARIABLE x\nInit == x = 0\n"
        f"Next == \\/ x = 0 /\\ x' = 1 /\\ {step}\n        \\/ x = 1 /\\ UNCHANGED x\n====\n")
    (folder / "T.cfg").write_text("INIT Init\nNEXT Next\n")
    tools = toolchain()
    return run_tlc(folder / "T.tla", tools=tools, classpath=[overrides.classes(tools)] if with_class else [])


def _check(folder: Path, pairs: list[tuple[str, str]], *, with_class: bool = True):
    """TLC on a module asserting ``Datum(line k) = expression k`` for each pair (value text, TLA+ expression)."""
    data = datafile.DataFile("d.tlav")
    conj = [f"{data.datum(text)} = {expr}" for text, expr in pairs] or ["TRUE"]
    data.write(folder)
    return _tlc(folder, "ZabrefData, Integers", " /\\ ".join(f"({c})" for c in conj), with_class=with_class)


def test_values_read_equal_the_same_values_built_by_tlc(tmp_path: Path) -> None:
    r = _check(tmp_path, [
        ('<<1, -2, "a\\"b\\\\c", TRUE, FALSE, <<>>>>', '<<1, -2, "a\\"b\\\\c", TRUE, FALSE, <<>>>>'),
        ("{3, 1, 2, 1}", "1 .. 3"),  # a set read unordered and with a repeat equals TLC's own
        ("[zxid |-> <<1, 2>>, value |-> 5]", "[value |-> 5, zxid |-> <<1, 2>>]"),  # fields in any order
        ('[data |-> <<[value |-> 1, zxid |-> <<0, 1>>]>>, type |-> "SNAP", zxid |-> <<0, 1>>]',
         '[type |-> "SNAP", zxid |-> <<0, 1>>, data |-> <<[zxid |-> <<0, 1>>, value |-> 1]>>]'),
        ("{}", "{}"),
    ])
    assert r.outcome is Outcome.OK, r.message
    assert r.distinct_states == 2


def test_a_value_that_differs_is_not_equal(tmp_path: Path) -> None:
    r = _check(tmp_path, [("[value |-> 5, zxid |-> <<1, 2>>]", "[value |-> 5, zxid |-> <<1, 3>>]")])
    assert r.outcome is Outcome.DEADLOCK  # the step's condition is false: no successor


@pytest.mark.parametrize("text, column, words", [
    ("<<1,>>", 5, "expected a value"),
    ('[a |-> "x\\q"]', 10, "an unknown escape in a string"),
    ("99999999999", 1, "an integer outside TLC's 32 bits"),
    ("<<1>> 2", 7, "more after the value"),
    ("[a 1]", 4, "expected |->"),
    ('"open', 6, "a string is not closed"),
    ("{1, 2", 6, "expected , or }"),
    ("", 1, "expected a value, the line ended"),
    ("CHOOSE x : TRUE", 1, "expected a value"),
])
def test_a_line_it_cannot_read_stops_tlc_naming_file_line_and_column(tmp_path: Path, text: str, column: int,
                                                                      words: str) -> None:
    r = _check(tmp_path, [("1", "1"), (text, "0")])
    assert r.outcome is Outcome.ERROR
    assert f"ZabrefData: d.tlav line 2 column {column}: {words}" in r.message, r.message


def test_a_line_past_the_end_and_a_missing_class_are_errors_not_verdicts(tmp_path: Path) -> None:
    data = datafile.DataFile("d.tlav")
    data.add("1")
    (tmp_path / "a").mkdir()
    data.write(tmp_path / "a")
    r = _tlc(tmp_path / "a", "ZabrefData, Integers", 'Datum("d.tlav", 2) = 1')
    assert r.outcome is Outcome.ERROR and "d.tlav has 1 lines; line 2 was asked for" in r.message, r.message
    (tmp_path / "b").mkdir()
    r = _check(tmp_path / "b", [("1", "1")], with_class=False)
    assert r.outcome is not Outcome.OK
    assert "ZabrefData.class is not on TLC's classpath" in r.message, r.message


def test_a_value_spanning_lines_is_refused_when_written() -> None:
    with pytest.raises(ValueError, match="spans lines"):
        datafile.DataFile("d.tlav").add("<<1,\n2>>")


# SANY (the other side of each comparison) cannot read a backquote in a string, nor TLC -2^31 as an expression.
_values = st.recursive(
    st.integers(-2**31 + 1, 2**31 - 1) | st.booleans()
    | st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="`")
              | st.sampled_from("\n\t\r\f"), max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,4}", fullmatch=True), inner, min_size=1, max_size=3)
    | st.frozensets(st.integers(-5, 5), max_size=4).map(lambda s: {"$set": sorted(s)}),
    max_leaves=12)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_values, min_size=40, max_size=40))
def test_any_value_format_value_writes_reads_back_equal(tmp_path_factory, values) -> None:
    """Forty values of every kind in one TLC run: each line read equals the same text parsed by TLC's parser."""
    folder = tmp_path_factory.mktemp("any")
    texts = [format_value(v) for v in values]
    r = _check(folder, [(t, t) for t in texts])
    assert r.outcome is Outcome.OK, (r.message, texts)


# one kind of element: TLC refuses to compare an integer with a string, in Java as in its own evaluation
_seqs = st.lists(st.sampled_from(["[v |-> 1]", "[v |-> 2]", "[v |-> 3]"]), max_size=5)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(_seqs, _seqs, st.booleans()), min_size=30, max_size=30))
def test_is_suffix_in_java_answers_as_its_definition(tmp_path_factory, pairs) -> None:
    """Thirty pairs a run, about half of them built so that s is a suffix of t: the overriding class and the
    definition spelled out in TLA+ agree on each."""
    folder = tmp_path_factory.mktemp("suffix")
    conj = []
    for s, t, make in pairs:
        if make:
            t = t + s
        ss, tt = "<<" + ", ".join(s) + ">>", "<<" + ", ".join(t) + ">>"
        conj.append(f"IsSuffix({ss}, {tt}) = (Len({ss}) <= Len({tt}) /\\ "
                    f"{ss} = SubSeq({tt}, Len({tt}) - Len({ss}) + 1, Len({tt})))")
    r = _tlc(folder, "ZabrefSeq, Integers, Sequences", " /\\ ".join(f"({c})" for c in conj))
    assert r.outcome is Outcome.OK and r.distinct_states == 2, r.message


def test_tlc_uses_the_class_for_is_suffix(tmp_path: Path) -> None:
    """Only the class words its refusal of a non-sequence so: TLC evaluated IsSuffix in Java."""
    r = _tlc(tmp_path, "ZabrefSeq", "IsSuffix(1, <<>>)")
    assert r.outcome is Outcome.ERROR and "ZabrefSeq: IsSuffix takes two sequences" in r.message, r.message
