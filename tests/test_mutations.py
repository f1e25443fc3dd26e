"""Each invariant can fail: every mutation in spec/mutations is caught by TLC, by exactly the invariant it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.errors import SpecFormatError
from conformance.mutations import apply_mutation, caught, load_mutations, only_invariant, run_mutation

SPEC = Path(__file__).resolve().parent.parent / "spec"
MUTATIONS = load_mutations(SPEC / "mutations")
INVARIANTS = ["TypeOK", "Integrity", "Agreement", "TotalOrder", "LocalPrimaryOrder", "GlobalPrimaryOrder",
              "PrimaryIntegrity", "LeaderUniqueness", "CommittedNeverLost", "SkippedNeverDelivered"]


def test_every_invariant_has_a_mutation_and_every_model_checks_them_all():
    assert sorted(m.invariant for m in MUTATIONS) == sorted(INVARIANTS)
    for config in ("tiny", "ci"):
        cfg = (SPEC / f"MC_{config}.cfg").read_text()
        for invariant in INVARIANTS:
            assert f"    {invariant}\n" in cfg, (config, invariant)


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_mutation_is_caught_by_its_invariant(mutation, tla):
    result = run_mutation(mutation, SPEC, tools=tla)
    assert caught(mutation, result), f"{mutation.name}: {result.outcome.value} {result.violated} {result.message[:300]}"
    assert len(result.trace) >= 2


def test_only_invariant_rewrites_the_section():
    cfg = "CONSTANTS\n    N = 3\nINIT Init\nNEXT Next\nINVARIANTS\n    TypeOK\n    Agreement\n\\* TLC-OPTIONS: -deadlock\n"
    out = only_invariant(cfg, "Agreement")
    assert "TypeOK" not in out and out.rstrip().endswith("INVARIANT Agreement")
    assert "N = 3" in out and "TLC-OPTIONS: -deadlock" in out


def test_a_mutation_that_no_longer_applies_is_an_error(tmp_path):
    (tmp_path / "Zab.tla").write_text("nothing to find here\n")
    with pytest.raises(SpecFormatError, match="occurs 0 times"):
        apply_mutation(MUTATIONS[0], tmp_path)
