"""Seeded durability bugs (conformance/replay/bugs/*.toml, those patching zabref/storage/) are caught by the storage
tests.

For each bug, a scratch copy of zabref with the bug applied (conformance.replay.seeded.patched_package) runs a selection
of the storage tests in a child pytest; the test checks that the tests expected to catch it fail, and, where it
matters, that a test on RealDisk -- where a SIGKILL keeps the page cache -- does NOT (the reason power loss must be
modelled). The clean package passes the same tests in the ordinary run.
"""

from __future__ import annotations

from pathlib import Path

import helpers
import pytest

from conformance.replay.seeded import BUGS_DIR, load_bugs, patched_package

REPO = Path(__file__).resolve().parent.parent
CRASH = "tests/test_storage_crash.py::test_every_crash_point_recovers_a_whole_step"
STEP = "tests/test_storage.py::test_each_step_kind_gives_the_model_state_in_memory_on_disk_and_after_reopen"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a child pytest per bug

#: bug -> (tests to run, tests that must fail, tests that must pass: the bug is invisible without power loss)
CASES = {
    "epoch_without_fsync": (
        [CRASH, STEP],
        [f"{CRASH}[leaderinfo-sim]", f"{CRASH}[leaderinfo-powerloss]"],
        [f"{STEP}[leaderinfo]", f"{CRASH}[proposal-powerloss]", f"{CRASH}[newleader_trunc-powerloss]"],
    ),
    "rename_without_directory_fsync": (
        [CRASH, "tests/test_storage.py::test_a_snap_always_compacts"],
        [f"{CRASH}[newleader_snap-sim]", f"{CRASH}[newleader_snap-powerloss]", f"{CRASH}[proposal-powerloss]"],
        ["tests/test_storage.py::test_a_snap_always_compacts"],
    ),
    "trunc_not_logged": (
        [CRASH, STEP],
        [f"{CRASH}[newleader_trunc-sim]", f"{CRASH}[group-powerloss]", f"{STEP}[newleader_trunc]", f"{STEP}[group]"],
        [f"{CRASH}[newleader_snap-powerloss]"],
    ),
    "snap_without_fsync": (
        [CRASH, "tests/test_storage.py::test_a_snap_always_compacts"],
        [f"{CRASH}[newleader_snap-sim]", f"{CRASH}[newleader_snap-powerloss]"],
        ["tests/test_storage.py::test_a_snap_always_compacts", f"{CRASH}[proposal-powerloss]"],
    ),
    "step_not_atomic": (
        [CRASH, "tests/test_storage.py::test_one_step_is_one_batch_with_its_commit"],
        [f"{CRASH}[newleader_trunc-sim]", f"{CRASH}[newleader_diff-powerloss]", f"{CRASH}[group-sim]",
         "tests/test_storage.py::test_one_step_is_one_batch_with_its_commit"],
        [f"{CRASH}[proposal-sim]", f"{CRASH}[leaderinfo-powerloss]"],
    ),
}
BUGS = {b.name: b for b in load_bugs(BUGS_DIR) if any(r.file.startswith("storage/") for r in b.replacements)}


def test_every_storage_bug_has_a_case():
    assert set(BUGS) == set(CASES)
    # and the catalogue says that the storage tests are what catches the one conformance misses
    assert {b.name for b in load_bugs(BUGS_DIR) if b.expect == "storage"} <= set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_storage_tests_catch_the_bug(name, tmp_path):
    tests, must_fail, must_pass = CASES[name]
    with patched_package(BUGS[name], tmp_path) as root:
        outcomes = helpers.run_tests(root, tests, probe="zabref.storage")
    missed = [t for t in must_fail if outcomes.get(t) not in ("FAILED", "ERROR")]
    assert not missed, f"{name}: not caught by {missed}"
    wrongly = [t for t in must_pass if outcomes.get(t) != "PASSED"]
    assert not wrongly, f"{name}: expected to pass (the bug is invisible there) but did not: {wrongly}"
