"""The Zab core's variables, one field per spec variable of spec/Zab.tla, and the helpers every role shares.

Theory of operation
-------------------
`CoreState` holds, for ONE server ``sid``, exactly the spec's per-server variables under their snake_case names
(``acceptedEpoch`` -> ``accepted_epoch``, ``learnerPhase[sid]`` -> ``learner_phase``, ...), grouped as the spec groups
them. The spec's network (``msgs``) is not here: channels are the runtime's TCP connections. The checking-only
variables (``proposed``, ``committed``) have no counterpart at all.

The handlers live in `zabref.core.leader` and `zabref.core.follower`, the entry points in `zabref.core.zab`; all of them
follow one discipline taken from the spec: first check the action's enabling condition and decode the packet
(raising `RemoteProtocolError` / `LocalProtocolError` with nothing changed), then change the fields and return an
`Output`. `go_looking` is the spec's GoLooking(s) for s = this server.

``servers`` are the spec's ``Server``: every server votes, may lead, and counts in a quorum (the spec models no
observers, and zabref has none: spec/README.md says why).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any, NoReturn

from mypy_extensions import trait

from zabref.core.packets import QuorumPacket, ServerState
from zabref.core.types import (
    NO_SERVER,
    LearnerPhase,
    Output,
    Persistent,
    Txn,
    ZabState,
)
from zabref.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["CoreState", "SPEC_VARIABLES"]

#: Spec variable name -> key of `CoreState.variables()`. Every per-server variable of spec/Zab.tla except ``msgs`` (the
#: runtime's connections) and the checking-only ``proposed`` and ``committed``.
SPEC_VARIABLES = {
    "history": "history",
    "acceptedEpoch": "accepted_epoch",
    "currentEpoch": "current_epoch",
    "state": "state",
    "zabState": "zab_state",
    "leader": "leader",
    "lastCommitted": "last_committed",
    "stagedHistory": "staged_history",
    "newEpoch": "new_epoch",
    "learnerPhase": "learner_phase",
    "learnerLastZxid": "learner_last_zxid",
    "ackIndex": "ack_index",
}


@trait
class CoreState:
    """One server's Zab variables (spec/Zab.tla's VARIABLES, this server's slice) and shared helpers."""

    def __init__(self, sid: int, servers: Iterable[int], persistent: Persistent | None = None, *,
                 logs_late: bool = False) -> None:
        """A server that has just started (the spec's Init, or Crash(i) when ``persistent`` was read from disk).

        ``servers`` are every server's sid (the spec's Server), this one's included. ``logs_late`` is the spec's
        constant LeaderLogsLate: as leader, this server sends a PROPOSAL before its own log write of it is durable
        (`zabref.core.leader`).
        """
        members = tuple(sorted(set(servers)))
        if sid not in members:
            raise LocalProtocolError(f"server {sid} is not among the servers {list(members)}")
        if NO_SERVER in members:
            raise LocalProtocolError(f"sid {NO_SERVER} is reserved for the spec's NoServer")
        p = persistent if persistent is not None else Persistent()
        self.sid = sid
        self.servers = members
        self.logs_late = logs_late
        # ---- every server, persistent (on disk; survive a crash) ----
        self.history: list[Txn] = list(p.history)  # the log of accepted transactions: <<[zxid, value], ...>>
        self.accepted_epoch = p.accepted_epoch  # the epoch of the last LEADERINFO (NEWEPOCH) accepted
        self.current_epoch = p.current_epoch  # the epoch of the last NEWLEADER accepted
        # ---- every server, volatile (lost in a crash) ----
        self.state = ServerState.LOOKING  # LOOKING, FOLLOWING or LEADING
        self.zab_state = ZabState.ELECTION  # ELECTION, DISCOVERY, SYNCHRONIZATION or BROADCAST
        self.leader = NO_SERVER  # whom a FOLLOWING server follows; the leader itself when LEADING; else NoServer
        self.last_committed = 0  # history[0:last_committed] is what this server has delivered
        # ---- follower, volatile ----
        self.staged_history: list[Txn] = []  # the history a syncing follower builds; applied atomically on NEWLEADER
        # ---- leader, volatile ----
        self.new_epoch = 0  # the epoch the leader proposes (ZooKeeper's Leader.epoch)
        self.learner_phase: dict[int, LearnerPhase] = {}  # learnerPhase[sid][f]: what this leader knows of f
        self.learner_last_zxid: dict[int, int] = {}  # learnerLastZxid[sid][f]: the lastZxid f reported in ACKEPOCH
        self.ack_index: dict[int, int] = {}  # ackIndex[sid][f]: the longest prefix of our history f has ACKed
        self._forget_all_learners()

    # ---------------------------------------------------------------------------------------------- reading

    def variables(self, *, histories: bool = True) -> dict[str, Any]:
        """Every spec-visible variable of this server as plain values (zxids as ints, enums as the spec's strings).

        Keys are `SPEC_VARIABLES`' values; per-learner maps are keyed by every server's sid, as the spec's functions
        over ``Server`` are. ``histories=False`` leaves out ``history`` and ``staged_history`` (whose copies cost
        O(history): the action log takes them from the core itself, as changes).
        """
        out = {
            "accepted_epoch": self.accepted_epoch,
            "current_epoch": self.current_epoch,
            "state": self.state.name,
            "zab_state": str(self.zab_state),
            "leader": self.leader,
            "last_committed": self.last_committed,
            "new_epoch": self.new_epoch,
            "learner_phase": {f: str(p) for f, p in self.learner_phase.items()},
            "learner_last_zxid": dict(self.learner_last_zxid),
            "ack_index": dict(self.ack_index),
        }
        if histories:
            out["history"] = [(t.zxid, t.value) for t in self.history]
            out["staged_history"] = [(t.zxid, t.value) for t in self.staged_history]
        return out

    def persistent(self) -> Persistent:
        """The persistent variables as this core believes they are on disk (every `Output.persist` applied)."""
        return Persistent(tuple(self.history), self.accepted_epoch, self.current_epoch)

    @property
    def last_zxid(self) -> int:
        """LastZxid(history): the zxid of the last transaction, 0 (the spec's <<0, 0>>) when the history is empty."""
        return self.history[-1].zxid if self.history else 0

    def is_quorum(self, members: Iterable[int]) -> bool:
        """IsQuorum(S) == 2 * Cardinality(S) > N."""
        return 2 * len(set(members) & set(self.servers)) > len(self.servers)

    # ---------------------------------------------------------------------------------------------- helpers

    @staticmethod
    def index_of(history: list[Txn], zxid: int) -> int:
        """IndexOf(h, z): the 1-based position of zxid z in history h, 0 when absent (zxids strictly increase). The
        last transaction first: a COMMIT or ACK names it at one write in flight; then where z is if the zxids after it
        follow one another, as one leader's of an epoch do: an ACK or COMMIT of many in flight names one of those. The
        search that finds any other calls its key a score of times in a long history."""
        n = len(history)
        if n:
            last = history[n - 1].zxid
            if last == zxid:
                return n
            k = n - (last - zxid)
            if 0 < k < n and history[k - 1].zxid == zxid:
                return k
        k = bisect.bisect_left(history, zxid, key=lambda t: t.zxid)
        return k + 1 if k < len(history) and history[k].zxid == zxid else 0

    def _deliver(self, k: int) -> tuple[Txn, ...]:
        """Deliver(s, h, k): set lastCommitted to k and return the transactions that became delivered."""
        newly = tuple(self.history[self.last_committed : k])
        self.last_committed = k
        return newly

    def _reject(self, peer: int, packet: QuorumPacket, why: str) -> NoReturn:
        raise RemoteProtocolError(
            peer,
            f"{packet.type.name}(zxid {packet.zxid:#x}) not allowed: {why} "
            f"[server {self.sid} is {self.state.name}/{self.zab_state}, leader {self.leader}]",
        )

    def _misuse(self, action: str, why: str) -> NoReturn:
        raise LocalProtocolError(
            f"{action} not enabled on server {self.sid}: {why} "
            f"[{self.state.name}/{self.zab_state}, leader {self.leader}]"
        )

    def _forget_learner(self, f: int) -> None:
        self.learner_phase[f] = LearnerPhase.NONE
        self.learner_last_zxid[f] = 0
        self.ack_index[f] = 0

    def _forget_all_learners(self) -> None:
        for f in self.servers:
            self._forget_learner(f)

    # ---------------------------------------------------------------------------------------------- GoLooking

    def go_looking(self) -> Output:
        """GoLooking(s) for s = this server: back to leader election (seed 000: "any failures or timeouts will cause
        the server to go back to leader election").

        Every connection closes (the spec empties msgs[s][*] and msgs[*][s]; peers forget this server as a learner
        when the runtime reports the closed connection to them with `connection_closed`). Persistent state and
        last_committed are untouched; a crash also loses last_committed.
        """
        self.state = ServerState.LOOKING
        self.zab_state = ZabState.ELECTION
        self.leader = NO_SERVER
        self.staged_history = []
        self.new_epoch = 0
        self._forget_all_learners()
        others = sorted(set(self.servers) - {self.sid})
        return Output(close=tuple(others), role=ServerState.LOOKING)
