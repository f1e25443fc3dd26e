"""A spec/Zab.tla trace as the driver's commands: what to do for each step, checked before any server starts.

Theory of operation: a Process action (``FollowerProcessLEADERINFO(i, j)``) is the release of the packet at the head
of server i's connection from j, and the packet type is checked against seed 000's table; ClientRequest, the
timeouts, Crash, the election's decisions and a late leader's LeaderOwnACK are one command each; so are a sync's
steps (spec/ZabSync.tla):
ClientSync a client's sync, LeaderSendPING a tick of the leader, and LeaderSendSYNC nothing -- the leader takes it in
the input of the step before (`FOLLOWS`). A step naming an action the driver cannot take,
or a parameter that is not a server of the trace, raises `TraceActionError` naming the step.
"""

from __future__ import annotations

import re

from conformance.errors import TraceActionError
from conformance.graph.traces import Step, Trace
from conformance.replay.commands import Command

__all__ = ["PACKET_TYPES", "PROCESS", "PACKET_ALIAS", "SIMPLE", "FOLLOWS", "servers_of", "plan", "together"]


#: Packet types of seed 000's table that a Process action can name, and those of a sync (spec/ZabSync.tla).
PACKET_TYPES = frozenset({"FOLLOWERINFO", "LEADERINFO", "ACKEPOCH", "DIFF", "TRUNC", "SNAP", "NEWLEADER", "ACK",
                          "UPTODATE", "PROPOSAL", "COMMIT", "REQUEST", "PING", "SYNC"})


PROCESS = re.compile(r"^(?P<role>Leader|Follower)Process(?P<packet>[A-Z]+?)(?P<insync>InSync)?$")


PACKET_ALIAS = {"ACKNEWLEADER": "ACK"}  # LeaderProcessACKNEWLEADER takes the ACK of NEWLEADER


SIMPLE = {"ClientRequest": ("i",), "FollowerTimeout": ("i",), "LeaderTimeout": ("i",), "Crash": ("i",),
          "BecomeLeader": ("i",), "BecomeFollower": ("i", "j"), "ClientSync": ("i",), "LeaderSendPING": ("i",),
          "LeaderSendSYNC": ("i",), "LeaderOwnACK": ("i",)}

#: Leader i's answer to a sync: zabref's leader sends SYNC in the input that makes the sync answerable (an ACK that
#: commits, a PING answer that confirms), so a trace takes it right after that step of i (conformance's sync model
#: keeps ZabSync.tla's rule SyncAnsweredAtOnce) and the driver checks the two against that one input.
FOLLOWS = frozenset({"LeaderSendSYNC"})


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
    if action == "ClientSync":
        return Command("client_sync", i)
    if action == "LeaderSendPING":
        return Command("ping", i)
    if action == "LeaderOwnACK":
        return Command("own_ack", i)
    if action in FOLLOWS:
        return Command("follows", i)
    return Command("crash", i)


def servers_of(trace: Trace, source: str) -> int:
    n = trace.header.constants.get("N")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise TraceActionError(source, -1, f"the header's constants must set N (servers), not {n!r}")
    return n


def plan(trace: Trace, source: str) -> list[Command]:
    """The command of every step after the initial state; TraceActionError on the first step it cannot take."""
    n = servers_of(trace, source)
    commands = [_command(step, n, source) for step in trace.steps[1:]]
    for k, (step, command) in enumerate(zip(trace.steps[1:], commands)):
        before = commands[k - 1] if k else None
        if command.kind == "follows" and (before is None or before.kind in ("crash", "client_sync")
                                          or trace.steps[k].params.get("i") != command.i):
            raise TraceActionError(source, step.index, f"{step.action}({command.i}) does not follow a step of server "
                                                        f"{command.i}: zabref takes it in the input that enables it "
                                                        "(spec/ZabSync.tla, SyncAnsweredAtOnce)")
    return commands


def together(trace: Trace, commands: list[Command]) -> dict[int, list[str]]:
    """For each step that takes an input, the actions the server takes in it: the step's, and those of the
    ``follows`` steps right after it (by step index)."""
    out: dict[int, list[str]] = {}
    first = 0
    for step, command in zip(trace.steps[1:], commands):
        if command.kind == "follows":
            out[first].append(step.action)
        else:
            first = step.index
            out[first] = [step.action]
    return out
