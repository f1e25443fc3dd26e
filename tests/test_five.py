"""Five servers in the test command: the committed traces of spec/MC_five (traces/five/), replayed on five real servers.

With three servers a leader and any one follower make a quorum, so no three-server check can see a quorum counted
wrongly; `five` (quorums of three) can. Its graph takes minutes to build (TLC with the dump, 4 min), so the test
command does not build it: traces/five/ keeps the ten of its action-coverage traces that need a quorum of three
(manifest.json says why each), TLC checks that each is still a behaviour of the current spec (no graph needed:
conformance/replay/tracecheck.py), the clean servers pass them, and the seeded bug quorum_of_two (a leader that
commits with one follower's ACK) fails them at LeaderProcessACK. The simulator's five-server seeds are in
tests/test_sim.py and tests/test_sim_validation.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.graph.traces import read_trace
from conformance.replay.conform import run_all
from conformance.replay.driver import replay_file
from conformance.replay.seeded import load_bugs, patched_package

FIVE = Path(__file__).resolve().parent.parent / "traces" / "five"
MANIFEST = json.loads((FIVE / "manifest.json").read_text())
TRACES = sorted(FIVE.glob("*.jsonl.gz"))


def test_the_manifest_names_every_trace_once_with_its_reason() -> None:
    assert sorted(e["file"] for e in MANIFEST["traces"]) == [p.name for p in TRACES] and len(TRACES) >= 8
    assert all(e["why"] for e in MANIFEST["traces"]) and MANIFEST["config"] == "five"
    for path in TRACES:
        trace = read_trace(path)
        assert trace.header.config == "five" and trace.header.constants["N"] == 5


@pytest.mark.slow
def test_every_committed_five_trace_is_a_behaviour_of_the_current_spec(tmp_path) -> None:
    from conformance.replay.tracecheck import check_trace

    for path in TRACES:
        result = check_trace(path, work=tmp_path)
        assert result.passed, f"{path.name}: {result.failure}"


@pytest.mark.slow
def test_five_real_servers_pass_every_trace_and_a_quorum_of_two_fails_at_leader_process_ack() -> None:
    results = run_all(TRACES, jobs=2)
    failed = [(r["trace"], r.get("error") or r["failure"]["reason"]) for r in results if not r["passed"]]
    assert len(results) == len(TRACES) and not failed, failed
    bug = next(b for b in load_bugs() if b.name == "quorum_of_two")
    caught = []
    with patched_package(bug) as root:
        for path in TRACES:
            result = replay_file(path, bug=bug.name, bug_root=root)
            assert result.error is None, result.error
            if result.failure is not None:
                caught.append((path.name, result.failure.action))
    acks = [p.name for p in TRACES if "LeaderProcessACK__" in p.name or "FollowerProcessCOMMIT" in p.name]
    assert sorted(name for name, _ in caught) == acks and {a for _, a in caught} == {"LeaderProcessACK"}, caught
