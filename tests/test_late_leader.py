"""A leader that logs late (spec/Zab.tla's LeaderLogsLate; ``[cluster] leader_logs_late``): the core's CountsSelf
and LeaderOwnACK, the node's ``logged`` input, the configuration key, the switch read from a model's files, and the
merge's reading of a late leader's power cut. The replay of model tinylate's traces against real servers, and its
two seeded bugs, are tests/test_seeded_bugs.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.errors import SpecFormatError
from conformance.replay.switches import leader_logs_late
from conformance.validate.actionlogs import Event
from conformance.validate.merge import drop_lost
from test_core import P, Net, established, sent, t, z
from zabref.config import ConfigError, load_config
from zabref.core.effects import Timing
from zabref.core.node import Node
from zabref.core.zab import AppendTxns, Output, Persistent, Txn, ZabCore, ZabState
from zabref.errors import LocalProtocolError

SPEC = Path(__file__).resolve().parent.parent / "spec"


def late_established(n: int = 3, history: tuple[Txn, ...] = ()) -> Net:
    """test_core.established with every server logging late; server n leads in BROADCAST."""
    net = established(n, history=history, logs_late=True)
    assert net.core[n].zab_state == ZabState.BROADCAST
    return net


def test_a_late_leader_counts_its_whole_history_as_logged_when_it_starts_to_lead():
    """BecomeLeader: ackIndex[i][i] = Len(history[i]) with LeaderLogsLate (it logged all of it before), else 0."""
    for late, expected in ((True, 2), (False, 0)):
        core = ZabCore(1, (1, 2, 3), Persistent((t(1, 1), t(1, 2)), 1, 1), logs_late=late)
        core.become_leader()
        assert core.ack_index[1] == expected


def test_a_late_leader_proposes_before_its_log_write_and_commits_only_once_a_quorum_holds_it():
    net = late_established(3, (t(1, 1),))
    leader = net.core[3]
    out = net.do(3, leader.client_request(b"x"))
    txn = Txn(z(1, 2), b"x")
    assert out.persist == () and out.late == (AppendTxns((txn,)),)  # the write comes after the PROPOSALs
    assert sent(out) == [(1, P.PROPOSAL, z(1, 2)), (2, P.PROPOSAL, z(1, 2))]
    assert leader.history[-1] == txn and leader.ack_index[3] == 1  # in memory, not counted
    net.step(3, 1)
    assert net.step(1, 3) == Output()  # follower 1's ACK alone: the leader does not count itself (CountsSelf)
    out = leader.leader_own_ack(2)  # LeaderOwnACK: its write is durable -- with 1's ACK, a quorum
    assert out.deliver == (txn,) and sent(out) == [(f, P.COMMIT, z(1, 2)) for f in (1, 2)]
    assert leader.ack_index[3] == 2 and leader.last_committed == 2


def test_a_late_leaders_followers_commit_without_it_and_its_own_ack_then_commits_nothing_more():
    """Two of three ACKs are a quorum without the leader (QuorumPoint's learners alone)."""
    net = late_established(3)
    leader = net.core[3]
    net.do(3, leader.client_request(b"a"))
    net.step(3, 1), net.step(3, 2)
    assert net.step(1, 3) == Output()
    out = net.step(2, 3)
    assert out.deliver == (Txn(z(1, 1), b"a"),) and leader.ack_index[3] == 0
    assert leader.leader_own_ack(1) == Output()


def test_a_late_leaders_own_ack_first_then_one_ack_commits_and_a_batch_counts_up_to_k():
    """LeaderOwnACK takes any k past what it logged: a batch; N = 5 needs the leader and two followers."""
    net = late_established(5)
    leader = net.core[5]
    for v in (b"a", b"b", b"c"):
        net.do(5, leader.client_request(v))
    assert leader.leader_own_ack(2) == Output()  # nobody ACKed yet
    for f in (1, 2):
        for _ in range(3):
            net.step(5, f)
    assert net.step(1, 5) == Output()
    out = net.step(2, 5)  # leader (up to 2) + 1 + 2 reach 1: a quorum of 5
    assert out.deliver == (Txn(z(1, 1), b"a"),)
    net.step(1, 5), net.step(2, 5)  # their ACK(2): the leader counts itself up to 2
    assert leader.last_committed == 2
    net.step(1, 5), net.step(2, 5)  # their ACK(3): two followers alone are no quorum of 5
    assert leader.last_committed == 2
    assert leader.leader_own_ack(3).deliver == (Txn(z(1, 3), b"c"),)


@pytest.mark.parametrize("setup, k, message", [
    ("early", 1, "LeaderLogsLate is off"),
    ("follower", 1, "only a LEADING server in BROADCAST"),
    ("late", 0, "not past what it logged"),
    ("late", 2, "within its history"),
])
def test_leader_own_ack_is_refused_where_the_spec_does_not_enable_it(setup: str, k: int, message: str):
    net = established(3, logs_late=setup != "early")
    core = net.core[1 if setup == "follower" else 3]
    if setup == "late":
        net.do(3, core.client_request(b"a"))
    before = core.variables()
    with pytest.raises(LocalProtocolError, match=message):
        core.leader_own_ack(k)
    assert core.variables() == before


def test_the_node_takes_logged_as_leader_own_ack_only_in_the_role_it_was_written_in():
    timing = Timing()
    node = Node(1, (1,), Persistent(), timing, logs_late=True)
    node.core.become_leader()
    node.core.zab_state = ZabState.BROADCAST  # a one-server leader, put in BROADCAST by hand
    out = node.core.client_request(b"v")
    assert out.late and node.core.ack_index[1] == 0
    stale = node.role_serial - 1
    assert node.logged(stale, 1, 0.0).actions == ()  # written in an earlier role: not this role's own ACK
    eff = node.logged(node.role_serial, 1, 0.0)
    assert [a.name for a in eff.actions] == ["LeaderOwnACK"] and eff.deliver == (Txn(z(0, 1), b"v"),)
    assert node.logged(node.role_serial, 1, 0.0).actions == ()  # nothing past what it counted


def test_a_late_client_request_through_the_node_carries_its_write_and_where_it_brings_the_log():
    node = Node(1, (1,), Persistent(), Timing(), logs_late=True)
    node.core.become_leader()
    node.core.zab_state = ZabState.BROADCAST
    eff = node.client_submit(7, b"v", 0.0)
    assert eff.persist == () and eff.late == (AppendTxns((Txn(z(0, 1), b"v"),)),)
    assert eff.late_upto == (node.role_serial, 1)


def _config(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(f"[cluster]\n{line}\n\n[[server]]\nid = 1\nhost = \"127.0.0.1\"\nquorum_port = 21001\n"
                    "election_port = 21002\nclient_port = 21003\ndata_dir = \"d\"\n")
    return path


def test_the_configuration_key_is_a_boolean_off_by_default(tmp_path: Path):
    assert load_config(_config(tmp_path, "tick_ms = 100")).cluster.leader_logs_late is False
    assert load_config(_config(tmp_path, "leader_logs_late = true")).cluster.leader_logs_late is True
    with pytest.raises(ConfigError, match=r"\[cluster\]: leader_logs_late: expected true or false, got int 1"):
        load_config(_config(tmp_path, "leader_logs_late = 1"))
    # what `zabref cluster --leader-logs-late` writes (render_config) reads back the same
    from zabref.config import ClusterConfig
    from zabref.runtime.cluster import cluster_config

    for late in (True, False):
        path = cluster_config(tmp_path / f"c{late}", 3, 21000, ClusterConfig(leader_logs_late=late))
        assert load_config(path).cluster.leader_logs_late is late


def test_the_switch_is_read_from_the_models_files(tmp_path: Path):
    assert leader_logs_late("tinylate") is True and leader_logs_late("cizklog") is True
    assert leader_logs_late("tiny") is False and leader_logs_late("ci") is False
    assert leader_logs_late("no-such-model") is False  # a model kept elsewhere: the spec's own definition
    (tmp_path / "Zab.tla").write_text((SPEC / "Zab.tla").read_text())
    (tmp_path / "MC_bad.cfg").write_text("CONSTANTS\n    LeaderLogsLate <- Missing\n")
    (tmp_path / "MC_bad.tla").write_text("---- MODULE MC_bad ----\nEXTENDS Zab\n====\n")
    with pytest.raises(SpecFormatError, match=r"MC_bad.cfg: LeaderLogsLate <- Missing: .*MC_bad.tla has no line"):
        leader_logs_late("bad", tmp_path)


def _ev(sid: int, k: int, kind: str, action: str = "", persist=(), **vars_) -> Event:
    fields = {"vars": vars_} if kind == "restart" else {"action": action, "persist": list(persist), "vars": vars_}
    return Event(sid, k, "actions-1.jsonl", k, kind, fields)


def test_the_merge_keeps_a_late_leaders_proposal_that_its_power_cut_took_off_its_disk():
    """A late leader proposed (its PROPOSAL left) and lost the write in a power cut: the steps stay (the spec's Crash
    keeps a prefix in Kept(i)); without the switch they are dropped as never seen."""
    lead = {"state": "LEADING", "zab_state": "BROADCAST", "ack_index": {"1": 1}}
    events = [
        _ev(1, 1, "restart", history=[], accepted_epoch=1, current_epoch=1),
        _ev(1, 2, "step", "ClientRequest", [["append", [[z(1, 1), "a"]]]], **lead),
        _ev(1, 3, "step", "LeaderOwnACK", **lead),
        _ev(1, 4, "step", "ClientRequest", [["append", [[z(1, 2), "b"]]]], **lead),
        _ev(1, 5, "restart", history=[[z(1, 1), "a"]], accepted_epoch=1, current_epoch=1),
    ]
    notes: list[str] = []
    assert [e.line for e in drop_lost(events, notes, late=True)] == [1, 2, 3, 4, 5] and notes == []
    assert [e.line for e in drop_lost(events, notes)] == [1, 2, 3, 5] and len(notes) == 1
    # what it had logged (ackIndex[i][i] = 1) lost too: a synced write lost, whichever way it logs
    events[-1] = _ev(1, 5, "restart", history=[], accepted_epoch=1, current_epoch=1)
    notes = []
    assert [e.line for e in drop_lost(events, notes, late=True)] == [1, 5]


@pytest.fixture(scope="module")
def late_scenario_traces(tmp_path_factory) -> dict[str, Path]:
    """The witnesses of `LATE_SCENARIOS` in model tinylate's graph (generated with its traces when not cached),
    written as trace files: a late leader's power cut or step-down, which no action-coverage trace of tinylate
    reaches."""
    from conformance.replay.regress import graphs_of, write
    from conformance.replay.scenarios import LATE_SCENARIOS

    out = tmp_path_factory.mktemp("late-scenarios") / "traces"
    manifest = write(graphs_of(["tinylate"]), out, LATE_SCENARIOS)
    return {entry["scenario"]: out / entry["file"] for entry in manifest["traces"]}


#: scenario -> (its steps, the seeded bug it catches and the action it departs at; None: none)
LATE_CASES = {
    "late-leader-crash-loses-unlogged": (12, None),
    "late-leader-crash-keeps-unlogged": (12, ("own_ack_without_fsync", "Crash")),
    "late-leader-times-out-unlogged": (10, ("late_write_left_behind_at_role_change", "LeaderTimeout")),
}


def test_every_bug_a_scenario_catches_has_its_case():
    from conformance.replay.scenarios import LATE_SCENARIOS
    from conformance.replay.seeded import load_bugs

    assert set(LATE_CASES) == {s.name for s in LATE_SCENARIOS}
    assert {b.name for b in load_bugs() if b.expect == "scenario"} <= {c[1][0] for c in LATE_CASES.values() if c[1]}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(LATE_CASES))
def test_a_late_leaders_power_cut_and_step_down_replay_on_real_servers(late_scenario_traces, scenario: str):
    """The control driver holds the leader's log write; at the Crash it keeps what the step keeps (``log_late``
    without the ack when the disk keeps the proposal), and the disk is read after every step as a power cut leaves
    it. A late leader whose own ACK is not synced fails at the Crash that keeps the proposal (the disk lost what the
    step keeps); one whose held write is not made durable when it gives up leading fails at that LeaderTimeout."""
    from conformance.replay.driver import replay_file
    from conformance.replay.seeded import load_bugs, patched_package

    path = late_scenario_traces[scenario]
    steps, caught = LATE_CASES[scenario]
    result = replay_file(path)
    assert result.error is None and result.failure is None and result.replayed == result.steps == steps, result
    if caught is not None:
        name, action = caught
        bug = next(b for b in load_bugs() if b.name == name)
        with patched_package(bug) as root:
            failed = replay_file(path, bug=bug.name, bug_root=root)
        assert failed.failure is not None and failed.failure.action == action, failed
        assert "history (durable)" in failed.failure.differences or "history" in failed.failure.differences


@pytest.mark.slow
def test_the_quorum_point_of_a_long_history_costs_what_is_not_committed_yet(tmp_path: Path, tla):
    """spec/Zab.tla's QuorumPoint counts down from its top only to the leader's commit point: a late leader counts
    itself up to its whole history when it starts to lead, before any learner ACKs, and a count down to 0 from
    40,000 overflows TLC's stack (the validation of a late fault run of 33,547 transactions did, 2026-12-04)."""
    import shutil

    from conformance.tla.tools import Outcome, run_tlc

    shutil.copyfile(SPEC / "Zab.tla", tmp_path / "Zab.tla")
    (tmp_path / "QP.tla").write_text("""---- MODULE QP ----
EXTENDS Zab
Long == [k \\in 1 .. 40000 |-> [zxid |-> <<1, k>>, value |-> 1]]
Jump == /\\ lastCommitted[1] = 0
        /\\ history' = [history EXCEPT ![1] = Long]
        /\\ lastCommitted' = [lastCommitted EXCEPT ![1] = 39990]
        /\\ UNCHANGED <<acceptedEpoch, currentEpoch, state, zabState, leader, stagedHistory, leaderVars, msgs,
                       checkVars, faults>>
\\* leader 1 counts itself up to 40,000, nobody else has ACKed: no quorum above its commit point
Point == lastCommitted[1] > 0 => QuorumPoint(1, [f \\in Server |-> IF f = 1 THEN 40000 ELSE 0], 40000) = 39990
====
""")
    (tmp_path / "QP.cfg").write_text("CONSTANTS\n    N = 3\n    MaxEpoch = 1\n    MaxTxns = 1\n    MaxFaults = 0\n"
                                     "INIT Init\nNEXT Jump\nINVARIANT Point\n")
    result = run_tlc(tmp_path / "QP.tla", tmp_path / "QP.cfg", extra_args=("-deadlock",), tools=tla)
    assert result.outcome is Outcome.OK and result.distinct_states == 2, result.message


def test_action_logs_of_one_run_that_disagree_on_the_setting_are_refused_naming_the_line(tmp_path: Path):
    """`zabref validate` checks a run with LeaderLogsLate when its restart lines say the servers log late; logs that
    disagree are no one run: an input error naming the file and line, nothing validated."""
    import json

    from conformance.errors import InputError
    from conformance.validate.actionlogs import read_logs

    vars_ = {"history": [], "accepted_epoch": 0, "current_epoch": 0}
    for sid, late in ((1, True), (2, False), (3, True)):
        line = {"sid": sid, "n": 0, "t": sid, "kind": "restart", "vars": vars_, **({"leader_logs_late": True}
                                                                                   if late else {})}
        (tmp_path / f"actions-{sid}.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(InputError, match=r"actions-2.jsonl:1.*does not log late.*actions-1.jsonl:1 says the opposite"):
        read_logs(tmp_path)
    (tmp_path / "actions-2.jsonl").unlink()
    assert read_logs(tmp_path).late is True


def test_log_late_refuses_a_bad_request_and_changes_nothing(tmp_path: Path):
    """The control socket's ``log_late``: ``upto`` a positive integer, ``ack`` a boolean; else an error, and the
    held writes stay held."""
    import asyncio

    from test_batching import _leader_in_broadcast, _RecordingWriter, _started, _submit

    from zabref.net.peers import Connection
    from zabref.runtime.control import ControlPort

    async def scenario() -> None:
        server, task = await _started(tmp_path, late=True)
        conn = Connection(2, initiated=False)
        conn.attach(_RecordingWriter([]))
        server.conns[2] = conn
        await _leader_in_broadcast(server, conn)
        await server.call(lambda: _submit(server, b"a"))
        port = ControlPort(server, b"t" * 16)
        for bad, message in (({"upto": 0}, '"upto" must be a positive integer'),
                             ({"upto": True}, '"upto" must be a positive integer'),
                             ({"ack": "yes"}, '"ack" must be true or false')):
            with pytest.raises(ValueError, match=message):
                await port.op_log_late(bad)
            assert [k for _, (_, k) in server.late] == [1]
        assert await port.op_log_late({"upto": 1}) == {"logged": 1, "actions": [
            {"module": "Zab", "name": "LeaderOwnACK", "params": {"i": 1}}]}
        assert server.late == [] and await port.op_log_late({}) == {"logged": None, "actions": []}
        server.stop()
        await task

    asyncio.run(scenario())

