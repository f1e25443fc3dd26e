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

from dataclasses import dataclass
from typing import Any

from zabref.core.election import Send
from zabref.core.packets import QuorumPacket, ServerState
from zabref.core.zab import PersistOp, Txn

__all__ = ["READ_LIMIT", "Timing", "Action", "Effects", "EffectsBuilder", "refused"]

#: Most transactions one ``read`` answer carries (the client asks again for more).
READ_LIMIT = 10_000


@dataclass(frozen=True, slots=True, init=False)
class Timing:
    """The timers, in ticks of ``tick_s`` seconds (ZooKeeper's tickTime, initLimit, syncLimit)."""

    tick_s: float
    init_limit: int  # ticks a follower may take to connect and sync, and a leader to establish its epoch
    sync_limit: int  # ticks of silence after which the other side is given up
    finalize_ticks: int  # FastLeaderElection's finalizeWait
    # a LOOKING server whose vote and round did not change this long sends its vote again: the finalize wait, as
    # FastLeaderElection's first notTimeout is minNotificationInterval, which is finalizeWait unless configured
    resend_ticks: int
    resend_max_ticks: int  # ... and waits twice as long before the next resend of the round, up to this
    submit_timeout_s: float  # a client waits this long for its transaction before "outcome unknown"

    def __init__(self, tick_s: float = 0.1, init_limit: int = 10, sync_limit: int = 5, finalize_ticks: int = 2,
                 resend_ticks: int = 2, resend_max_ticks: int = 32, submit_timeout_s: float = 30.0) -> None:
        object.__setattr__(self, "tick_s", tick_s)
        object.__setattr__(self, "init_limit", init_limit)
        object.__setattr__(self, "sync_limit", sync_limit)
        object.__setattr__(self, "finalize_ticks", finalize_ticks)
        object.__setattr__(self, "resend_ticks", resend_ticks)
        object.__setattr__(self, "resend_max_ticks", resend_max_ticks)
        object.__setattr__(self, "submit_timeout_s", submit_timeout_s)

    def limit(self, ticks: int) -> float:
        return ticks * self.tick_s


@dataclass(frozen=True, slots=True, init=False)
class Action:
    """A spec action this server took: ``module`` is "Zab" or "FLE", ``params`` its parameters (sids)."""

    module: str
    name: str
    params: tuple[tuple[str, int], ...]
    packet: QuorumPacket | None  # the packet a receive action took
    tag: int | None  # the carrier's id of the connection it came on (for the action log; opaque here)

    def __init__(self, module: str, name: str, params: tuple[tuple[str, int], ...], packet: QuorumPacket | None = None,
                 tag: int | None = None) -> None:
        object.__setattr__(self, "module", module)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "packet", packet)
        object.__setattr__(self, "tag", tag)


@dataclass(frozen=True, slots=True, init=False)
class Effects:
    """What one input makes the server do, in field order (module docstring)."""

    persist: tuple[PersistOp, ...]
    dial: tuple[int, ...]  # open a quorum connection to this peer (before the packets sent to it)
    send: tuple[tuple[int, QuorumPacket], ...]
    notify: tuple[Send, ...]
    deliver: tuple[Txn, ...]
    close: tuple[int, ...]
    answers: tuple[tuple[int, dict[str, Any]], ...]
    forwards: tuple[tuple[int, int, dict[str, Any]], ...]  # (request id, to the leader sid, request)
    actions: tuple[Action, ...]
    role: ServerState | None
    deferred: bool  # the packet was not taken now; offer it again after the next unblock
    unblock: bool  # the role or zabState changed: packets deferred may be taken now
    late: tuple[PersistOp, ...]  # made durable after everything else (LeaderLogsLate; module docstring)
    late_upto: tuple[int, int] | None  # (role serial, history length) that ``late`` brings the log to

    def __init__(self, persist: tuple[PersistOp, ...] = (), dial: tuple[int, ...] = (),
                 send: tuple[tuple[int, QuorumPacket], ...] = (), notify: tuple[Send, ...] = (),
                 deliver: tuple[Txn, ...] = (), close: tuple[int, ...] = (),
                 answers: tuple[tuple[int, dict[str, Any]], ...] = (),
                 forwards: tuple[tuple[int, int, dict[str, Any]], ...] = (), actions: tuple[Action, ...] = (),
                 role: ServerState | None = None, deferred: bool = False, unblock: bool = False,
                 late: tuple[PersistOp, ...] = (), late_upto: tuple[int, int] | None = None) -> None:
        object.__setattr__(self, "persist", persist)
        object.__setattr__(self, "dial", dial)
        object.__setattr__(self, "send", send)
        object.__setattr__(self, "notify", notify)
        object.__setattr__(self, "deliver", deliver)
        object.__setattr__(self, "close", close)
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "forwards", forwards)
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "deferred", deferred)
        object.__setattr__(self, "unblock", unblock)
        object.__setattr__(self, "late", late)
        object.__setattr__(self, "late_upto", late_upto)


class EffectsBuilder:
    """`Effects` while one input is being taken: lists to append to, frozen by `build`."""

    __slots__ = ("persist", "dial", "send", "notify", "deliver", "close", "answers", "forwards", "actions", "role",
                 "unblock", "late", "late_upto")

    def __init__(self) -> None:
        self.persist: list[PersistOp] = []
        self.dial: list[int] = []
        self.send: list[tuple[int, QuorumPacket]] = []
        self.notify: list[Send] = []
        self.deliver: list[Txn] = []
        self.close: list[int] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.forwards: list[tuple[int, int, dict[str, Any]]] = []
        self.actions: list[Action] = []
        self.role: ServerState | None = None
        self.unblock = False
        self.late: list[PersistOp] = []
        self.late_upto: tuple[int, int] | None = None

    def build(self) -> Effects:
        return Effects(tuple(self.persist), tuple(self.dial), tuple(self.send), tuple(self.notify), tuple(self.deliver),
                       tuple(self.close), tuple(self.answers), tuple(self.forwards), tuple(self.actions), self.role,
                       unblock=self.unblock, late=tuple(self.late), late_upto=self.late_upto)


def refused(message: str, retry: bool) -> dict[str, Any]:
    """A client answer that refuses a request; ``retry`` says whether asking again is safe."""
    return {"error": message, "retry": retry}
