"""The values the Zab core takes and returns: transactions, persistent state, storage operations and `Output`.

Theory of operation
-------------------
The core (`zabref.core.zab.ZabCore`) is sans-IO: every entry point takes one event and returns one `Output` that says
what must happen next, in the order it must happen:

1. ``persist`` -- storage operations (`AppendTxns`, `TruncateHistory`, `ReplaceHistory`, `SetAcceptedEpoch`,
   `SetCurrentEpoch`), in order. The runtime makes each durable before the next one starts and all of them durable
   before it sends anything (`zabref.storage.Storage.apply` takes one step's operations as one batch). This is how "a
   follower logs and syncs proposals to disk before it sends ACK(zxid)" (seed 000, phase 3, step 2) and "the follower
   sets f.acceptedEpoch = e before it sends ACKEPOCH" (phase 1, step 4) are carried in the data, as etcd-io/raft's
   ``Ready`` carries them.
2. ``send`` -- ``(peer, QuorumPacket)`` pairs, in order (per peer this is the FIFO order of the spec's ``msgs``).
3. ``deliver`` -- transactions newly delivered to the application, in order.
4. ``close`` -- peers whose connection must be closed (the spec's GoLooking empties every channel to and from the
   server, so going back to election lists every other server).
5. ``role`` -- the new `ServerState` when the entry point changed it, else None.
6. ``late`` -- storage operations a leader that logs late (spec/Zab.tla's LeaderLogsLate) makes durable *after* the
   sends: its own log write of a PROPOSAL. The core does not count itself in a quorum for them until the runtime
   reports them durable (``leader_own_ack``, the spec's LeaderOwnACK), and a power cut before then may lose them,
   as the spec's Crash with ``Kept(i)`` allows.

Every value here is frozen and validates its fields when built (as h11's events do), so a malformed `Output` cannot
be constructed by a bug in the core and then half-applied by the runtime.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from zabref.core.packets import QuorumPacket, ServerState
from zabref.errors import LocalProtocolError

__all__ = [
    "Txn",
    "Persistent",
    "ZabState",
    "LearnerPhase",
    "FORWARDING_PHASES",
    "NO_SERVER",
    "AppendTxns",
    "TruncateHistory",
    "ReplaceHistory",
    "SetAcceptedEpoch",
    "SetCurrentEpoch",
    "PersistOp",
    "Output",
    "EMPTY",
    "OutputBuilder",
    "StorageLike",
    "apply_persist",
    "check_history",
]

#: The spec's NoServer: the ``leader`` of a LOOKING server.
NO_SERVER = 0


class Txn(NamedTuple):
    """The spec's transaction ``[zxid |-> <<e, c>>, value |-> v]``; here ``zxid`` is the int ``e << 32 | c``.

    A NamedTuple so that it is also the ``(zxid, value)`` pair `zabref.storage` reads and writes.
    """

    zxid: int
    value: bytes


class ZabState(enum.StrEnum):
    """zabState: the phases of seed 000 (ZooKeeper's ZabState); the values are the spec's strings."""

    ELECTION = "ELECTION"
    DISCOVERY = "DISCOVERY"
    SYNCHRONIZATION = "SYNCHRONIZATION"
    BROADCAST = "BROADCAST"


class LearnerPhase(enum.StrEnum):
    """learnerPhase[l][f]: what a leader knows of one learner connection, named after the last packet exchanged.

    The values are the spec's strings (its ``LearnerPhases``): NONE, FOLLOWERINFO, LEADERINFO, ACKEPOCH, NEWLEADER,
    ACKNEWLEADER, UPTODATE.
    """

    NONE = "NONE"
    FOLLOWERINFO = "FOLLOWERINFO"
    LEADERINFO = "LEADERINFO"
    ACKEPOCH = "ACKEPOCH"
    NEWLEADER = "NEWLEADER"
    ACKNEWLEADER = "ACKNEWLEADER"
    UPTODATE = "UPTODATE"


#: The spec's ForwardingPhases: sync was queued to these learners, so new PROPOSALs and COMMITs queue behind it
#: (seed 000, phase 2, step 1).
FORWARDING_PHASES = frozenset({LearnerPhase.NEWLEADER, LearnerPhase.ACKNEWLEADER, LearnerPhase.UPTODATE})


def check_history(history: Iterable[tuple[int, bytes]], what: str) -> tuple[Txn, ...]:
    """``history`` as a tuple of `Txn`; raises ValueError naming ``what`` and the index unless zxids strictly
    increase from above 0 and every value is bytes."""
    out: list[Txn] = []
    last = 0
    for k, item in enumerate(history):
        zxid, value = item
        if not isinstance(zxid, int) or isinstance(zxid, bool):
            raise ValueError(f"{what}[{k}]: zxid {zxid!r} is not an int")
        if not isinstance(value, (bytes, bytearray)):
            raise ValueError(f"{what}[{k}] (zxid {zxid:#x}): value is {type(value).__name__}, not bytes")
        if zxid <= last:
            raise ValueError(f"{what}[{k}]: zxid {zxid:#x} does not follow {last:#x}")
        out.append(Txn(zxid, bytes(value)))
        last = zxid
    return tuple(out)


@dataclass(frozen=True, slots=True, init=False)
class Persistent:
    """What survives a crash (the spec's ``persistentVars``): history, acceptedEpoch, currentEpoch."""

    history: tuple[Txn, ...]
    accepted_epoch: int
    current_epoch: int

    def __init__(self, history: tuple[Txn, ...] = (), accepted_epoch: int = 0, current_epoch: int = 0) -> None:
        try:
            object.__setattr__(self, "history", check_history(history, "history"))
        except ValueError as e:
            raise LocalProtocolError(f"persistent state: {e}") from None
        if not 0 <= current_epoch <= accepted_epoch:
            raise LocalProtocolError(
                f"persistent state: need 0 <= currentEpoch <= acceptedEpoch, "
                f"got currentEpoch {current_epoch}, acceptedEpoch {accepted_epoch}"
            )
        object.__setattr__(self, "accepted_epoch", accepted_epoch)
        object.__setattr__(self, "current_epoch", current_epoch)

    @classmethod
    def from_storage(cls, storage: Any) -> Persistent:
        """Read the three persistent variables from a `zabref.storage.Storage` (or anything shaped like it)."""
        return cls(tuple(Txn(z, v) for z, v in storage.history), storage.accepted_epoch, storage.current_epoch)


# ---------------------------------------------------------------------------------------------- storage operations


@dataclass(frozen=True, slots=True, init=False)
class AppendTxns:
    """Append ``txns`` after the history (Storage.append; durable only after Storage.sync)."""

    txns: tuple[Txn, ...]

    def __init__(self, txns: tuple[Txn, ...]) -> None:
        object.__setattr__(self, "txns", check_history(txns, "AppendTxns.txns"))
        if not self.txns:
            raise ValueError("AppendTxns needs at least one transaction")


@dataclass(frozen=True, slots=True, init=False)
class TruncateHistory:
    """Drop every transaction whose zxid is above ``zxid`` (Storage.truncate, durable when it returns)."""

    zxid: int

    def __init__(self, zxid: int) -> None:
        if zxid < 0:
            raise ValueError(f"TruncateHistory: zxid {zxid} is negative")
        object.__setattr__(self, "zxid", zxid)


@dataclass(frozen=True, slots=True, init=False)
class ReplaceHistory:
    """Make ``history`` the whole history, atomically (Storage.replace: temp file, fsync, rename)."""

    history: tuple[Txn, ...]

    def __init__(self, history: tuple[Txn, ...]) -> None:
        object.__setattr__(self, "history", check_history(history, "ReplaceHistory.history"))


@dataclass(frozen=True, slots=True, init=False)
class SetAcceptedEpoch:
    """Durably store acceptedEpoch (Storage.set_accepted_epoch)."""

    epoch: int

    def __init__(self, epoch: int) -> None:
        object.__setattr__(self, "epoch", epoch)


@dataclass(frozen=True, slots=True, init=False)
class SetCurrentEpoch:
    """Durably store currentEpoch (Storage.set_current_epoch)."""

    epoch: int

    def __init__(self, epoch: int) -> None:
        object.__setattr__(self, "epoch", epoch)


PersistOp = AppendTxns | TruncateHistory | ReplaceHistory | SetAcceptedEpoch | SetCurrentEpoch


class StorageLike(Protocol):
    """The part of `zabref.storage.Storage` the core's outputs are applied to."""

    def apply(self, ops: tuple[PersistOp, ...] | list[PersistOp]) -> None: ...
    def sync(self) -> None: ...


def apply_persist(ops: Iterable[PersistOp], storage: StorageLike) -> None:
    """Make the storage operations of ONE step durable: one atomic batch (`zabref.storage.Storage.apply`), then one
    fsync. A runtime that gathers many steps into one sync calls ``apply`` per step and ``sync`` once, and sends none
    of their packets before that sync (`zabref.runtime.server`)."""
    storage.apply(tuple(ops))
    storage.sync()


# ---------------------------------------------------------------------------------------------- Output


@dataclass(frozen=True, slots=True, init=False)
class Output:
    """What one event makes the server do: persist, then send, deliver and close. See the module docstring."""

    persist: tuple[PersistOp, ...]
    send: tuple[tuple[int, QuorumPacket], ...]
    deliver: tuple[Txn, ...]
    close: tuple[int, ...]
    role: ServerState | None
    late: tuple[PersistOp, ...]

    def __init__(self, persist: tuple[PersistOp, ...] = (), send: tuple[tuple[int, QuorumPacket], ...] = (),
                 deliver: tuple[Txn, ...] = (), close: tuple[int, ...] = (), role: ServerState | None = None,
                 late: tuple[PersistOp, ...] = ()) -> None:
        for name, ops in (("persist", persist), ("late", late)):
            for op in ops:
                if not isinstance(op, PersistOp):
                    raise TypeError(f"Output.{name}: {op!r} is not a storage operation")
        for item in send:
            peer, packet = item
            if not isinstance(peer, int) or not isinstance(packet, QuorumPacket):
                raise TypeError(f"Output.send: {item!r} is not a (peer, QuorumPacket) pair")
        for txn in deliver:
            if not isinstance(txn, Txn):
                raise TypeError(f"Output.deliver: {txn!r} is not a Txn")
        object.__setattr__(self, "persist", persist)
        object.__setattr__(self, "send", send)
        object.__setattr__(self, "deliver", deliver)
        object.__setattr__(self, "close", close)
        object.__setattr__(self, "role", None if role is None else ServerState(role))
        object.__setattr__(self, "late", late)

    @property
    def empty(self) -> bool:
        return not (self.persist or self.send or self.deliver or self.close or self.role is not None or self.late)


#: The Output of an input that changes nothing outside the core.
EMPTY = Output()


class OutputBuilder:
    """A handler's scratch pad: collects effects in order, then `build` freezes them into an `Output`."""

    __slots__ = ("persist", "send", "deliver")

    def __init__(self) -> None:
        self.persist: list[PersistOp] = []
        self.send: list[tuple[int, QuorumPacket]] = []
        self.deliver: list[Txn] = []

    def build(self, *, close: Iterable[int] = (), role: ServerState | None = None) -> Output:
        return Output(tuple(self.persist), tuple(self.send), tuple(self.deliver), tuple(close), role)
