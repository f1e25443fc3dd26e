"""The action log's staged history (zabref/runtime/actionlog.py, docs/validation.md): a DIFF or TRUNC line gives it
as "the first k transactions of this server's history" in O(1) when it is one, and whole when it is not, so that the
validator sees the real value either way; the reader (conformance/validate/specview.py) rebuilds it from the history.

Logs come from the simulator (seed 184, 100 steps: a few hundred milliseconds), whose servers write them with the
runtime's own ActionLog; `zabref validate` checks them with TLC (about a second).
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_validate_windows import sim_logs

from conformance.errors import MergeError
from conformance.sim import Options, simulate
from conformance.validate.actionlogs import read_logs
from conformance.validate.command import validate
from conformance.validate.merge import merge
from conformance.validate.specview import INIT_VARS, SpecView, Snapshot
from zabref.core.effects import Action, Effects
from zabref.core.packets import PacketType, ServerState
from zabref.core.zab import HANDLERS, Persistent, Txn, ZabCore
from zabref.runtime.actionlog import ActionLog

#: A seed whose 100 steps hold DIFFs of a non-empty history and a TRUNC that drops transactions (the first of seeds
#: 0.. since a LOOKING server's resend waits for its election senders, 2026-12-03; 43 was before, since the quorum
#: port speaks ZooKeeper's wire; 175 before that, and 29 before the election port did).
SEED, STEPS = 184, 100
SYNC_STARTS = ("FollowerProcessDIFF", "FollowerProcessTRUNC")


def _lines(folder: Path) -> dict[str, dict]:
    """Every line of the logs as FILE:LINE -> its object."""
    out = {}
    for path in sorted(folder.glob("actions-*.jsonl")):
        for k, raw in enumerate(path.read_text().splitlines(), 1):
            out[f"{path}:{k}"] = json.loads(raw)
    return out


@pytest.mark.slow  # TLC
def test_a_diff_or_trunc_line_names_a_prefix_of_the_history_in_constant_size(tmp_path: Path) -> None:
    folder = sim_logs(tmp_path / "logs", SEED, STEPS)
    lines = _lines(folder)
    syncs = [s for s in merge(read_logs(folder)).steps if s.action in SYNC_STARTS]
    kinds = {(s.action, len(s.expected["stagedHistory"]) < s.expected["hl"]) for s in syncs
             if len(s.expected["stagedHistory"])}
    # a DIFF that stages the whole (non-empty) history, a TRUNC that stages part of it
    assert kinds >= {("FollowerProcessDIFF", False), ("FollowerProcessTRUNC", True)}, kinds
    for s in syncs:
        v = lines[s.where]["vars"]
        assert "staged_history" not in v, s.where
        staged = s.expected["stagedHistory"]
        assert v["staged"]["prefix"] is True and v["staged"]["len"] == len(staged) <= s.expected["hl"], s.where
        # the reader rebuilt it from the server's history: the first len transactions, ending with the logged last
        assert staged.canonical() == s.expected["history"].canonical()[: len(staged)]
        assert (staged.items[-1] if len(staged) else None) == (tuple(v["staged"]["last"]) if len(staged) else None)
    result = validate(folder)
    assert result.passed and result.steps == result.matched, result.failure


def _stage_wrong(monkeypatch, change) -> None:
    """A seeded bug: FollowerProcessDIFF stages ``change(history)`` in place of the history."""
    original = HANDLERS[ServerState.FOLLOWING][PacketType.DIFF]

    @functools.wraps(original)  # its name is the action's (zabref.core.node: SPEC_ACTIONS[handler.__name__])
    def diff(core, j, packet):
        out = original(core, j, packet)
        if core.staged_history:
            core.staged_history = change(core.staged_history)
        return out

    monkeypatch.setitem(HANDLERS[ServerState.FOLLOWING], PacketType.DIFF, diff)


@pytest.mark.slow  # TLC
@pytest.mark.parametrize("change, form", [
    # not a prefix of the history (its first transaction's zxid one higher): the line logs it whole
    (lambda h: [Txn(h[0].zxid + 1, h[0].value), *h[1:]], "staged_history"),
    # a prefix, one transaction short: the line gives its length, and the reader's value is the short one
    (lambda h: h[:-1], "staged"),
], ids=["first-changed", "last-dropped"])
def test_a_diff_that_stages_something_else_than_the_history_fails_validation_at_its_line(
        tmp_path: Path, monkeypatch, change, form: str) -> None:
    clean = sim_logs(tmp_path / "clean", SEED, STEPS)
    # the first DIFF of a non-empty history: the run is the same up to it, with or without the bug
    first = next(s for s in merge(read_logs(clean)).steps
                 if s.action == "FollowerProcessDIFF" and len(s.expected["stagedHistory"]))
    where = first.where.replace(str(clean), "")
    _stage_wrong(monkeypatch, change)
    folder = tmp_path / "bug"
    kept = _Kept()
    simulate(SEED, Options(steps=STEPS, validate=True), [kept])  # (the bug may stop a server later: no verdict)
    folder.mkdir()
    kept.sim.action_logs.write(folder)
    line = _lines(folder)[f"{folder}{where}"]
    assert line["action"] == "FollowerProcessDIFF" and form in line["vars"], line
    result = validate(folder)
    assert not result.passed and not result.inconclusive, result.failure
    assert "takes FollowerProcessDIFF(" in result.failure and f"line: {folder}{where}" in result.failure, \
        result.failure


# ------------------------------------------------------------------------------------------ the writer alone


def _diff_line(change_in_memory) -> dict:
    """The line of a DIFF at a server that started with three transactions; ``change_in_memory`` alters its history
    in memory, with no storage operation (a bug the log cannot show but through the staged history)."""
    txns = tuple(Txn((1 << 32) | c, v) for c, v in ((1, b"a"), (2, b"b"), (3, b"c")))
    core = ZabCore(1, (1, 2, 3), Persistent(txns, 1, 1))
    node = SimpleNamespace(core=core)
    out = io.BytesIO()
    log = ActionLog(out, 1, clock=lambda: 0)
    log.restart(1, node)
    change_in_memory(core.history)
    core.staged_history = list(core.history)  # what FollowerProcessDIFF stages
    log.step(node, Effects(actions=(Action("Zab", "FollowerProcessDIFF", (("i", 1), ("j", 2))),)), lambda peer: None)
    return json.loads(out.getvalue().splitlines()[-1])["vars"]


def test_a_diff_is_compared_with_the_history_the_log_described_not_the_one_in_memory() -> None:
    assert _diff_line(lambda h: None)["staged"] == {"len": 3, "last": [(1 << 32) | 3, "c"], "prefix": True}

    def replace_middle(h):
        h[1] = Txn(h[1].zxid, b"X")

    # the reader's history still says b: only the whole staged history tells it what the server staged
    assert _diff_line(replace_middle)["staged_history"] == [[(1 << 32) | 1, "a"], [(1 << 32) | 2, "X"],
                                                            [(1 << 32) | 3, "c"]]


# ------------------------------------------------------------------------------------------ the reader alone


def _vars(**fields) -> dict:
    """A line's variables: INIT_VARS' with ``fields`` (``staged=`` in place of the whole staged history)."""
    v = {k: x for k, x in INIT_VARS.items() if k != "staged_history" or "staged" not in fields}
    return {**v, "learner_phase": {}, "learner_last_zxid": {}, "ack_index": {}, **fields}


def test_a_prefix_is_read_from_the_history_after_the_lines_own_storage_operations() -> None:
    view = SpecView(1)
    view.learns(1, _vars(history=[[1, "a"], [2, "b"]]), None)
    view.learns(1, _vars(staged={"len": 3, "last": [3, "c"], "prefix": True}), [["append", [[3, "c"]]]])
    assert view.vars[1]["staged_history"] == [(1, "a"), (2, "b"), (3, "c")]
    view.learns(1, _vars(staged={"len": 1, "last": [1, "a"], "prefix": True}), [])  # a TRUNC's
    assert view.vars[1]["staged_history"] == [(1, "a")]
    with pytest.raises(MergeError, match="server 1: .* first 4 transactions of its history, which has 3"):
        view.learns(1, _vars(staged={"len": 4, "last": [4, "d"], "prefix": True}), [])
    with pytest.raises(MergeError, match="server 1: .* ending with \\[2, 'x'\\]"):
        view.learns(1, _vars(staged={"len": 2, "last": [2, "x"], "prefix": True}), [])


def test_a_syncs_proposals_append_in_place_but_never_to_a_list_a_snapshot_or_init_vars_holds() -> None:
    view = SpecView(1)
    view.learns(1, _vars(history=[[1, "a"]]), None)
    view.learns(1, _vars(staged={"len": 1, "last": [1, "a"], "prefix": True}), [])
    held = view.vars[1]["staged_history"]
    view.learns(1, _vars(staged={"len": 2, "last": [2, "b"]}), [])  # a PROPOSAL in sync: O(1), no copy
    assert view.vars[1]["staged_history"] is held == [(1, "a"), (2, "b")]
    snap = Snapshot(view)
    view.learns(1, _vars(staged={"len": 3, "last": [3, "c"]}), [])
    assert snap.staged[1] == [(1, "a"), (2, "b")] and len(view.vars[1]["staged_history"]) == 3
    # a supplied timeout sets INIT_VARS' own list (conformance/validate/merge.py): the next append copies it
    view.vars[1] = {**view.vars[1], "staged_history": INIT_VARS["staged_history"]}
    view.learns(1, _vars(staged={"len": 1, "last": [4, "d"]}), [])
    assert INIT_VARS["staged_history"] == [] and view.vars[1]["staged_history"] == [(4, "d")]


class _Kept:
    """A simulator observer that keeps the simulation, whose action logs hold every line written, however the run
    ended (a seeded bug may stop a server before the end: no `finished`)."""

    sim = None

    def step(self, sim, sid, eff):
        self.sim = sim
        return None

    def crashed(self, sim, sid):
        return None

    def finished(self, sim):
        return None
