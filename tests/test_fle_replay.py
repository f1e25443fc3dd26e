"""FastLeaderElection traces replayed on real servers over their election ports (conformance/replay/fle_driver.py): the
mapping covers every variable, a departure names the step and the variable, bad traces are refused before any
server starts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conformance.errors import TraceActionError
from conformance.graph.traces import Trace, read_trace
from conformance.replay.driver import replay
from conformance.replay.fle_mapping import MAPPED, NOT_MAPPED

REPO = Path(__file__).resolve().parent.parent
SPLIT = REPO / "traces" / "regression" / "fle-split-vote-better-vote-ends-finalize.jsonl.gz"


def _spec_variables() -> set[str]:
    text = (REPO / "spec" / "FastLeaderElection.tla").read_text()
    block = text[text.index("VARIABLES"):text.index("serverVars ==")]
    return {line.split(",")[0].split("\\*")[0].strip() for line in block.splitlines()[1:]} - {""}


def test_every_spec_variable_is_mapped_or_has_a_stated_reason() -> None:
    assert _spec_variables() == set(MAPPED) | set(NOT_MAPPED)
    assert not set(MAPPED) & set(NOT_MAPPED) and all(NOT_MAPPED.values())


@pytest.mark.slow
def test_the_split_vote_trace_replays_step_by_step() -> None:
    result = replay(read_trace(SPLIT), str(SPLIT))
    assert result.passed and result.replayed == result.steps == 8


def _edited(trace: Trace, index: int, **changes) -> Trace:
    steps = list(trace.steps)
    steps[index] = dataclasses.replace(steps[index], **changes)
    return Trace(trace.header, tuple(steps))


@pytest.mark.slow
def test_a_state_that_differs_from_the_servers_is_a_failure_naming_the_variable() -> None:
    trace = read_trace(SPLIT)
    state = json.loads(json.dumps(trace.steps[2].state))
    state["logicalclock"][0] = 7
    result = replay(_edited(trace, 2, state=state), "t")
    assert not result.passed and result.replayed == 1
    assert result.failure.step == 2 and set(result.failure.differences) == {"logicalclock"}
    assert result.failure.differences["logicalclock"][0][0] == 7 != result.failure.differences["logicalclock"][1][0]


@pytest.mark.slow
def test_a_step_the_server_would_not_take_is_a_failure_naming_both_actions() -> None:
    trace = read_trace(SPLIT)  # step 1 is HandleSameRound(1, 3): relabel it as another receive action
    result = replay(_edited(trace, 1, action="HandleLowerRound", label="HandleLowerRound__1__3"), "t")
    assert result.failure.step == 1
    assert "took HandleSameRound of FLE, the spec takes HandleLowerRound" in result.failure.reason


def test_an_action_of_another_spec_is_refused_before_anything_runs() -> None:
    trace = read_trace(SPLIT)
    with pytest.raises(TraceActionError, match="not an action of FastLeaderElection.tla"):
        replay(_edited(trace, 3, action="ElectLeader", label="ElectLeader__1__S1_2"), "t")


def test_an_unmapped_spec_variable_is_refused_not_skipped() -> None:
    trace = read_trace(SPLIT)
    steps = tuple(dataclasses.replace(s, state={**s.state, "ghost": 0}) for s in trace.steps)
    with pytest.raises(TraceActionError, match="no FLE mapping: ghost"):
        replay(Trace(trace.header, steps), "t")

