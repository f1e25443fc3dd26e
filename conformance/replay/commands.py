"""What the replay drivers tell a server to do for one step, and how they check what it did.

Theory of operation: a `Command` is one step's instruction (release the packet at a channel's head, steer the
election, submit a value, let time pass, crash); `expect_only` checks the actions a server answers it took against
the one action the spec's step takes. Both drivers use them: `conformance.replay.driver` (spec/Zab.tla traces) and
`conformance.replay.fle_driver` (spec/FastLeaderElection.tla traces).
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

    kind: str  # "release", "steer", "submit", "timeout", "crash"
    i: int
    j: int = 0
    packet: str = ""  # release: the packet type expected at the head



def expect_only(taken: list[dict[str, Any]], module: str, action: str, i: int) -> None:
    """The node took ``action`` (and no other action of ``module``), or ControlError saying what it did."""
    names = [a["name"] for a in taken if a["module"] == module and a["name"] != "ConnectionClosed"]
    if names != [action]:
        raise ControlError(f"server {i} took {', '.join(names) or 'no action'} of {module}, the spec takes {action}")
