"""What a `zabref.core.node.Node` takes and returns: its timers (`Timing`), the spec actions it took (`Action`) and
the `Effects` of one input, which its carrier carries out in field order.

Theory of operation: ``persist`` is made durable first, then everything else -- sends, election notifications,
deliveries, closes, client answers -- so that nothing leaves before the persistence of its step is durable
(`zabref.runtime.server` keeps this for a whole batch of steps, which is what makes a power cut equal the spec's
Crash). The one exception is ``late``: a leader that logs late (spec/Zab.tla's LeaderLogsLate) makes its own log
write of a PROPOSAL durable after the PROPOSAL leaves, and then tells its node so (``Node.logged`` with
``late_upto``), which is the spec's LeaderOwnACK; until then a power cut may lose the write, as the spec's Crash
keeps any length in ``Kept(i)``. ``actions`` names each spec action taken (spec/Zab.tla and
spec/FastLeaderElection.tla), for the action log. A node builds its effects in an `EffectsBuilder` and freezes them
with ``build``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zabref.core.election import Send
from zabref.core.packets import QuorumPacket, ServerState
from zabref.core.zab import PersistOp, Txn

__all__ = ["READ_LIMIT", "Timing", "Action", "Effects", "EffectsBuilder", "refused"]

#: Most transactions one ``read`` answer carries (the client asks again for more).
READ_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Timing:
    """The timers, in ticks of ``tick_s`` seconds (ZooKeeper's tickTime, initLimit, syncLimit)."""

    tick_s: float = 0.1
    init_limit: int = 10  # ticks a follower may take to connect and sync, and a leader to establish its epoch
    sync_limit: int = 5  # ticks of silence after which the other side is given up
    finalize_ticks: int = 2  # FastLeaderElection's finalizeWait
    # a LOOKING server whose vote and round did not change this long sends its vote again: the finalize wait, as
    # FastLeaderElection's first notTimeout is minNotificationInterval, which is finalizeWait unless configured
    resend_ticks: int = 2
    resend_max_ticks: int = 32  # ... and waits twice as long before the next resend of the round, up to this
    submit_timeout_s: float = 30.0  # a client waits this long for its transaction before "outcome unknown"

    def limit(self, ticks: int) -> float:
        return ticks * self.tick_s


@dataclass(frozen=True, slots=True)
class Action:
    """A spec action this server took: ``module`` is "Zab" or "FLE", ``params`` its parameters (sids)."""

    module: str
    name: str
    params: tuple[tuple[str, int], ...]
    packet: QuorumPacket | None = None  # the packet a receive action took
    tag: int | None = None  # the carrier's id of the connection it came on (for the action log; opaque here)


@dataclass(frozen=True, slots=True)
class Effects:
    """What one input makes the server do, in field order (module docstring)."""

    persist: tuple[PersistOp, ...] = ()
    dial: tuple[int, ...] = ()  # open a quorum connection to this peer (before the packets sent to it)
    send: tuple[tuple[int, QuorumPacket], ...] = ()
    notify: tuple[Send, ...] = ()
    deliver: tuple[Txn, ...] = ()
    close: tuple[int, ...] = ()
    answers: tuple[tuple[int, dict[str, Any]], ...] = ()
    forwards: tuple[tuple[int, int, dict[str, Any]], ...] = ()  # (request id, to the leader sid, request)
    actions: tuple[Action, ...] = ()
    role: ServerState | None = None
    deferred: bool = False  # the packet was not taken now; offer it again after the next unblock
    unblock: bool = False  # the role or zabState changed: packets deferred may be taken now
    late: tuple[PersistOp, ...] = ()  # made durable after everything else (LeaderLogsLate; module docstring)
    late_upto: tuple[int, int] | None = None  # (role serial, history length) that ``late`` brings the log to


@dataclass
class EffectsBuilder:
    """`Effects` while one input is being taken: lists to append to, frozen by `build`."""

    persist: list[PersistOp] = field(default_factory=list)
    dial: list[int] = field(default_factory=list)
    send: list[tuple[int, QuorumPacket]] = field(default_factory=list)
    notify: list[Send] = field(default_factory=list)
    deliver: list[Txn] = field(default_factory=list)
    close: list[int] = field(default_factory=list)
    answers: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    forwards: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    role: ServerState | None = None
    unblock: bool = False
    late: list[PersistOp] = field(default_factory=list)
    late_upto: tuple[int, int] | None = None

    def build(self) -> Effects:
        return Effects(tuple(self.persist), tuple(self.dial), tuple(self.send), tuple(self.notify), tuple(self.deliver),
                       tuple(self.close), tuple(self.answers), tuple(self.forwards), tuple(self.actions), self.role,
                       unblock=self.unblock, late=tuple(self.late), late_upto=self.late_upto)


def refused(message: str, retry: bool) -> dict[str, Any]:
    """A client answer that refuses a request; ``retry`` says whether asking again is safe."""
    return {"error": message, "retry": retry}
