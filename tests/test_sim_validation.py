"""`zabref simulate --validate`: a simulated run's action logs -- written by the runtime's own ActionLog, as
``zabref serve --action-log`` writes them -- are a behaviour of spec/Zab.tla, checked by TLC at the end of the run
(docs/simulation.md). The seeded bugs this check catches are in tests/test_sim_bugs.py (EXTRA: --validate).
"""

from __future__ import annotations

import pytest
from test_sim import CI_LATE_VALIDATED_SEEDS, CI_LATE_VALIDATED_STEPS, CI_STEPS, CI_VALIDATED_SEEDS

from conformance.sim import Options
from conformance.sim.cluster import simulate
from conformance.sim.fle_invariants import ElectionInvariants
from conformance.sim.invariants import SpecInvariants
from conformance.sim.seeds import run_seed, run_seeds
from conformance.sim.validation import ActionValidation


def test_a_validated_run_is_the_same_run_and_its_logs_are_checked_by_tlc() -> None:
    """Logging draws nothing from the seed's random source and takes no virtual time: the same seed, the same run."""
    plain = run_seed(3, Options(steps=100))
    validation = ActionValidation()
    checked = simulate(3, Options(steps=100, validate=True), [SpecInvariants(), ElectionInvariants(), validation])
    assert checked.ok, checked.failure
    assert checked.digest == plain.digest
    result = validation.result
    assert result.passed and result.steps == result.matched > 50, result.line()
    assert "--validate" in checked.replay


@pytest.mark.deep
def test_ci_seeds_validated_all_pass() -> None:
    rows = run_seeds(range(CI_VALIDATED_SEEDS), Options(steps=CI_STEPS, validate=True), workers=2)
    failed = [(r["seed"], r["failure"], r["replay"]) for r in rows if not r["ok"]]
    assert not failed, failed[:3]


#: Five-server seeds the test suite validates against spec/Zab.tla (N = 5 in the validation model).
CI_VALIDATED_FIVE_SEEDS = 8


def test_five_server_seeds_validated_all_pass() -> None:
    rows = run_seeds(range(CI_VALIDATED_FIVE_SEEDS), Options(servers=5, steps=CI_STEPS, validate=True), workers=2)
    failed = [(r["seed"], r["failure"], r["replay"]) for r in rows if not r["ok"]]
    assert not failed, failed[:3]
    assert all("--servers 5 " in r["replay"] and "--validate" in r["replay"] for r in rows)


def test_late_leader_seeds_validated_all_pass() -> None:
    """Runs of servers with [cluster] leader_logs_late, validated with the spec's LeaderLogsLate (the action logs'
    restart lines say so): the leaders' own ACKs are steps of their own, and a leader's power cut may take off its
    disk what it proposed but had not logged (the merge keeps those steps: conformance/validate/merge.py)."""
    options = Options(steps=CI_LATE_VALIDATED_STEPS, validate=True, leader_logs_late=True)
    rows = run_seeds(range(CI_LATE_VALIDATED_SEEDS), options, workers=2)
    failed = [(r["seed"], r["failure"], r["replay"]) for r in rows if not r["ok"]]
    assert not failed, failed[:3]
