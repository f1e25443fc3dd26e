"""The auditor's map (conformance/report/auditmap.py) is computed from spec/Zab.tla and zabref/, and it goes stale
loudly.

The staleness tests work on a copy of the tree in tmp_path (spec/Zab.tla, zabref/, conformance/replay/mapping.py): they
rename a handler, drop a mapping function, and show that the map names exactly what broke. The real tree is never
touched.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conformance.report.auditmap import NOT_A_METHOD, compute_map, snake
from conformance.report.specread import read_definitions
from conformance.tla.labels import read_next

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def live():
    return compute_map(REPO)


def copy_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "spec").mkdir(parents=True)
    shutil.copy(REPO / "spec" / "Zab.tla", root / "spec" / "Zab.tla")
    shutil.copytree(REPO / "zabref", root / "zabref", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "conformance" / "replay").mkdir(parents=True)
    shutil.copy(REPO / "conformance" / "replay" / "mapping.py", root / "conformance" / "replay" / "mapping.py")
    return root


def rename_everywhere(folder: Path, old: str, new: str) -> int:
    count = 0
    for path in folder.rglob("*.py"):
        text = path.read_text()
        changed = re.sub(rf"\b{old}\b", new, text)
        if changed != text:
            count += 1
            path.write_text(changed)
    return count


def test_the_live_tree_has_no_problem(live):
    assert live.problems == []


def test_every_action_of_next_is_mapped_to_the_method_of_its_name(live):
    names = [s.name for s in read_next(REPO / "spec" / "Zab.tla")]
    assert [a.name for a in live.actions] == names and len(names) == 21
    for a in live.actions:
        expected = NOT_A_METHOD.get(a.name, (snake(a.name), ""))[0]
        assert a.handler is not None and a.handler.name == expected, a.name
        assert a.handler.path.startswith("zabref/")
        source_line = (REPO / a.handler.path).read_text().splitlines()[a.handler.line - 1]
        assert f"def {expected}(" in source_line


def test_snake_case_names():
    assert snake("FollowerProcessLEADERINFO") == "follower_process_leaderinfo"
    assert snake("FollowerProcessPROPOSALInSync") == "follower_process_proposal_in_sync"
    assert snake("LeaderProcessACKNEWLEADER") == "leader_process_acknewleader"
    assert snake("ElectLeader") == "elect_leader"


def test_definitions_carry_their_text_and_comment(live):
    d = read_definitions(REPO / "spec" / "Zab.tla")["FollowerProcessDIFF"]
    assert d.text.startswith("FollowerProcessDIFF(i, j) ==") and "stagedHistory'" in d.text
    assert "DIFF(lastCommittedZxid)" in d.comment
    assert live.action("FollowerProcessDIFF").primes == ("stagedHistory", "msgs")
    # Primed through called operators: FollowerTimeout primes nothing itself but GoLooking's variables.
    assert {"state", "zabState", "msgs"} <= set(live.action("FollowerTimeout").primes)


def test_variables_persistence_and_mapping(live):
    by = {v.name: v for v in live.variables}
    assert [v for v in by if by[v].spec_persistent] == ["history", "acceptedEpoch", "currentEpoch"]
    assert by["history"].impl_persistent is True and by["state"].impl_persistent is False
    assert by["acceptedEpoch"].field == "accepted_epoch" and by["acceptedEpoch"].field_code.startswith(
        "zabref/core/state.py:")
    assert by["msgs"].mapping is not None and by["msgs"].field is None
    assert by["faults"].mapping is None and "bound" in by["faults"].not_mapped


def test_renaming_a_handler_in_a_copy_is_reported_both_ways(tmp_path):
    root = copy_tree(tmp_path)
    assert rename_everywhere(root / "zabref", "follower_process_diff", "follower_process_diff_v2") >= 2
    problems = compute_map(root).problems
    assert any(p.startswith("spec action FollowerProcessDIFF has no handler") for p in problems), problems
    assert any(p.startswith("handler follower_process_diff_v2 (zabref/core/follower.py:") and
               "names no spec action" in p for p in problems), problems
    assert len(problems) == 2, problems
    # The real tree is untouched.
    assert "def follower_process_diff(" in (REPO / "zabref" / "core" / "follower.py").read_text()


def test_a_handler_named_after_no_action_is_reported(tmp_path):
    root = copy_tree(tmp_path)
    path = root / "zabref" / "core" / "follower.py"
    path.write_text(path.read_text().replace(
        "    def follower_timeout(self)",
        "    def follower_process_ping(self, j, packet):\n        return None\n\n    def follower_timeout(self)"))
    problems = compute_map(root).problems
    assert problems == [p for p in problems if "follower_process_ping" in p] and len(problems) == 1, problems


def test_a_renamed_entry_point_is_reported(tmp_path):
    root = copy_tree(tmp_path)
    rename_everywhere(root / "zabref", "leader_timeout", "give_up_leadership")
    problems = compute_map(root).problems
    assert any(p.startswith("spec action LeaderTimeout has no handler") for p in problems), problems


def test_a_variable_with_no_mapping_and_no_reason_is_reported(tmp_path):
    root = copy_tree(tmp_path)
    path = root / "conformance" / "replay" / "mapping.py"
    text = path.read_text()
    text = re.sub(r'\n    "faults": "[^"]*"\n\s*"[^"]*",\n', "\n", text)
    assert '"faults"' not in text
    path.write_text(text)
    problems = compute_map(root).problems
    assert problems == ["spec variable faults (spec/Zab.tla:{}) has no mapping function in conformance/replay/mapping.py "
                        "and no reason in NOT_MAPPED".format(
                            next(v.line for v in compute_map(REPO).variables if v.name == "faults"))]


def test_a_new_spec_variable_without_a_mapping_is_reported(tmp_path):
    root = copy_tree(tmp_path)
    spec = root / "spec" / "Zab.tla"
    spec.write_text(spec.read_text().replace(
        "    faults            \\* faults so far", "    pings,            \\* a new variable\n    faults            \\* faults so far"))
    problems = compute_map(root).problems
    assert any(p.startswith("spec variable pings ") for p in problems), problems


def test_persistence_disagreement_is_reported(tmp_path):
    root = copy_tree(tmp_path)
    spec = root / "spec" / "Zab.tla"
    text = spec.read_text()
    # Move currentEpoch under the volatile heading: the implementation still keeps it on disk.
    text = text.replace("    currentEpoch,     \\* the epoch of the last NEWLEADER accepted\n", "")
    text = text.replace("    \\* ---- every server, volatile (lost in a crash) ----\n",
                        "    \\* ---- every server, volatile (lost in a crash) ----\n    currentEpoch,     \\* moved\n")
    spec.write_text(text)
    problems = compute_map(root).problems
    assert problems == ["spec variable currentEpoch is volatile in the spec but on disk in the implementation"]


def test_an_action_lists_the_spec_operators_and_code_helpers_it_calls(live):
    newleader = live.action("FollowerProcessNEWLEADER")
    assert {"SyncingFrom", "HasPacket", "Send", "Discard", "Packet"} <= set(newleader.spec_uses)
    assert not {"leaderVars", "checkVars", "BROADCAST"} & set(newleader.spec_uses)  # names for tuples, strings
    helpers = {h.name: h for h in newleader.helpers}
    assert {"_require", "_history_ops"} <= set(helpers)
    assert helpers["_history_ops"].path == "zabref/core/follower.py"
    assert "def _history_ops(" in helpers["_history_ops"].source
    # Another action's handler is never shown as a helper (the dispatcher routes, it does not help).
    names = {a.handler.name for a in live.actions if a.handler}
    assert all(not ({h.name for h in a.helpers} & names) for a in live.actions)
