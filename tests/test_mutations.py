"""Each check can fail: every mutation in spec/mutations is caught by TLC, by exactly the invariant or property it
names; the matrix peels every check a mutation violates."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.errors import SpecFormatError
from conformance.tla.mutations import (
    apply_mutation,
    caught,
    load_mutations,
    matrix_row,
    matrix_table,
    model_checks,
    run_mutation,
    with_checks,
)

SPEC = Path(__file__).resolve().parent.parent / "spec"
MUTATIONS = load_mutations(SPEC / "mutations")
CHECKS = model_checks((SPEC / "MC_ci.cfg").read_text())


def test_every_check_has_a_mutation_and_every_model_checks_them_all():
    invariants, properties = CHECKS
    assert len(invariants) >= 18 and properties == ["DeliveredGrows"]
    for config in ("tiny", "tiny2", "two", "ci", "cizk", "cizk39", "cizklog", "ci3", "ci4", "deep", "five"):
        assert model_checks((SPEC / f"MC_{config}.cfg").read_text()) == CHECKS, config
    live = model_checks((SPEC / "MC_live.cfg").read_text())
    assert live == model_checks((SPEC / "MC_live2.cfg").read_text()) == ([], ["EventuallyStableLeader",
                                                                             "StableWritesDelivered"])
    # the sync models (ZabSync.tla): NoHiddenDeadlock over SyncNext, and the reads' three checks
    sync = model_checks((SPEC / "MC_tinysync.cfg").read_text())
    assert sync == model_checks((SPEC / "MC_cisync.cfg").read_text())
    assert set(sync[0]) - set(invariants) == {"SyncNoHiddenDeadlock", "SyncTypeOK", "SyncSeesCommitted",
                                              "SyncFlushesChannel"}
    # every check of every model has a mutation, and each mutation names a check of its own model
    assert {m.invariant for m in MUTATIONS} == set(invariants + properties + live[1] + sync[0])
    for m in MUTATIONS:
        assert m.invariant in sum(model_checks((SPEC / f"MC_{m.config}.cfg").read_text()), []), m.name


#: Models whose runs belong to the longer command (scripts/test-long.sh): live2's mutations take a minute each;
#: fivestale's one (five servers) several, fiveconfirm's one about a minute.
LONG_MODELS = ("live2", "fivestale", "fiveconfirm")
#: Mutations the longer command runs because another mutation of the same check runs in CI, and
#: these cost much more (seconds inside the suite of 2026-11-28, on a machine running TLC at 60 % of its speed):
#: LogMatching's (ci, 122 s) beside TruncAtOnceKeepsNext's (cizk, 37 s), which also violates LogMatching;
#: NewLeaderDefersLogged's and NewLeaderDefersOlder's (cizk39, 73 s and 41 s) beside CommittedNeverLost's (tiny,
#: 4 s) and TruncAtOnceTooFar's (cizk, 23 s); MinusOneAckCounts' (tiny2, 40 s) beside LeaderUniqueness' (ci, 7 s);
#: LiveLateAckepoch's (live, 50 s) beside the three Unfair* of live (6 s each), and the matrix's test below still
#: runs LiveLateAckepoch in CI.
LONG_NAMES = ("LogMatching", "NewLeaderDefersLogged", "NewLeaderDefersOlder", "MinusOneAckCounts", "LiveLateAckepoch")
#: Mutations CI runs (`bash scripts/test.sh --deep`) and the test command leaves out: each is the only one of its
#: check, or costs much more than the others, and together they were 570 s of the suite of 2026-11-29 (a fresh clone,
#: 39 minutes): SkippedNeverDelivered's 202 s, StableWritesDelivered's 106, GlobalPrimaryOrder's 54,
#: TruncAtOnceKeepsNext's 49, SyncNoHiddenDeadlock's 46, PrimaryIntegrity's 42, TruncAtOnceTooFar's 40,
#: LeaderHoldsCommitted's 31.
DEEP_NAMES = ("SkippedNeverDelivered", "StableWritesDelivered", "GlobalPrimaryOrder", "TruncAtOnceKeepsNext",
              "SyncNoHiddenDeadlock", "PrimaryIntegrity", "TruncAtOnceTooFar", "LeaderHoldsCommitted")


def _long(m) -> bool:
    return m.config in LONG_MODELS or m.name in LONG_NAMES


def _mark(m):
    if _long(m):
        return pytest.param(m, marks=pytest.mark.long)
    return pytest.param(m, marks=pytest.mark.deep) if m.name in DEEP_NAMES else m


def test_every_check_of_the_fast_models_is_caught_in_ci():
    """Moving a mutation to the longer command leaves its check caught by another one CI runs (the test command's
    and the deep ones); the deep ones are named, and every name of both lists is a mutation's."""
    ci = {m.invariant for m in MUTATIONS if not _long(m)}
    slow_only = {m.invariant for m in MUTATIONS if m.config not in LONG_MODELS} - ci
    assert slow_only == set(), slow_only
    assert all(any(m.name == name for m in MUTATIONS) for name in LONG_NAMES + DEEP_NAMES)
    assert not set(LONG_NAMES) & set(DEEP_NAMES)


@pytest.mark.parametrize("mutation", [_mark(m) for m in MUTATIONS], ids=[m.name for m in MUTATIONS])
def test_mutation_is_caught_by_its_invariant(mutation, tla):
    result = run_mutation(mutation, SPEC, tools=tla)
    assert caught(mutation, result), f"{mutation.name}: {result.outcome.value} {result.violated} {result.message[:300]}"
    assert len(result.trace) >= 2


def test_with_checks_rewrites_both_sections():
    cfg = ("CONSTANTS\n    N = 3\nINIT Init\nNEXT Next\nINVARIANTS\n    TypeOK\n    Agreement\nPROPERTIES\n    Grows\n"
           "\\* TLC-OPTIONS: -deadlock\n")
    assert model_checks(cfg) == (["TypeOK", "Agreement"], ["Grows"])
    out = with_checks(cfg, ["Agreement"], [])
    assert model_checks(out) == (["Agreement"], [])
    assert "N = 3" in out and "TLC-OPTIONS: -deadlock" in out and "Grows" not in out
    assert model_checks(with_checks(cfg, [], ["Grows"])) == ([], ["Grows"])
    assert model_checks("INVARIANT A B\nPROPERTY P\n") == (["A", "B"], ["P"])
    # an indented comment inside a section does not end it (as the site's own reader of cfgs used to skip it)
    assert model_checks("INVARIANTS\n    A\n    \\* why B\n    B\n\\* TLC-OPTIONS: -deadlock\n") == (["A", "B"], [])


@pytest.mark.slow
@pytest.mark.long
def test_the_matrix_peels_every_check_a_mutation_violates(tla):
    """ProposalInFlight's mutation (a PROPOSAL carrying a wrong value) also makes a follower deliver a value nobody
    broadcast: the matrix must find both, and the checks it does not violate hold on the whole mutated model."""
    mutation = next(m for m in MUTATIONS if m.name == "ProposalInFlight")
    row = matrix_row(mutation, SPEC, tools=tla)
    assert {"ProposalInFlight", "Integrity"} <= set(row.caught)
    assert row.runs == len(row.caught) + 1
    assert set(row.caught) | set(row.holds) == set(CHECKS[0] + CHECKS[1])
    assert "LeaderUniqueness" in row.holds and row.caught["ProposalInFlight"] == 10
    table = matrix_table([row])
    assert "| ProposalInFlight (tiny) |" in table and "**10**" in table


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_every_mutation_still_applies_to_the_spec(mutation, tmp_path):
    """Each mutation's text occurs exactly once in today's spec: a change of the spec that a mutation no longer
    finds fails here, in the test command, not only where the mutation is model-checked (the deep and long tiers)."""
    import shutil

    shutil.copytree(SPEC, tmp_path / "spec", ignore=shutil.ignore_patterns("mutations", "*.out"))
    apply_mutation(mutation, tmp_path / "spec")


def test_a_mutation_that_no_longer_applies_is_an_error(tmp_path):
    (tmp_path / "Zab.tla").write_text("nothing to find here\n")
    with pytest.raises(SpecFormatError, match="occurs 0 times"):
        apply_mutation(MUTATIONS[0], tmp_path)


def test_a_mutation_of_a_model_that_does_not_exist_is_an_error_naming_its_file():
    from dataclasses import replace

    ghost = replace(MUTATIONS[0], config="nope")
    for run in (run_mutation, matrix_row):
        with pytest.raises(SpecFormatError, match=rf"{ghost.path.name}: no model MC_nope"):
            run(ghost, SPEC)


@pytest.mark.deep
@pytest.mark.slow
def test_the_matrix_tells_apart_temporal_properties_tlc_does_not_name(tla):
    """TLC says only "Temporal properties were violated.": a late learner's lost ACKEPOCH stalls the cluster
    (EventuallyStableLeader) but loses no write a stable leader holds, and the peel finds which by running each
    property alone."""
    mutation = next(m for m in MUTATIONS if m.name == "LiveLateAckepoch")
    row = matrix_row(mutation, SPEC, tools=tla)
    # (a liveness counterexample's length varies from run to run: TLC picks its fingerprint seed at random)
    assert set(row.caught) == {"EventuallyStableLeader"} and row.holds == ["StableWritesDelivered"]
    assert row.runs == 3  # both (unnamed), EventuallyStableLeader alone, then StableWritesDelivered alone: clean
