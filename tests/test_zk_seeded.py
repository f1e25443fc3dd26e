"""Seeded bugs that only a real ZooKeeper server beside zabref's shows (`expect = "zookeeper"`,
conformance/replay/bugs/): each, re-opened in a patched copy of zabref, fails the named test of
tests/test_zk_mixed.py, which passes on the clean package."""

from __future__ import annotations

import helpers
import pytest

from conformance.replay.seeded import load_bug, load_bugs, patched_package

#: bug -> the real-ZooKeeper tests that must fail with it
CASES = {
    # a ZooKeeper server that joins after a ZooKeeper follower synchronized hears the zabref leader's vote at the
    # epoch of its election, not the one established (ZOOKEEPER-1732)
    "vote_keeps_decided_epoch": [
        "tests/test_zk_mixed.py::test_zookeeper_servers_follow_a_zabref_leader[3.8.0]"],
}


def test_every_zookeeper_bug_has_a_case() -> None:
    assert {b.name for b in load_bugs() if b.expect == "zookeeper"} == set(CASES)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_real_zookeeper_tests_catch_the_bug(name, tmp_path, zk380) -> None:
    with patched_package(load_bug(name), tmp_path) as root:
        outcomes = helpers.run_tests(root, CASES[name])
    missed = [t for t in CASES[name] if outcomes.get(t) not in ("FAILED", "ERROR")]
    assert not missed, f"{name}: not caught by {missed} ({outcomes})"
