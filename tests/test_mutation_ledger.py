"""The ledger of the core's equivalent mutants (tests/mutation/ledger.toml, read by scripts/mutation_ledger.py):
well-formed, each rule's original text still in the core, and a rule excuses only the mutants it describes.

The mutation run itself (scripts/mutation.sh, mutmut) is not part of the test command: it takes tens of minutes.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("mutation_ledger", REPO / "scripts" / "mutation_ledger.py")
ledger = importlib.util.module_from_spec(_spec)
sys.modules["mutation_ledger"] = ledger  # its dataclass looks its module up there
_spec.loader.exec_module(ledger)

RULES = ledger.load_rules()


def test_every_rule_names_its_class_and_reason_and_a_known_class() -> None:
    assert RULES and all(r["class"] in {"message", "default", "same"} and len(r["reason"]) > 20 for r in RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r['class']}:{r['before'][:40]}")
def test_each_rule_describes_code_that_is_in_the_core_now(rule: dict) -> None:
    """A rule whose original line is gone from every module it names would excuse a mutant of code that changed."""
    modules = {pattern.split(".")[0] for pattern in rule["functions"]}
    text = "".join((REPO / "zabref" / "core" / f"{m}.py").read_text() for m in modules)
    assert rule["before"] in text


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
