"""Replay a FastLeaderElection.tla trace through zabref's election core, checking every step.

Theory of operation
-------------------
`zabref.election.FastLeaderElection` is the sans-IO core every zabref server runs in normal mode (`zabref.normal`
feeds it notifications from the election port and a finalizeWait timer). A trace of spec/FastLeaderElection.tla
(the `fle_tiny` / `fle_ci` models) is replayed through one such object per server, in this process: the driver
holds the FIFO channels the spec calls ``electionMsgs[i][j]`` -- each `Send` a core returns is appended to its
channel -- and takes each step as the spec does:

* ``Init``: every core's ``start_election(InitZxid[i], InitEpoch[i])`` (read from step 0's ``proposedVote``);
* ``StartElection(i)`` / ``Restart(i)``: ``start_election`` / ``restart`` with the same persistent zxid and epoch
  (Restart also empties the channels to and from i: the process's TCP connections died with it);
* ``Handle*(i, j)`` and ``FinalizeDiscard(i, j)``: pop the head of channel j -> i, check that ``action_for`` names
  the step's action (a core that would take another action fails there), and ``receive`` it;
* ``FinalizeTimeout(i)``: ``finalize_timeout``.

After each step `conformance.fle_mapping` maps the cores, channels and decisions to the spec's variables and
compares them with the trace's state; the first difference is a `Failure` with the same fields as a Zab replay's, so
`zabref conform` reports both alike. What this does not exercise: the election port's TCP transport and timers
(`tests/test_runtime.py` and the normal-mode cluster tests cover those). A seeded bug is applied by loading
``election.py`` from the patched copy of the package (`conformance.seeded`) under a private module name.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

from conformance.errors import TraceActionError
from conformance.fle_mapping import MAPPED, NOT_MAPPED, FleWorld, spec_state
from conformance.mapping import differences
from conformance.replay import Failure, ReplayResult, pretty_diff, replay_command
from conformance.traces import Step, Trace

__all__ = ["is_fle_trace", "replay_fle", "RECEIVE_ACTIONS"]

RECEIVE_ACTIONS = frozenset({"HandleHigherRound", "HandleSameRound", "HandleLowerRound", "HandleFromDecided",
                             "FinalizeDiscard", "HandleAsDecided"})
_SERVER_ACTIONS = frozenset({"StartElection", "Restart", "FinalizeTimeout"})


def is_fle_trace(trace: Trace) -> bool:
    """A trace of spec/FastLeaderElection.tla (its states hold ``electionMsgs``), not of Zab.tla."""
    return "electionMsgs" in trace.steps[0].state


def _election_module(bug_root: Path | None) -> ModuleType:
    if bug_root is None:
        import zabref.election
        return zabref.election
    name = f"_zabref_seeded_election_{abs(hash(str(bug_root)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(bug_root) / "zabref" / "election.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _persistent(step0: Step) -> dict[int, tuple[int, int]]:
    """InitZxid and InitEpoch per server, from Init's proposedVote (``InitVote(i)``): sid -> (zxid, epoch)."""
    out = {}
    for k, v in enumerate(step0.state["proposedVote"], 1):
        epoch, counter = v["zxid"]
        out[k] = (epoch << 32 | counter, v["epoch"])
    return out


def _check_params(source: str, step: Step) -> tuple[int, int | None]:
    want = ("i", "j") if step.action in RECEIVE_ACTIONS else ("i",) if step.action in _SERVER_ACTIONS else None
    if want is None:
        raise TraceActionError(source, step.index, f"{step.action} is not an action of FastLeaderElection.tla "
                                                   f"(known: {', '.join(sorted(RECEIVE_ACTIONS | _SERVER_ACTIONS))})")
    if set(step.params) != set(want):
        raise TraceActionError(source, step.index, f"{step.action} takes parameters {', '.join(want)}, the step "
                                                   f"gives {', '.join(sorted(step.params)) or 'none'}")
    return step.params["i"], step.params.get("j")


def replay_fle(trace: Trace, source: str, *, bug: str | None = None, bug_root: Path | None = None) -> ReplayResult:
    """Replay one FLE trace; never raises for a divergence (see `ReplayResult.failure`)."""
    started = time.monotonic()
    plan = [_check_params(source, s) for s in trace.steps[1:]]  # bad input fails before anything runs
    election = _election_module(bug_root)
    persistent = _persistent(trace.steps[0])
    voters = frozenset(persistent)
    cores = {sid: election.FastLeaderElection(sid, voters) for sid in persistent}
    channels: dict[tuple[int, int], deque] = {(i, j): deque() for i in cores for j in cores if i != j}
    decided: list[tuple[int, Any]] = []
    world = FleWorld(cores, channels, decided)
    result = ReplayResult(source, trace.header.config, len(trace.steps) - 1, bug=bug)

    def apply(sid: int, out: Any) -> None:
        for send in out.sends:
            channels[(sid, send.to)].append(send.notification)
        if out.decision is not None:
            decided.append((sid, out.decision))

    def fail(step: Step, reason: str, diffs: dict[str, tuple[Any, Any]]) -> None:
        result.failure = Failure(step.index, step.action, step.params, step.label, reason,
                                 {k: [e, a] for k, (e, a) in sorted(diffs.items())}, pretty_diff(diffs), {},
                                 replay_command(source, bug))

    unknown = set(trace.steps[0].state) - set(MAPPED) - set(NOT_MAPPED)
    if unknown:  # a spec variable this driver would silently skip
        raise TraceActionError(source, 0, f"spec variables with no FLE mapping: {', '.join(sorted(unknown))}")

    def compare(step: Step) -> bool:
        diffs = differences(step.state, spec_state(world), MAPPED)
        if diffs:
            fail(step, f"after {step.label or 'Init'}, the election cores' state differs from the spec's in "
                       f"{', '.join(sorted(diffs))}", diffs)
        return not diffs

    for sid, (zxid, epoch) in sorted(persistent.items()):
        apply(sid, cores[sid].start_election(zxid, epoch))
    if not compare(trace.steps[0]):
        result.wall = time.monotonic() - started
        return result
    for step, (i, j) in zip(trace.steps[1:], plan):
        t0 = time.monotonic()
        core = cores[i]
        try:
            if step.action in RECEIVE_ACTIONS:
                channel = channels[(j, i)]
                if not channel:
                    fail(step, f"channel {j} -> {i} is empty: nothing to take", {})
                    break
                taken = core.action_for(j, channel[0])
                if taken != step.action:
                    fail(step, f"server {i} would take {taken} for the head of channel {j} -> {i}, "
                               f"the spec takes {step.action}", {})
                    break
                apply(i, core.receive(j, channel.popleft()))
            elif step.action == "FinalizeTimeout":
                apply(i, core.finalize_timeout())
            else:
                if step.action == "Restart":
                    for key in channels:
                        if i in key:
                            channels[key].clear()
                    apply(i, core.restart(*persistent[i]))
                else:
                    apply(i, core.start_election(*persistent[i]))
        except Exception as e:  # noqa: BLE001 -- a core that refuses the spec's step is a departure, reported as one
            fail(step, f"server {i} refused {step.label}: {type(e).__name__}: {e}", {})
            break
        result.step_time += time.monotonic() - t0
        if not compare(step):
            break
        result.replayed += 1
        result.labels.append(step.label)
    result.wall = time.monotonic() - started
    return result
