"""What a conformance run against a real ZooKeeper server reached (`conformance.zk.coverage`), computed from the
committed regression traces and outcomes made by `conformance.zk.conform.reach` as the driver makes them: no JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.graph.traces import read_trace
from conformance.zk.conform import Outcome, reach, seats_of, sut_of
from conformance.zk.coverage import coverage, second_run

REGRESSION = Path(__file__).resolve().parents[1] / "traces" / "regression"


def _outcome(name: str, done: int, sut: int | None = None, verdict: str = "followed") -> Outcome:
    trace = read_trace(REGRESSION / f"{name}.jsonl.gz")
    seat = sut_of(trace) if sut is None else sut
    return reach(Outcome(name, len(trace.steps) - 1, done, verdict), trace, seat)


def test_every_seat_is_each_server_that_takes_a_role_the_first_seat_first():
    trace = read_trace(REGRESSION / "sync-trunc.jsonl.gz")
    seats = seats_of(trace)
    assert seats[0] == sut_of(trace) and sorted(seats) == [1, 2, 3]
    fle = read_trace(REGRESSION / "fle-split-vote-better-vote-ends-finalize.jsonl.gz")
    assert seats_of(fle) == [] and sut_of(fle) is None


def test_reach_splits_a_trace_at_the_steps_carried_out_and_names_the_real_servers_own():
    trace = read_trace(REGRESSION / "sync-diff.jsonl.gz")
    n = len(trace.steps) - 1
    whole, cut = _outcome("sync-diff", n), _outcome("sync-diff", 5, verdict="departed")
    assert len(whole.reached) == n and whole.left == [] and len(whole.edges) == n
    assert cut.reached == [s.label for s in trace.steps[1:6]] and cut.left == [s.label for s in trace.steps[6:]]
    assert cut.edges[0] == [trace.steps[0].node, trace.steps[1].node]
    assert cut.own and all(label.split("__")[1] == str(cut.sut) for label in cut.own)
    other = _outcome("sync-diff", n, sut=next(s for s in seats_of(trace) if s != whole.sut))
    assert other.reached == whole.reached and other.own != whole.own  # the same steps, another server's own


def test_coverage_sums_a_model_against_its_whole_graph_and_a_second_run_lists_what_only_stopped_traces_hold():
    full = [_outcome(name, 10 ** 6) for name in ("sync-diff", "sync-trunc")]
    for o in full:
        o.done = o.steps
    stopped = _outcome("sync-snap", 3, verdict="stopped")
    manifest = {"config": "ci", "coverage": {"action_instances": [97, 97], "action_names": [19, 19],
                                             "edges": 684707, "edges_covered": [270, 684707],
                                             "states": 264746}}
    (c,) = coverage([*full, stopped], [manifest])
    reached = {x for o in (*full, stopped) for x in o.reached}
    assert c.config == "ci" and c.traces == 3 and c.instances == (len(reached), 97) and c.edges[1] == 684707
    assert c.steps == (sum(o.done for o in full) + 3, sum(o.steps for o in (*full, stopped)))
    assert c.traced == {"instances": 97, "edges": 270} and "action_instances=" in c.line()
    again = second_run([*full, stopped])
    new = sorted({x for x in stopped.left if x not in reached})
    assert new and any(x.startswith("FollowerProcessSNAP") for x in new) and again == [("sync-snap", new)]
    # the same figures from the report's JSON, and no universe without a manifest
    (j,) = coverage([{**vars(o)} for o in (*full, stopped)])
    assert j.instances == (c.instances[0], None) and "/" not in j.line().split("action_instances=")[1].split()[0]


def test_each_version_has_the_model_of_its_follower_and_other_models_traces_are_noted() -> None:
    """`model_of`: 3.9.3+ defers a sync's uncommitted proposals to UPTODATE (cizk39), the older ones do not (cizk);
    `model_note` names the replays of another model, and says nothing when all are the version's own."""
    from conformance.zk import ZkFetchError
    from conformance.zk.conform import Outcome, model_note
    from conformance.zk.versions import model_of

    assert [model_of(v) for v in ("3.8.0", "3.8.6", "3.9.2", "3.9.3", "3.9.5")] == ["cizk"] * 3 + ["cizk39"] * 2
    with pytest.raises(ZkFetchError, match="'3.10.0' is not supported"):
        model_of("3.10.0")
    outs = [Outcome("a", 3, config="cizk39"), Outcome("b", 3, config="ci"), Outcome("c", 3, config="ci"),
            Outcome("d", 8, config="fle_ci")]
    note = model_note(outs, "3.9.5")
    assert note is not None and "model cizk39's" in note and "2 replays here are of ci" in note
    assert model_note(outs[:1] + outs[3:], "3.9.5") is None
    assert "1 replay here is of cizk39" in model_note(outs[:1], "3.8.0")
