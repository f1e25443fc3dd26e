"""A spec/Zab.tla trace as the driver's commands: what to do for each step, checked before any server starts.

Theory of operation: a Process action (``FollowerProcessLEADERINFO(i, j)``) is the release of the packet at the head
of server i's connection from j, and the packet type is checked against seed 000's table; ClientRequest, the
timeouts, Crash and the election's decisions are one command each. A step naming an action the driver cannot take,
or a parameter that is not a server of the trace, raises `TraceActionError` naming the step.
"""

from __future__ import annotations

import re

from conformance.errors import TraceActionError
from conformance.graph.traces import Step, Trace
from conformance.replay.commands import Command

__all__ = ["PACKET_TYPES", "PROCESS", "PACKET_ALIAS", "SIMPLE", "servers_of", "plan"]


#: Packet types of seed 000's table that a Process action can name.
PACKET_TYPES = frozenset({"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "DIFF", "TRUNC", "SNAP", "NEWLEADER", "ACK",
                          "UPTODATE", "PROPOSAL", "COMMIT"})


PROCESS = re.compile(r"^(?P<role>Leader|Follower)Process(?P<packet>[A-Z]+?)(?P<insync>InSync)?$")


PACKET_ALIAS = {"ACKNEWLEADER": "ACK"}  # LeaderProcessACKNEWLEADER takes the ACK of NEWLEADER


SIMPLE = {"ClientRequest": ("i",), "FollowerTimeout": ("i",), "LeaderTimeout": ("i",), "Crash": ("i",),
           "BecomeLeader": ("i",), "BecomeFollower": ("i", "j")}


def _sid(step: Step, name: str, n: int, source: str) -> int:
    value = step.params.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= n:
        raise TraceActionError(source, step.index, f"{step.action}: parameter {name!r} must be a server in 1..{n}, "
                                                   f"not {value!r}")
    return value


def _command(step: Step, n: int, source: str) -> Command:
    action, params = step.action, step.params
    m = PROCESS.match(action)
    expected = SIMPLE.get(action, ("i", "j") if m else None)
    if expected is None:
        raise TraceActionError(source, step.index, f"unknown action {action!r}: the replay driver takes "
                                                    f"{', '.join(sorted(SIMPLE))} and <Role>Process<PACKET>")
    if set(params) != set(expected):
        raise TraceActionError(source, step.index, f"{action} takes parameters {', '.join(expected)}, the step "
                                                    f"has {', '.join(sorted(params)) or 'none'}")
    i = _sid(step, "i", n, source)
    if m:
        packet = PACKET_ALIAS.get(m["packet"], m["packet"])
        if packet not in PACKET_TYPES:
            raise TraceActionError(source, step.index, f"unknown action {action!r}: no packet type {packet!r}")
        return Command("release", i, _sid(step, "j", n, source), packet)
    if action == "BecomeLeader":
        return Command("steer", i, i)
    if action == "BecomeFollower":
        return Command("steer", i, _sid(step, "j", n, source))
    if action == "ClientRequest":
        try:
            step.state["history"][i - 1][-1]["value"]
        except (KeyError, IndexError, TypeError):
            raise TraceActionError(source, step.index, f"ClientRequest({i}): history[{i}] in the step's state has "
                                                        "no last transaction to take the value from") from None
        return Command("submit", i)
    if action in ("FollowerTimeout", "LeaderTimeout"):
        return Command("timeout", i)
    return Command("crash", i)


def servers_of(trace: Trace, source: str) -> int:
    n = trace.header.constants.get("N")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TraceActionError(source, -1, f"the header's constants must set N (servers), not {n!r}")
    return n


def plan(trace: Trace, source: str) -> list[Command]:
    """The command of every step after the initial state; TraceActionError on the first step it cannot take."""
    n = servers_of(trace, source)
    return [_command(step, n, source) for step in trace.steps[1:]]
