"""`zabref validate` as a chain of windows (docs/validation.md, "Windows"): the same verdicts as the whole check from
Init, a departure reported at the same file:line wherever the window boundaries fall, histories rebased exactly, and
the windows checked side by side (a process pool, Spark).

Logs come from the simulator (seeded, in one process: a few hundred milliseconds a log) and from the committed
fixture of tests/test_validate.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import conformance.validate.chain as chain
from conformance.sim import Options, simulate
from conformance.validate.actionlogs import read_logs
from conformance.validate.command import validate
from conformance.validate.merge import merge
from zabref.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "actionlogs" / "dial-across-restart"


class _Keep:
    """A simulator observer that writes the run's action logs to a folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def step(self, sim, sid, eff):
        return None

    def crashed(self, sim, sid):
        return None

    def finished(self, sim):
        self.folder.mkdir(parents=True, exist_ok=True)
        sim.action_logs.write(self.folder)
        return None


def sim_logs(folder: Path, seed: int, steps: int) -> Path:
    result = simulate(seed, Options(steps=steps, validate=True), [_Keep(folder)])
    assert result.ok, result.failure
    return folder


def _steps(folder: Path):
    return merge(read_logs(folder)).steps


def _corrupt(src: Path, dst: Path, k: int) -> str:
    """A copy of the logs with merged step k's line changed (its logged lastCommitted off by 7): returns FILE:LINE."""
    shutil.copytree(src, dst)
    step = _steps(src)[k]
    path, line = step.where.rsplit(":", 1)
    target = dst / Path(path).name
    lines = target.read_text().split("\n")
    obj = json.loads(lines[int(line) - 1])
    obj["vars"]["last_committed"] += 7
    lines[int(line) - 1] = json.dumps(obj)
    target.write_text("\n".join(lines))
    return f"{target}:{line}"


@pytest.fixture(scope="module")
def long_log(tmp_path_factory) -> Path:
    """A 3,000-step simulated run (swarm faults): its histories outgrow a window, so windows are rebased."""
    return sim_logs(tmp_path_factory.mktemp("sim") / "seed3", 3, 3000)


# ------------------------------------------------------------------------------ the same verdicts


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", [8])
def test_windows_give_the_whole_checks_verdict(tmp_path: Path, seed: int) -> None:
    logs = sim_logs(tmp_path / "logs", seed, 1500)
    whole = validate(logs, window=0)
    assert whole.passed and whole.matched == whole.steps > 1000
    for window, batch in ((100, 4), (333, 1)):
        chained = validate(logs, window=window, batch=batch, workers=2)
        assert chained.passed, chained.failure
        assert (chained.steps, chained.matched) == (whole.steps, whole.matched)
        assert chained.windows == -(-whole.steps // window)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_whole_check_is_one_chain_of_states(long_log: Path) -> None:
    """Every action of Zab.tla with its parameters is a function of the state, so from Init the records admit one
    state per step: TLC finds exactly steps + 1 distinct states. So the state at every boundary is determined by the
    logs, and one state per boundary is all a chain of windows needs to carry."""
    whole = validate(long_log, window=0)
    assert whole.passed
    assert whole.states == whole.steps + 1


# ------------------------------------------------------------------------------ a departure, wherever it falls


@pytest.mark.deep
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_departure_is_reported_at_its_line_at_a_windows_first_and_last_step(tmp_path: Path, long_log: Path) -> None:
    steps = _steps(long_log)
    k = next(i for i in range(300, len(steps)) if steps[i].action == "FollowerProcessCOMMIT")
    bad = tmp_path / "bad"
    where = _corrupt(long_log, bad, k)
    whole = validate(bad, window=0)
    assert not whole.passed and whole.matched == k
    assert f"step {k + 1} of" in whole.failure and f"line: {where}" in whole.failure
    for window in (k, k + 1, 100 if k % 100 else 99, (k + 1) // 2):  # first of a window; its last; inside; across
        chained = validate(bad, window=window, batch=3)
        assert not chained.passed and not chained.inconclusive
        assert chained.matched == k, (window, chained.failure)
        assert f"step {k + 1} of" in chained.failure and f"line: {where}" in chained.failure, chained.failure
    # the window holding it was rebased: the departure is caught in the abstracted state too
    drops = {}
    cutter = chain.Cutter(3, chain.Plan(100), lambda w: drops.setdefault(w.first, w.meta["drop"]))
    merge(read_logs(bad), sink=cutter)
    assert drops[k - k % 100] > 0


@pytest.mark.deep
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_state_the_logs_do_not_pin_at_a_boundary_joins_the_two_windows(tmp_path: Path, long_log: Path) -> None:
    """A timeout's line that also claims to send a packet: the spec's GoLooking sends nothing and the record does not
    compare what a GoLooking step sent, so the whole check accepts it -- but the merge's view now holds a packet the
    spec's state does not. At the next boundary the window's EndOK fails; the chain checks the two windows as one,
    and gives the whole check's verdict."""
    logs = long_log
    steps = _steps(logs)
    k = next(i for i in range(300, len(steps)) if steps[i].action == "FollowerTimeout" and not steps[i].unlogged)
    bad = tmp_path / "bad"
    shutil.copytree(logs, bad)
    path, line = steps[k].where.rsplit(":", 1)
    target = bad / Path(path).name
    lines = target.read_text().split("\n")
    obj = json.loads(lines[int(line) - 1])
    peer = next(p for p in (1, 2, 3) if p != obj["sid"])
    obj["sends"] = [[peer, {"type": "DIFF", "zxid": 0, "data": None, "conn": None}]]
    lines[int(line) - 1] = json.dumps(obj)
    target.write_text("\n".join(lines))
    whole = validate(bad, window=0)
    chained = validate(bad, window=k + 1 if (k + 1) < len(steps) else k, batch=1)
    assert chained.passed == whole.passed
    assert chained.matched == whole.matched
    assert chained.rechecked >= 1 and chained.passes >= 2


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_window_whose_rebasing_is_not_exact_is_checked_again_without_it(long_log: Path, monkeypatch) -> None:
    """Exact, the rebasing's conditions, is checked by TLC on every state. A wrong anchor (as if the rebasing had
    dropped one transaction too many) fails it in the window's first state, and the window is checked again with
    its histories whole: the verdict stands."""
    real = chain.coordinates
    seen = []

    def wrong(snap, bounds, inc, *, rebase=True):
        co = real(snap, bounds, inc, rebase=rebase)
        if not co.anchors or seen:
            return co
        k, anchor = next(iter(co.anchors.items()))
        seen.append(k)
        return chain.Coords(co.drops, {**co.anchors, k: {"value": -12345, "zxid": anchor["zxid"]}}, co.epoch,
                            co.shift, co.values)

    monkeypatch.setattr(chain, "coordinates", wrong)
    result = validate(long_log, window=500, batch=1)
    assert seen and result.passed, result.failure
    assert result.rechecked == 1


@pytest.mark.deep
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_packet_sent_in_a_window_is_held_to_the_rebasing_at_its_step(long_log: Path, monkeypatch) -> None:
    """After the start state, Exact is checked where it can change (RebasedStep): each packet when it is sent. A
    seeded condition that no PROPOSAL sent in a rebased window meets fails at such a step, not at the start (the
    start's check is left as it is), and the window is checked again with its histories whole: the verdict stands.
    Without the seed no window is checked again."""
    import conformance.validate.command as command

    clean = validate(long_log, window=500, batch=1)
    assert clean.passed and clean.rechecked == 0, clean.line()
    real = command.chain_helpers
    seeded = 'e[19][z][k].type /= "PROPOSAL"'

    def helpers(actions):
        text = real(actions)
        assert "PacketRebased(a[z][1], e[19][z][k])" in text
        return text.replace("PacketRebased(a[z][1], e[19][z][k])", seeded)

    monkeypatch.setattr(command, "chain_helpers", helpers)
    result = validate(long_log, window=500, batch=1)
    assert result.passed, result.failure
    assert result.rechecked >= 1, result.line()


# ------------------------------------------------------------------------------ side by side


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_windows_on_a_local_spark_master(long_log: Path) -> None:
    result = validate(long_log, window=500, batch=2, master="local[2]")
    assert result.passed and result.tlc_runs == 3, result.line()


def test_the_command_takes_a_window_and_workers(tmp_path: Path) -> None:
    out = CliRunner().invoke(main, ["validate", str(FIXTURE), "--window", "10", "--batch", "2", "--workers", "2"])
    assert out.exit_code == 0, out.output
    assert "windows=7 tlc_runs=4" in out.output and "result=ok" in out.output


# ------------------------------------------------------------------------------ fingerprints by place (VIEW)

_TOY = """---- MODULE Toy ----
EXTENDS Naturals
VARIABLE v
====
"""
#: "two": two different successors; "dup": the same successor twice (as Zab.tla's Crash gives, through its
#: disjunctive guard); "one": one successor; "at": v must be e[2].
_TOY_STEP = ('IF e[1] = "two" THEN (v\' = v + 1 \\/ v\' = v + 2) '
             'ELSE IF e[1] = "dup" THEN (v\' = v + 1 \\/ v\' = v + 1) ELSE IF e[1] = "one" THEN v\' = v + 1 '
             'ELSE (e[1] = "at" /\\ v = e[2] /\\ v\' = v)')


@pytest.mark.parametrize("records, kind, record, again", [
    (['<<"one", 0>>', '<<"at", 2>>'], "ok", None, False),  # one chain: the run by place stands
    (['<<"dup", 0>>', '<<"at", 2>>'], "ok", None, False),  # the same successor twice: one place, the pass stands
    (['<<"two", 0>>', '<<"at", 2>>'], "departure", 1, True),  # one successor cannot take "at": a departure
])
def test_a_step_with_two_successors_is_checked_again_with_whole_states(tmp_path: Path, records, kind, record,
                                                                      again) -> None:
    """The VIEW fingerprints a window's states by place (here: the window, the position and v); a step with two
    successors that differ in their place makes more places than one chain a window, and the batch is checked again
    with whole states, whose verdict stands: so a step with two different successors, one of which cannot take the
    next record, is the departure the whole check finds, whichever successor TLC kept. The same successor twice
    (Zab.tla's Crash does that) is one place, and the pass by place stands."""
    from conformance.validate.windows import Window, batch_module, check_batch, write_batch

    toy = tmp_path / "Toy.tla"
    toy.write_text(_TOY)
    win = Window(0, 0, records, {"v": "1"}, None)
    module = batch_module("VToy", "Toy", ["v"], "", _TOY_STEP, [win], place="v")
    folder = write_batch(tmp_path / "b", "VToy", module, "", [toy], [win])
    out = check_batch(str(folder), "VToy")
    assert (out.kind, out.record) == (kind, record), out
    assert bool(out.rechecked) is again, out.rechecked
