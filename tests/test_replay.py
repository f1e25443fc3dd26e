"""Conformance replay (conformance/replay/driver.py, conform.py, report.py) against real zabref server processes.

The hand-written trace below is a real path of the tiny model (spec/MC_tiny.cfg; it is the pipeline's trace for
ClientRequest__2 extended by two steps): server 2 decides to lead and server 1 to follow it (BecomeLeader,
BecomeFollower -- the driver steers their real elections), discovery and synchronization of follower 1, a client
request (which the driver submits on a client port) and its PROPOSAL logged by the follower. Each step lists only the
spec variables it changes, as `msgs[a][b]`-style paths with 1-based server ids, so it reads beside spec/Zab.tla.
Loopback only; every wait is bounded by the replay's settle timeout.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conformance.errors import TraceActionError
from conformance.graph.traces import Step, Trace, TraceHeader, dump_trace, read_trace
from conformance.replay import pool
from conformance.replay.commands import Command
from conformance.replay.conform import conform
from conformance.replay.driver import replay_file
from conformance.replay.harness import Cluster
from conformance.replay.plan import plan
from conformance.report.results import write_report

N = 3
NONE3 = ["NONE"] * 3


def pkt(kind: str, epoch: int, counter: int, data=None) -> dict:
    return {"data": "n/a" if data is None else data, "type": kind, "zxid": [epoch, counter]}


TXN = {"value": 1, "zxid": [1, 1]}
INIT = {
    "acceptedEpoch": [0, 0, 0], "ackIndex": [[0] * 3 for _ in range(3)], "committed": [], "currentEpoch": [0, 0, 0],
    "faults": 0, "history": [[], [], []], "lastCommitted": [0, 0, 0], "leader": [0, 0, 0],
    "learnerLastZxid": [[[0, 0]] * 3 for _ in range(3)], "learnerPhase": [list(NONE3) for _ in range(3)],
    "msgs": [[[], [], []] for _ in range(3)], "newEpoch": [0, 0, 0], "proposed": {"$set": []},
    "stagedHistory": [[], [], []], "state": ["LOOKING"] * 3, "zabState": ["ELECTION"] * 3,
}
# (action, params, {(variable, sid, ...): new value})
HAND = [
    ("BecomeLeader", {"i": 2},
     {("leader", 2): 2, ("state", 2): "LEADING", ("zabState", 2): "DISCOVERY", ("newEpoch", 2): 1}),
    ("BecomeFollower", {"i": 1, "j": 2},
     {("leader", 1): 2, ("state", 1): "FOLLOWING", ("zabState", 1): "DISCOVERY",
      ("msgs", 1, 2): [pkt("FOLLOWERINFO", 0, 0, 1)]}),
    ("LeaderProcessFOLLOWERINFO", {"i": 2, "j": 1},
     {("acceptedEpoch", 2): 1, ("learnerPhase", 2, 1): "LEADERINFO", ("msgs", 1, 2): [],
      ("msgs", 2, 1): [pkt("LEADERINFO", 1, 0)]}),
    ("FollowerProcessLEADERINFO", {"i": 1, "j": 2},
     {("acceptedEpoch", 1): 1, ("zabState", 1): "SYNCHRONIZATION", ("msgs", 2, 1): [],
      ("msgs", 1, 2): [pkt("ACKEPOCH", 0, 0, 0)]}),
    ("LeaderProcessACKEPOCH", {"i": 2, "j": 1},
     {("currentEpoch", 2): 1, ("learnerPhase", 2, 1): "NEWLEADER", ("zabState", 2): "SYNCHRONIZATION",
      ("msgs", 1, 2): [], ("msgs", 2, 1): [pkt("DIFF", 0, 0), pkt("NEWLEADER", 1, 0)]}),
    ("FollowerProcessDIFF", {"i": 1, "j": 2}, {("msgs", 2, 1): [pkt("NEWLEADER", 1, 0)]}),
    ("FollowerProcessNEWLEADER", {"i": 1, "j": 2},
     {("currentEpoch", 1): 1, ("zabState", 1): "BROADCAST", ("msgs", 2, 1): [], ("msgs", 1, 2): [pkt("ACK", 1, 0)]}),
    ("LeaderProcessACKNEWLEADER", {"i": 2, "j": 1},
     {("learnerPhase", 2, 1): "UPTODATE", ("zabState", 2): "BROADCAST", ("msgs", 1, 2): [],
      ("msgs", 2, 1): [pkt("UPTODATE", 0, 0)]}),
    ("ClientRequest", {"i": 2},
     {("history", 2): [TXN], ("proposed",): {"$set": [TXN]},
      ("msgs", 2, 1): [pkt("UPTODATE", 0, 0), pkt("PROPOSAL", 1, 1, 1)]}),
    ("FollowerProcessUPTODATE", {"i": 1, "j": 2}, {("msgs", 2, 1): [pkt("PROPOSAL", 1, 1, 1)]}),
    ("FollowerProcessPROPOSAL", {"i": 1, "j": 2},
     {("history", 1): [TXN], ("msgs", 2, 1): [], ("msgs", 1, 2): [pkt("ACK", 1, 1)]}),
]


def _label(action: str, params: dict) -> str:
    args = [params[k] for k in ("i", "j", "Q") if k in params]
    return "__".join([action, *("S" + "_".join(map(str, a["$set"])) if isinstance(a, dict) else str(a)
                                for a in args)])


def hand_trace(steps=HAND) -> Trace:
    state = copy.deepcopy(INIT)
    out = [Step(0, "Init", {}, None, 0, copy.deepcopy(state))]
    for k, (action, params, changes) in enumerate(steps, 1):
        for (var, *path), value in changes.items():
            if not path:
                state[var] = value
                continue
            target = state[var]
            for sid in path[:-1]:
                target = target[sid - 1]
            target[path[-1] - 1] = copy.deepcopy(value)
        out.append(Step(k, action, params, _label(action, params), k, copy.deepcopy(state)))
    header = TraceHeader("0" * 64, "tiny", {"MaxEpoch": 1, "MaxFaults": 1, "MaxTxns": 1, "N": N},
                         "hand-written", "action", (out[-1].label,))
    return Trace(header, tuple(out))


@pytest.fixture
def hand_file(tmp_path: Path) -> Path:
    path = tmp_path / "hand.jsonl.gz"
    dump_trace(path, hand_trace())
    return path


def test_hand_trace_is_well_formed(hand_file: Path) -> None:
    trace = read_trace(hand_file)  # the reader checks every field, the labels and covers
    assert [s.action for s in trace.steps][:4] == ["Init", "BecomeLeader", "BecomeFollower",
                                                   "LeaderProcessFOLLOWERINFO"]
    assert len(trace.steps) == 12


@pytest.mark.parametrize("action, params, expected", [
    ("BecomeLeader", {"i": 2}, Command("steer", 2, 2)),
    ("BecomeFollower", {"i": 3, "j": 1}, Command("steer", 3, 1)),
    ("LeaderProcessACKNEWLEADER", {"i": 2, "j": 1}, Command("release", 2, 1, "ACK")),
    ("FollowerProcessPROPOSALInSync", {"i": 1, "j": 3}, Command("release", 1, 3, "PROPOSAL")),
    ("FollowerProcessTRUNC", {"i": 1, "j": 3}, Command("release", 1, 3, "TRUNC")),
    ("FollowerTimeout", {"i": 1}, Command("timeout", 1)),
    ("LeaderTimeout", {"i": 2}, Command("timeout", 2)),
    ("Crash", {"i": 3}, Command("crash", 3)),
    ("ClientSync", {"i": 1}, Command("client_sync", 1)),
    ("LeaderProcessREQUEST", {"i": 2, "j": 1}, Command("release", 2, 1, "REQUEST")),
    ("LeaderSendPING", {"i": 2}, Command("ping", 2)),
    ("FollowerProcessPING", {"i": 1, "j": 2}, Command("release", 1, 2, "PING")),
    ("LeaderProcessPING", {"i": 2, "j": 3}, Command("release", 2, 3, "PING")),
    ("FollowerProcessSYNC", {"i": 1, "j": 2}, Command("release", 1, 2, "SYNC")),
])
def test_plan_maps_each_action_to_what_the_driver_does(action, params, expected) -> None:
    steps = [(action, params, {})]
    trace = hand_trace(steps)
    assert plan(trace, "t.jsonl.gz") == [expected]


def test_client_request_is_a_submit_at_the_leader() -> None:
    assert plan(hand_trace(), "t")[8] == Command("submit", 2)


@pytest.mark.parametrize("action, params, says", [
    ("FollowerProcessHEARTBEAT", {"i": 1, "j": 2}, "unknown action 'FollowerProcessHEARTBEAT'"),
    ("LeaderSendSYNC", {"i": 1}, "LeaderSendSYNC(1) does not follow a step of server 1"),
    ("Bogus", {"i": 1}, "unknown action 'Bogus'"),
    ("BecomeFollower", {"i": 1}, "BecomeFollower takes parameters i, j"),
    ("Crash", {"i": 4}, "must be a server in 1..3"),
])
def test_a_step_the_driver_cannot_take_is_an_error_naming_trace_and_step(tmp_path, action, params, says) -> None:
    steps = list(HAND[:3]) + [(action, params, {})]
    path = tmp_path / "bad.jsonl.gz"
    dump_trace(path, hand_trace(steps))
    with pytest.raises(TraceActionError) as caught:
        replay_file(path)  # raised before any server starts
    text = str(caught.value)
    assert f"{path}:6" in text and "step 4" in text and says in text  # line 6: the header, then steps 0..4


@pytest.mark.slow
def test_hand_trace_replays_with_no_difference(hand_file: Path) -> None:
    result = replay_file(hand_file)
    assert result.error is None and result.failure is None, result.failure
    assert (result.passed, result.replayed, result.steps) == (True, 11, 11)
    assert result.labels[0] == "BecomeLeader__2" and result.labels[-1] == "FollowerProcessPROPOSAL__1__2"


@pytest.mark.slow
def test_a_passed_trace_leaves_its_servers_reset_for_the_next_and_a_failed_one_does_not(hand_file: Path,
                                                                                         tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """conformance/replay/pool.py: the same processes replay trace after trace (each from empty data directories:
    the same result every time); a failure's servers are stopped, and the next trace gets new ones."""
    pool.close()
    started: list[Cluster] = []
    original = Cluster.__init__

    def counting(self, *args, **kwargs):
        original(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(Cluster, "__init__", counting)
    results = [replay_file(hand_file) for _ in range(3)]
    assert [(r.passed, r.replayed) for r in results] == [(True, 11)] * 3
    assert len(started) == 1
    pids = {sid: s.proc.pid for sid, s in started[0].servers.items()}
    assert all(s.running for s in started[0].servers.values())

    tampered = hand_trace()
    steps = list(tampered.steps)
    steps[3] = Step(3, steps[3].action, steps[3].params, steps[3].label, steps[3].node,
                    {**steps[3].state, "currentEpoch": [9, 9, 9]})
    bad = tmp_path / "tampered.jsonl.gz"
    dump_trace(bad, Trace(tampered.header, tuple(steps)))
    failed = replay_file(bad).failure
    assert failed is not None and failed.logs  # the logs of this trace only: the earlier ones' resets are not in them
    assert not any("reset: incarnation" in text for text in failed.logs.values())
    assert not any(s.running for s in started[0].servers.values())  # stopped, not kept
    assert replay_file(hand_file).passed and len(started) == 2
    assert {sid: s.proc.pid for sid, s in started[1].servers.items()} != pids
    assert replay_file(hand_file, reuse=False).passed and len(started) == 3
    pool.close()


@pytest.mark.slow
def test_tampered_state_fails_at_that_step_with_diff_command_and_report(tmp_path: Path) -> None:
    trace = hand_trace()
    k = 7  # FollowerProcessNEWLEADER(1, 2): the spec says currentEpoch[1] = 1; claim 7
    steps = list(trace.steps)
    state = copy.deepcopy(steps[k].state)
    state["currentEpoch"][0] = 7
    steps[k] = Step(k, steps[k].action, steps[k].params, steps[k].label, steps[k].node, state)
    path = tmp_path / "tampered.jsonl.gz"
    dump_trace(path, Trace(trace.header, tuple(steps)))

    result = replay_file(path)
    f = result.failure
    assert f is not None and result.replayed == k - 1
    assert (f.step, f.action, f.params) == (k, "FollowerProcessNEWLEADER", {"i": 1, "j": 2})
    assert f.differences == {"currentEpoch": [[7, 1, 0], [1, 1, 0]]}
    assert "--- spec: currentEpoch" in f.diff and "- 7," in f.diff and "+ 1," in f.diff
    assert f.command == f"zabref conform {path}"
    assert any("server 1" in name for name in f.logs)

    report = tmp_path / "report"
    write_report(report, [result.to_json()], [], "conform: summary")
    page = (report / "index.html").read_text()
    assert f"step {k}" in page and "FollowerProcessNEWLEADER" in page and "currentEpoch" in page
    assert "zabref conform" in page and ("<svg" in page or "could not be drawn" in page)
    doc = json.loads((report / "report.json").read_text())
    assert doc["results"][0]["failure"]["step"] == k


@pytest.mark.slow
def test_conform_command_exit_codes_and_summary(tmp_path: Path, hand_file: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(conform, [str(hand_file), "--jobs", "1", "--report", str(tmp_path / "r1")])
    assert ok.exit_code == 0, ok.output
    last = ok.output.strip().splitlines()[-1]
    assert last.startswith("conform: traces=1 steps=11 passed=1 failed=0") and "steps/s=" in last

    bad = tmp_path / "bad.jsonl.gz"
    dump_trace(bad, hand_trace(list(HAND[:2]) + [("Bogus", {"i": 1}, {})]))
    out = runner.invoke(conform, [str(bad), "--jobs", "1", "--report", str(tmp_path / "r2")])
    assert out.exit_code == 3 and "step 3" in out.output and "Bogus" in out.output


def test_report_refuses_to_replace_a_folder_that_is_not_a_report(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(Exception, match="not a report folder"):
        write_report(tmp_path, [], [], "x")
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_a_client_answer_is_judged_once_against_the_step_that_first_shows_it() -> None:
    """An answer seen while the spec says the server delivered the value stays right after the server crashes (the
    spec's Crash forgets lastCommitted); an answer first seen while the value is not delivered is a departure."""
    from types import SimpleNamespace

    from conformance.replay.driver import ZabReplay
    from conformance.replay.harness import Submit

    def state(last_committed: int) -> Step:
        st = copy.deepcopy(INIT)
        st["history"][1] = [TXN]
        st["lastCommitted"][1] = last_committed
        return Step(1, "Crash", {"i": 2}, "Crash__2", 0, st)

    world = ZabReplay.__new__(ZabReplay)
    world._syncs = []
    answered = Submit(2, "1", answer={"zxid": (1 << 32) | 1})
    answered.done.set()
    cluster = SimpleNamespace(submits=[answered])
    assert world.check_clients(state(1), cluster) == ""  # delivered, answered: judged right
    assert world.check_clients(state(0), cluster) == ""  # then the server crashed: still right
    early = Submit(2, "1", answer={"zxid": (1 << 32) | 1})
    early.done.set()
    says = world.check_clients(state(0), SimpleNamespace(submits=[early]))
    assert "answered the submit of '1'" in says and "has not delivered" in says


def test_a_clients_sync_is_answered_only_at_its_followers_sync_step_with_what_it_delivered() -> None:
    """ClientSync's client: an answer with a zxid before the follower takes its leader's SYNC is a departure; at
    FollowerProcessSYNC the oldest waiting sync there is answered with the follower's last delivered zxid."""
    from types import SimpleNamespace

    from conformance.replay.driver import ZabReplay
    from conformance.replay.harness import Submit

    def step(action: str, last_committed: int) -> Step:
        st = copy.deepcopy(INIT)
        st["history"][0] = [TXN]
        st["lastCommitted"][0] = last_committed
        return Step(5, action, {"i": 1, "j": 2}, action, 0, st)

    cluster = SimpleNamespace(submits=[])
    world = ZabReplay.__new__(ZabReplay)
    world._syncs = [Submit(1, "sync", answer={"zxid": (1 << 32) | 1})]
    world._syncs[0].done.set()
    assert "before it took its leader's SYNC" in world.check_clients(step("FollowerProcessCOMMIT", 1), cluster)
    assert world.check_clients(step("FollowerProcessSYNC", 1), cluster) == ""
    world._syncs = [Submit(1, "sync", answer={"zxid": 0})]
    world._syncs[0].done.set()
    says = world.check_clients(step("FollowerProcessSYNC", 1), cluster)
    assert "answered a client's sync with {'zxid': 0}" in says and "delivered up to zxid 0x100000001" in says


def test_coverage_counts_each_model_against_its_own_graph() -> None:
    """Zab and FastLeaderElection traces replayed together: each model's instances are counted against that model's
    graph (a generated manifest's totals), never FLE labels against the Zab graph."""
    from conformance.report.results import coverage

    results = [{"config": "ci", "labels": ["BecomeLeader__1", "Crash__2", "BecomeLeader__1"]},
               {"config": "fle_ci", "labels": ["HandleSameRound__1__2", "StartElection__1"]}]
    generated = {"config": "ci", "coverage": {"action_instances": [2, 97], "edges": 676983, "states": 264746},
                 "traces": [{"covers": ["BecomeLeader__1"]}, {"covers": ["Crash__2"]}]}
    committed = {"configs": ["ci", "fle_ci"], "traces": [{"config": "fle_ci", "covers": ["HandleSameRound__1__2"]}]}
    models = {m["model"]: m for m in coverage(results, [generated, committed])["models"]}
    assert (models["ci"]["instances_taken"], models["ci"]["instances_in_graph"]) == (2, 97)
    assert models["ci"]["edges_in_graph"] == 676983
    assert (models["fle_ci"]["instances_taken"], models["fle_ci"]["instances_in_graph"]) == (2, None)
    assert {c["action"] for c in models["fle_ci"]["by_action"]} == {"HandleSameRound", "StartElection"}
    assert {c["action"] for c in models["ci"]["by_action"]} == {"BecomeLeader", "Crash"}


def test_the_pool_keeps_at_most_kept_clusters_stopping_the_one_kept_longest(tmp_path: Path) -> None:
    class Fake:
        def __init__(self, n: int) -> None:
            self.folder = tmp_path / str(n)
            self.stopped = self.reset = False

        def reset_begin(self) -> None:
            self.reset = True

        def reset_end(self) -> None:
            pass

        def stop(self) -> None:
            self.stopped = True

    pool.close()
    fakes = [Fake(k) for k in range(pool.KEPT + 1)]
    for k, fake in enumerate(fakes):
        pool.keep(("shape", k % 2), fake)
    assert all(f.reset for f in fakes)
    assert [f.stopped for f in fakes] == [True] + [False] * pool.KEPT
    assert pool.take(("shape", pool.KEPT % 2)) is fakes[-1]  # the latest of that key
    assert pool.take(("other", 0)) is None
    pool.close()
    assert [f.stopped for f in fakes] == [True] * pool.KEPT + [False]  # the one taken is the taker's to stop
