"""Replay a FastLeaderElection.tla trace on real servers, over their real election ports, checking every step.

Theory of operation
-------------------
The servers are the same ``zabref serve --control`` processes a Zab.tla trace runs on (conformance/replay/harness.py):
their nodes (`zabref.core.node`) run `zabref.core.election.FastLeaderElection` behind the election port, and the control
driver holds every notification on the connection it came in on until the driver releases it. Each server starts
from the persistent state the model gives it (``InitZxid[i]``, ``InitEpoch[i]``: a history ending at that zxid and
that currentEpoch), so its first vote is the spec's ``InitVote(i)``; its start is the spec's ``Init`` for it (round
1, its vote broadcast). Each step is taken as the spec takes it:

* ``Handle*(i, j)``, ``FinalizeDiscard(i, j)``: ``release_vote {from: j}`` at i -- the head of what i holds from j;
* ``FinalizeTimeout(i)``, ``ResendNotifications(i)``: let i's logical clock run until i's node takes that action
  (the finalize wait, the notTimeout);
* ``StartElection(i)``: let i's clock run until i gives up its leader (FollowerTimeout or LeaderTimeout: its Zab
  side never got far, since the driver releases no quorum packet) and starts the next round;
* ``Restart(i)``: SIGKILL and start again (round 1; notifications to and from i are lost with its connections).

After each step the driver checks that the node took exactly the step's action (the control socket reports the
actions an input caused), waits until every notification sent has arrived, and compares every server's election
state with the step's state (`conformance.replay.fle_mapping`).
"""

from __future__ import annotations

from typing import Any

from conformance.errors import TraceActionError
from conformance.graph.traces import Step, Trace
from conformance.replay.commands import MAX_TIMEOUT_TICKS, Command, expect_only
from conformance.replay.fle_mapping import MAPPED, NOT_MAPPED, FleWorld, spec_state
from conformance.replay.harness import Cluster
from zabref.core.packets import make_zxid
from zabref.core.zab import Persistent, Txn
from zabref.runtime.control import ControlError

__all__ = ["is_fle_trace", "FleReplay", "RECEIVE_ACTIONS"]

RECEIVE_ACTIONS = frozenset({"HandleHigherRound", "HandleSameRound", "HandleLowerRound", "HandleFromDecided",
                             "FinalizeDiscard", "HandleAsDecided"})
_TIMED = {"FinalizeTimeout": "FinalizeTimeout", "ResendNotifications": "ResendNotifications",
          "StartElection": "StartElection"}
_SERVER_ACTIONS = frozenset({*_TIMED, "Restart"})


def is_fle_trace(trace: Trace) -> bool:
    """A trace of spec/FastLeaderElection.tla (its states hold ``electionMsgs``), not of Zab.tla."""
    return "electionMsgs" in trace.steps[0].state


def _persistent(step0: Step, source: str) -> dict[int, Persistent]:
    """Each server's persistent state whose vote is Init's ``proposedVote[i]`` (``InitVote(i)``): a history whose
    last zxid is InitZxid[i] (one transaction; none for <<0, 0>>) and currentEpoch = acceptedEpoch = InitEpoch[i]."""
    out = {}
    for k, v in enumerate(step0.state["proposedVote"], 1):
        epoch, counter = v["zxid"]
        if counter == 0 and epoch != 0:
            raise TraceActionError(source, 0, f"InitZxid[{k}] = <<{epoch}, 0>> is the last zxid of no history "
                                              "(a transaction's counter starts at 1): no server can vote with it")
        history = (Txn(make_zxid(epoch, counter), b"init"),) if counter else ()
        out[k] = Persistent(history, v["epoch"], v["epoch"])
    return out


def _command(step: Step, source: str) -> Command:
    want = ("i", "j") if step.action in RECEIVE_ACTIONS else ("i",) if step.action in _SERVER_ACTIONS else None
    if want is None:
        raise TraceActionError(source, step.index, f"{step.action} is not an action of FastLeaderElection.tla "
                                                   f"(known: {', '.join(sorted(RECEIVE_ACTIONS | _SERVER_ACTIONS))})")
    if set(step.params) != set(want):
        raise TraceActionError(source, step.index, f"{step.action} takes parameters {', '.join(want)}, the step "
                                                   f"gives {', '.join(sorted(step.params)) or 'none'}")
    i, j = step.params["i"], step.params.get("j", 0)
    kind = "release_vote" if j else "crash" if step.action == "Restart" else "tick"
    return Command(kind, i, j)


class FleReplay:
    """The driver's side of a spec/FastLeaderElection.tla trace."""

    late = False  # the election has no log writes: its servers run with [cluster] leader_logs_late off

    def __init__(self, trace: Trace, source: str) -> None:
        unknown = set(trace.steps[0].state) - set(MAPPED) - set(NOT_MAPPED)
        if unknown:  # a spec variable this driver would silently skip
            raise TraceActionError(source, 0, f"spec variables with no FLE mapping: {', '.join(sorted(unknown))}")
        self.persistent = _persistent(trace.steps[0], source)
        self.n = len(self.persistent)
        self.commands = [_command(s, source) for s in trace.steps[1:]]
        self.names = MAPPED
        self._past: list[dict[str, Any]] = []  # decisions of processes that crashed since
        self._current: dict[int, list[dict[str, Any]]] = {}

    def seed(self) -> dict[int, Persistent]:
        return self.persistent

    def expected(self, step: Step) -> dict[str, Any]:
        return step.state

    def observed(self, states: dict[int, dict]) -> None:
        self._current = {sid: list(s["decisions"]) for sid, s in states.items()}

    def spec_state(self, states: dict[int, dict]) -> dict[str, Any]:
        decisions = self._past + [d for ds in self._current.values() for d in ds]
        return spec_state(FleWorld(states, decisions))

    def take(self, step: Step, command: Command, cluster: Cluster, states: dict[int, dict]) -> None:
        i = command.i
        if command.kind == "release_vote":
            if not any(v["peer"] == command.j and v["held"] for v in states[i]["votes"]):
                raise ControlError(f"server {i} holds no notification from server {command.j}")
            answer = cluster.request(i, "release_vote", **{"from": command.j})
            expect_only(answer["actions"], "FLE", step.action, i)
        elif command.kind == "crash":
            self._past += self._current.pop(i, [])
            cluster.crash(i)
        else:
            answer = cluster.request(i, "tick", count=MAX_TIMEOUT_TICKS, until_action=_TIMED[step.action])
            fle = [a["name"] for a in answer["actions"] if a["module"] == "FLE"]
            if fle != [step.action]:
                raise ControlError(f"server {i} took {', '.join(fle) or 'no action'} of FLE as time passed, "
                                   f"the spec takes {step.action}")

    def durable_differences(self, step: Step, cluster: Cluster) -> dict[str, Any]:
        return {}  # FastLeaderElection.tla has no persistent variable (its InitZxid and InitEpoch are constants)

    def check_clients(self, step: Step, cluster: Cluster) -> str:
        return ""
