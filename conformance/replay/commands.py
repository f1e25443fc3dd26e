"""What the replay drivers tell a server to do for one step, and how they check what it did.

Theory of operation: a `Command` is one step's instruction (release the packet at a channel's head, steer the
election, submit a value or a sync, let time pass, crash, or nothing: a step the server takes in the input of the
step before, ``follows``); `expect_only` checks the actions a server answers it took against the action the spec's
step takes (and those that follow it in the same input). Both drivers use them: `conformance.replay.driver`
(spec/Zab.tla and spec/ZabSync.tla traces) and `conformance.replay.fle_driver` (spec/FastLeaderElection.tla traces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.replay.harness import TIMING
from zabref.runtime.control import ControlError

__all__ = ["MAX_TIMEOUT_TICKS", "Command", "expect_only"]

#: Ticks a timeout step may take: the longest silence a node waits for (a leader: twice initLimit), and some.
MAX_TIMEOUT_TICKS = 2 * TIMING.init_limit + 4


@dataclass(frozen=True)
class Command:
    """What the driver does for one step: ``kind`` and the server ``i`` (and ``j``) it concerns."""

    kind: str  # "release", "steer", "submit", "client_sync", "ping", "follows", "timeout", "crash", "own_ack"
    i: int
    j: int = 0
    packet: str = ""  # release: the packet type expected at the head


def expect_only(taken: list[dict[str, Any]], modules: str | tuple[str, ...], actions: str | list[str],
                i: int) -> None:
    """The node took ``actions`` (one name, or the names of steps it takes in one input, in order), and no other
    action of ``modules``; else ControlError saying what it did."""
    modules = (modules,) if isinstance(modules, str) else modules
    actions = [actions] if isinstance(actions, str) else actions
    names = [a["name"] for a in taken if a["module"] in modules and a["name"] != "ConnectionClosed"]
    if names != actions:
        raise ControlError(f"server {i} took {', '.join(names) or 'no action'} of {'/'.join(modules)}, the spec "
                           f"takes {', '.join(actions)}")
