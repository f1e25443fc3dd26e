"""The Zab spec: SANY parses every module, TLC passes the tiny model with its recorded state count, and the labeled Next
has exactly Next's behaviours. (That ci passes every check and takes every action is tests/test_pipeline.py's
test_ci_passes_every_check_and_its_traces_cover_every_action: one TLC run of ci serves both.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.tla.check import coverage_by_action
from conformance.tla.labels import decode_label, encode_label, instances, model_switch, read_constants, read_next
from conformance.tla.modelconfig import prepare
from conformance.tla.mutations import model_checks
from conformance.tla.tools import Outcome, run_sany, run_tlc

SPEC = Path(__file__).resolve().parent.parent / "spec"
# Recorded in spec/README.md; a change to the spec that changes these must update both.
TINY_DISTINCT_STATES = 14600
TINYSYNC_DISTINCT_STATES = 75837
#: ZabSync.tla's actions (spec/README.md, "Reads: REQUEST, SYNC, PING").
SYNC_ACTIONS = ("ClientSync", "LeaderProcessREQUEST", "LeaderSendSYNC", "FollowerProcessSYNC")


def test_sany_parses_every_module(tla):
    modules = sorted(SPEC.glob("*.tla"))
    assert {"Zab.tla", "MC_tiny.tla", "MC_ci.tla"} <= {m.name for m in modules}
    for module in modules:
        # run_sany raises SpecError (with file:line:column) on any error; warnings are allowed but shown.
        result = run_sany(module, tla)
        assert result.module == module.resolve()


def test_next_reads_as_labelable_disjuncts():
    actions = read_next(SPEC / "Zab.tla")
    names = [a.name for a in actions]
    # Every action defined at top level with parameters and used in Next, and nothing twice.
    assert len(names) == len(set(names))
    assert names[:2] == ["BecomeLeader", "BecomeFollower"]
    assert actions[1].params == (("i", "Server"), ("j", "Server"))
    text = (SPEC / "Zab.tla").read_text()
    for action in actions:
        assert re.search(rf"^{action.name}(\(|\s*==)", text, re.M), action.name


def test_label_round_trip():
    actions = read_next(SPEC / "Zab.tla")
    labels = set()
    for action, args in instances(actions, {"N": 3}):
        label = encode_label(action.name, args)
        assert decode_label(label) == (action.name, args)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", label)
        labels.add(label)
    assert "BecomeFollower__2__1" in labels and "FollowerProcessDIFF__1__3" in labels


def test_tiny_passes_with_recorded_state_count_and_labels_keep_the_graph(tla, tmp_path):
    labeled = prepare(SPEC, "tiny", tmp_path / "labeled")
    plain = prepare(SPEC, "tiny", tmp_path / "plain", labels=False)
    assert labeled.labeled and not plain.labeled and labeled.tlc_options == ("-deadlock",)
    results = [run_tlc(m.module, m.cfg, workers=2, coverage=m is labeled, extra_args=m.tlc_options, tools=tla)
               for m in (labeled, plain)]
    for result in results:
        assert result.outcome is Outcome.OK, result.message
        assert result.distinct_states == TINY_DISTINCT_STATES
    # TLC's coverage rows, one per label, summed per action of Next: each state is found first by one action.
    taken = coverage_by_action(results[0])
    assert set(taken) - {"Init"} <= {a.name for a in read_next(SPEC / "Zab.tla")}, sorted(taken)
    assert sum(distinct for distinct, _ in taken.values()) == TINY_DISTINCT_STATES
    # Same graph: the same number of transitions generated, labeled or not.
    assert results[0].states_generated == results[1].states_generated


def test_constants_are_read_from_cfg():
    assert read_constants((SPEC / "MC_ci.cfg").read_text()) == {"N": 3, "MaxEpoch": 2, "MaxTxns": 2, "MaxFaults": 1}


@pytest.mark.slow
@pytest.mark.parametrize("config", ["live", pytest.param("live2", marks=pytest.mark.long)])
def test_liveness_holds_under_livespec(config, tla, tmp_path):
    """Both liveness properties hold under LiveSpec (spec/Zab.tla, "Liveness"), with one and with two faults; a
    terminal state of the bounded model stutters and must satisfy them too (spec/mutations breaks each)."""
    cfg = (SPEC / f"MC_{config}.cfg").read_text()
    assert re.search(r"^SPECIFICATION LiveSpec$", cfg, re.M)
    assert model_checks(cfg) == ([], ["EventuallyStableLeader", "StableWritesDelivered"])
    assert re.search(r"^LiveNext == Next /\\ ", (SPEC / "Zab.tla").read_text(), re.M)  # a behaviour of Spec
    model = prepare(SPEC, config, tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states > 5000


def test_the_zookeeper_model_is_ci_with_truncation_at_once():
    """MC_cizk: ci's bounds and checks, with TruncAtOnce overridden to TRUE (spec/README.md, departure 11); its
    check and its mutations (TruncAtOnceTooFar, TruncAtOnceKeepsNext) run with TLC in tests/test_mutations.py."""
    cfg = (SPEC / "MC_cizk.cfg").read_text()
    assert re.search(r"^\s*TruncAtOnce <- ZooKeeperTruncAtOnce$", cfg, re.M)
    assert re.search(r"^ZooKeeperTruncAtOnce == TRUE$", (SPEC / "MC_cizk.tla").read_text(), re.M)
    assert re.search(r"^TruncAtOnce == FALSE$", (SPEC / "Zab.tla").read_text(), re.M)
    assert model_checks(cfg) == model_checks((SPEC / "MC_ci.cfg").read_text())
    assert read_constants(cfg) == read_constants((SPEC / "MC_ci.cfg").read_text())


def test_the_zookeeper_39_model_is_cizk_with_newleader_deferring():
    """MC_cizk39: cizk's bounds and checks, with NewLeaderDefers overridden to TRUE too (spec/README.md, departure
    12); its mutations (NewLeaderDefersOlder, NewLeaderDefersLogged) run with TLC in tests/test_mutations.py, its
    whole check in the longer command (below)."""
    cfg = (SPEC / "MC_cizk39.cfg").read_text()
    assert re.search(r"^\s*TruncAtOnce <- ZooKeeperTruncAtOnce$", cfg, re.M)
    assert re.search(r"^\s*NewLeaderDefers <- ZooKeeperNewLeaderDefers$", cfg, re.M)
    module = (SPEC / "MC_cizk39.tla").read_text()
    assert re.search(r"^ZooKeeperTruncAtOnce == TRUE$", module, re.M)
    assert re.search(r"^ZooKeeperNewLeaderDefers == TRUE$", module, re.M)
    assert re.search(r"^NewLeaderDefers == FALSE$", (SPEC / "Zab.tla").read_text(), re.M)
    assert model_checks(cfg) == model_checks((SPEC / "MC_ci.cfg").read_text())
    assert read_constants(cfg) == read_constants((SPEC / "MC_ci.cfg").read_text())


def test_a_models_switches_are_read_from_its_cfg_and_module(tmp_path):
    """`model_switch`: what the ZooKeeper driver asks of a trace's model (conformance/zk/conform.py, `_deferral`)."""
    from conformance.errors import SpecFormatError

    assert [model_switch(SPEC, c, "NewLeaderDefers") for c in ("ci", "cizk", "cizk39")] == [False, False, True]
    assert [model_switch(SPEC, c, "TruncAtOnce") for c in ("ci", "cizk", "cizk39")] == [False, True, True]
    (tmp_path / "MC_off.cfg").write_text("CONSTANTS\n    NewLeaderDefers <- Off\n")
    (tmp_path / "MC_off.tla").write_text("---- MODULE MC_off ----\nEXTENDS Zab\nOff == FALSE\n====\n")
    assert model_switch(tmp_path, "off", "NewLeaderDefers") is False
    with pytest.raises(SpecFormatError, match="no model 'nope'"):
        model_switch(SPEC, "nope", "NewLeaderDefers")


@pytest.mark.long
def test_the_zookeeper_39_model_passes_every_check_on_more_states_than_cizk(tla, tmp_path):
    """cizk39 holds every invariant of ci; deferring adds states (a follower between NEWLEADER and UPTODATE with
    something staged), it removes none of cizk's (spec/README.md: 264,746 against 294,265)."""
    model = prepare(SPEC, "cizk39", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states > 264_746


def test_the_zookeeper_leader_model_is_cizk_with_a_leader_that_logs_late():
    """MC_cizklog: cizk's bounds and checks, with LeaderLogsLate overridden to TRUE too (spec/README.md, departure
    13: a crashed leader may lose its uncommitted tail); its mutation LeaderLogsLateCommitted runs with TLC in
    tests/test_mutations.py, its whole check in the longer command (below)."""
    cfg = (SPEC / "MC_cizklog.cfg").read_text()
    assert re.search(r"^\s*TruncAtOnce <- ZooKeeperTruncAtOnce$", cfg, re.M)
    assert re.search(r"^\s*LeaderLogsLate <- ZooKeeperLeaderLogsLate$", cfg, re.M)
    assert re.search(r"^ZooKeeperLeaderLogsLate == TRUE$", (SPEC / "MC_cizklog.tla").read_text(), re.M)
    assert re.search(r"^LeaderLogsLate == FALSE$", (SPEC / "Zab.tla").read_text(), re.M)
    assert model_checks(cfg) == model_checks((SPEC / "MC_ci.cfg").read_text())
    assert read_constants(cfg) == read_constants((SPEC / "MC_ci.cfg").read_text())
    assert [model_switch(SPEC, c, "LeaderLogsLate") for c in ("ci", "cizk", "cizk39", "cizklog")] == [
        False, False, False, True]


@pytest.mark.long
def test_the_zookeeper_leader_model_passes_every_check_on_more_states_than_cizk(tla, tmp_path):
    """cizklog holds every invariant of ci; a leader's crash that loses its uncommitted tail adds states and removes
    none of cizk's (spec/README.md: 341,292 against 264,746)."""
    model = prepare(SPEC, "cizklog", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states > 264_746


@pytest.mark.parametrize("sync, base", [("tinysync", "tiny"), ("cisync", "ci")])
def test_a_sync_model_is_its_base_with_syncs_and_the_read_checks(sync, base):
    """The sync models change nothing of their base but one sync under way, ZabSync's Init/Next, and the checks:
    NoHiddenDeadlock over SyncNext, and the three checks of the reads."""
    cfg, base_cfg = ((SPEC / f"MC_{name}.cfg").read_text() for name in (sync, base))
    assert read_constants(cfg) == {**read_constants(base_cfg), "MaxSyncs": 1}
    assert re.search(r"^INIT SyncInit$", cfg, re.M) and re.search(r"^NEXT SyncNext$", cfg, re.M)
    invariants, properties = model_checks(cfg)
    base_invariants, base_properties = model_checks(base_cfg)
    assert properties == base_properties
    assert invariants == [("Sync" + name if name == "NoHiddenDeadlock" else name) for name in base_invariants] + [
        "SyncTypeOK", "SyncSeesCommitted", "SyncFlushesChannel"]
    assert "EXTENDS ZabSync" in (SPEC / f"MC_{sync}.tla").read_text()


@pytest.mark.deep
def test_tinysync_passes_every_check_and_takes_every_sync_action(tla, tmp_path):
    """ZabSync.tla on tiny's bounds: every check holds, with the recorded state count, and each of its four actions
    is taken (LeaderSendSYNC only when a sync waited for an outstanding proposal)."""
    model = prepare(SPEC, "tinysync", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, coverage=True, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states == TINYSYNC_DISTINCT_STATES
    taken = coverage_by_action(result)
    for action in SYNC_ACTIONS:
        assert taken.get(action, (0, 0))[1] > 0, (action, taken)


def test_tinyconfirm_is_tinysync_with_zabrefs_confirmation():
    assert model_switch(SPEC, "tinyconfirm", "SyncConfirms") and not model_switch(SPEC, "tinysync", "SyncConfirms")
    assert read_constants((SPEC / "MC_tinyconfirm.cfg").read_text()) == read_constants(
        (SPEC / "MC_tinysync.cfg").read_text())
    assert model_checks((SPEC / "MC_tinyconfirm.cfg").read_text()) == model_checks(
        (SPEC / "MC_tinysync.cfg").read_text())


@pytest.mark.long
def test_tinyconfirm_passes_every_check(tla, tmp_path):
    """SyncConfirms on (zabref's leader answers a sync once a quorum confirmed it still leads): the checks of
    tinysync hold, and every step of the PING round is taken (305,382 states, in the long command)."""
    model = prepare(SPEC, "tinyconfirm", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, coverage=True, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states == 305_382
    taken = coverage_by_action(result)
    for action in (*SYNC_ACTIONS, "LeaderSendPING", "FollowerProcessPING", "LeaderProcessPING"):
        assert taken.get(action, (0, 0))[1] > 0, (action, taken)


def test_ciconfirm_is_tinyconfirm_without_faults_and_with_the_sync_answered_at_once():
    """Conformance's sync model: tinyconfirm's switch and checks, no faults, and the model rule SyncAnsweredAtOnce."""
    cfg = (SPEC / "MC_ciconfirm.cfg").read_text()
    assert model_switch(SPEC, "ciconfirm", "SyncConfirms")
    assert read_constants(cfg) == {**read_constants((SPEC / "MC_tinyconfirm.cfg").read_text()), "MaxFaults": 0}
    assert model_checks(cfg) == model_checks((SPEC / "MC_tinyconfirm.cfg").read_text())
    assert re.search(r"^ACTION_CONSTRAINT SyncAnsweredAtOnce$", cfg, re.M)


def test_ciconfirm_passes_every_check_and_answers_syncs_at_once(tla, tmp_path):
    """Its 18,843 states hold every check of tinyconfirm, and its traces can drive every step of a sync but
    LeaderSendPING (which needs a learner to connect again while a sync waits: a fault)."""
    model = prepare(SPEC, "ciconfirm", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, coverage=True, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states == 18_843
    taken = coverage_by_action(result)
    for action in (*SYNC_ACTIONS, "FollowerProcessPING", "LeaderProcessPING"):
        assert taken.get(action, (0, 0))[1] > 0, (action, taken)


def _sync_scenario(state: dict[str, str]) -> tuple[list[str], list[int]]:
    """(state, leader) of every server in a counterexample state's variables, parsed from TLC's text."""
    states = re.findall(r'"(\w+)"', state["state"])
    leaders = [int(x) for x in re.findall(r"\d+", state["leader"])]
    return states, leaders


@pytest.mark.long
def test_zookeepers_sync_with_five_servers_misses_a_commit_of_a_new_leader(tla, tmp_path):
    """fivesync (ZooKeeper's sync: no leadership check) fails SyncSeesCommitted: a leader left with one follower
    answers its sync after three other servers elected a new leader that committed (spec/README.md, "Reads": a
    deposed leader)."""
    model = prepare(SPEC, "fivesync", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.INVARIANT_VIOLATED and result.violated == "SyncSeesCommitted", result.message
    states, leaders = _sync_scenario(dict(result.trace[-1].variables))
    assert states.count("LEADING") == 2  # the deposed leader still leads, beside the new one
    deposed = next(s for s in range(1, 6) if states[s - 1] == "LEADING" and leaders.count(s) == 2)  # itself + one
    assert sum(1 for s in range(1, 6) if states[s - 1] == "FOLLOWING" and leaders[s - 1] == deposed) == 1


@pytest.mark.long
def test_zabrefs_confirmed_sync_with_five_servers_passes_the_same_search(tla, tmp_path):
    """fiveconfirm: fivesync's search with SyncConfirms (zabref's leader), its roles pinned to fivesync's
    counterexample, passes: the deposed leader never gathers a quorum of confirmations, so its follower's sync is
    never answered (the mutation SyncAnsweredUnconfirmed, ZooKeeper's unconfirmed answer, fails it in 44 states)."""
    model = prepare(SPEC, "fiveconfirm", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states == 155_998


@pytest.mark.long
def test_a_learner_of_a_later_epoch_back_at_a_deposed_leader_confirms_nothing(tla, tmp_path):
    """fivestale: a learner that helped a later epoch commit comes back to follow the deposed leader, which PINGs
    only learners whose sync it sent: that learner never confirms, and SyncSeesCommitted holds (spec/README.md,
    "Reads"; the mutation PingBeforeSyncCounts, which PINGs it and counts its answer, fails here in 50 states)."""
    model = prepare(SPEC, "fivestale", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message


@pytest.mark.long
def test_cisync_passes_every_check(tla, tmp_path):
    """cisync (spec/README.md's models table: 2,124,514 states, 6-15 minutes on two cores) holds every check of ci
    and the reads'."""
    model = prepare(SPEC, "cisync", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states == 2_124_514


@pytest.mark.deep
@pytest.mark.slow
def test_safety_does_not_depend_on_the_election(tla, tmp_path):
    """MC_free: the tiny bounds with every election decision free (TLC's definition override of ElectionFault), the
    same checks as tiny, and all of them hold -- on a strict superset of tiny's states (spec/README.md, "The
    election")."""
    cfg = (SPEC / "MC_free.cfg").read_text()
    assert re.search(r"^\s*ElectionFault <- FreeElectionFault$", cfg, re.M)
    assert model_checks(cfg) == model_checks((SPEC / "MC_tiny.cfg").read_text())
    assert read_constants(cfg) == read_constants((SPEC / "MC_tiny.cfg").read_text())
    model = prepare(SPEC, "free", tmp_path)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states > 4 * TINY_DISTINCT_STATES


@pytest.mark.deep
@pytest.mark.slow
def test_with_two_faults_one_learner_cannot_establish_two_leaders_of_one_epoch(tla, tmp_path):
    """tiny2 (tiny with two faults) passes every check: the least model in which a learner that accepted an epoch
    from one leader answers a second leader of that epoch with ACKEPOCH(-1). Before ZooKeeper's rule (-1 does not
    count; spec/README.md, "Where the spec and ZooKeeper 3.8 differ", 1) TLC stopped here at LeaderUniqueness; the
    mutation MinusOneAckCounts brings that counterexample back (tests/test_mutations.py)."""
    model = prepare(SPEC, "tiny2", tmp_path, labels=False)
    result = run_tlc(model.module, model.cfg, workers=2, extra_args=model.tlc_options, tools=tla)
    assert result.outcome is Outcome.OK, result.message
    assert result.distinct_states > 2 * TINY_DISTINCT_STATES
