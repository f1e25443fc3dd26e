"""The deterministic simulator (zabref/sim, docs/simulation.md): the real servers in one process, a run a function
of its seed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zabref.sim import FAULTS, Options, simulate


def test_three_servers_elect_and_commit_client_writes_in_one_process() -> None:
    r = simulate(1, Options(steps=300, faults=()))
    assert r.ok, r.failure
    assert r.steps >= 300 and r.acked > 10
    assert any("Zab.BecomeLeader" in e for e in r.events)
    assert any("live: leader" in e for e in r.events)


def test_same_seed_same_run_byte_for_byte_even_in_another_process() -> None:
    options = Options(steps=400, faults=FAULTS)
    a, b = simulate(5, options), simulate(5, options)
    assert a.events == b.events and a.digest == b.digest
    assert sum(a.injected.values()) > 0
    code = ("from zabref.sim import simulate, Options, FAULTS;"
            "print(simulate(5, Options(steps=400, faults=FAULTS)).digest)")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": ""}).stdout.strip()
    assert other == a.digest


def test_another_seed_is_another_run() -> None:
    assert simulate(1, Options(steps=200, faults=())).digest != simulate(2, Options(steps=200, faults=())).digest


def test_the_replay_command_names_seed_and_options() -> None:
    assert Options(servers=5, steps=50, faults=("crash",)).command(9) == \
        "zabref simulate --seed 9 --servers 5 --steps 50 --faults crash"


@pytest.mark.parametrize("bad", [dict(servers=4), dict(steps=0), dict(faults=("meteor",))])
def test_bad_options_are_refused_with_a_reason(bad: dict) -> None:
    with pytest.raises(ValueError, match="servers|steps|meteor"):
        Options(**bad)
