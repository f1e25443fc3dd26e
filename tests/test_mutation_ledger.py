"""The ledgers of equivalent mutants (tests/mutation/ledger.toml: the core's; tests/mutation/security-ledger.toml: the
code that guards the ensemble; read by scripts/mutation_ledger.py): well-formed, each rule's original text still in
the code, a rule excuses only the mutants it describes, and the security ledger's scope names code that exists.

The mutation runs themselves (scripts/mutation.sh, scripts/mutation-security.sh: mutmut) are not part of the test
command: they take tens of minutes.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutation_ledger", REPO / "scripts" / "mutation_ledger.py")
ledger = importlib.util.module_from_spec(_spec)
sys.modules["mutation_ledger"] = ledger  # its dataclass looks its module up there
_spec.loader.exec_module(ledger)

RULES = ledger.load_rules()
#: The ledger of the code that guards the ensemble (scripts/mutation-security.sh), with its [scope].
SECURITY = REPO / "tests" / "mutation" / "security-ledger.toml"
LEDGERS = {"core": ledger.LEDGER, "security": SECURITY}
ALL_RULES = [(name, rule) for name, path in LEDGERS.items() for rule in ledger.load_rules(path)]


def test_every_rule_names_its_class_and_reason_and_a_known_class() -> None:
    assert RULES and all(r["class"] in {"message", "default", "same"} and len(r["reason"]) > 20 for _, r in ALL_RULES)


@pytest.mark.parametrize("name, rule", ALL_RULES, ids=lambda x: x if isinstance(x, str) else
                         f"{x['class']}:{x['before'][:40]}")
def test_each_rule_describes_code_that_is_in_the_core_now(name: str, rule: dict) -> None:
    """A rule whose original line is gone from every module it names would excuse a mutant of code that changed."""
    scope = ledger.load_scope(LEDGERS[name])
    text = "".join(path.read_text() for path in set(ledger.module_files(scope, rule["functions"])))
    assert rule["before"] in text
    if name == "security":  # a rule of the security ledger excuses only mutants of the functions measured
        assert all(any(fnmatch.fnmatchcase(f, s) or fnmatch.fnmatchcase(s, f) for s in scope["functions"])
                   for f in rule["functions"]), rule["functions"]


def test_the_security_scope_names_functions_that_exist_in_its_files() -> None:
    """Each function of the scope is defined in one of the scope's files (a renamed function would silently drop
    out of the measurement), and maps to mutmut's name for its mutants."""
    scope = ledger.load_scope(SECURITY)
    assert scope["run_dir"] == ".cache/mutation-security"
    for path in scope["files"]:
        assert (REPO / path).is_file(), path
    globs = ledger.mutmut_globs(scope)
    assert len(globs) == len(scope["functions"])
    for pattern, glob in zip(scope["functions"], globs, strict=True):
        (path,) = ledger.module_files(scope, [pattern])
        assert str(path.relative_to(REPO)) in scope["files"]
        name = pattern.rsplit(".", 1)[1]
        if name != "*":
            assert re.search(rf"^\s*(async )?def {re.escape(name)}\(", path.read_text(), re.M), pattern
            mutant = ledger.Mutant(glob.replace("*", "7"), 0, prefix=scope["prefix"])
            assert mutant.function == pattern
    assert "zabref.runtime.links.xǁPeerLinksǁ_admit__mutmut_*" in globs
    assert "zabref.config.toml.x__security__mutmut_*" in globs
    for test in scope["tests"] + scope["deselect"] + scope["last"]:
        assert (REPO / test.split("::")[0]).is_file(), test


def test_a_rule_excuses_only_the_mutant_it_describes() -> None:
    rule = next(r for r in RULES if r["before"] == "self._require(j, packet,")
    excused = ledger.Mutant("zabref.core.follower.xǁFollowerActionsǁfollower_process_diff__mutmut_2", 0,
                            "self._require(j, packet, ZabState.SYNCHRONIZATION)",
                            "self._require(j, None, ZabState.SYNCHRONIZATION)")
    assert excused.function == "follower.FollowerActions.follower_process_diff"
    assert ledger.matches(rule, excused)
    # the phase argument mutated is a different mutant: not a message
    phase = ledger.Mutant(excused.name, 0, excused.before, "self._require(j, packet, None)")
    assert not ledger.matches(rule, phase)
    # the same text in a function the rule does not name
    leader = ledger.Mutant("zabref.core.leader.xǁLeaderActionsǁleader_process_ack__mutmut_9", 0,
                           excused.before, excused.after)
    assert not ledger.matches(rule, leader)
    assert ledger.Mutant("zabref.core.leader.x_sync_packets__mutmut_49", 0).function == "leader.sync_packets"
