"""The observer's side of Zab: a learner that never votes, never leads and is never counted in a quorum.

Theory of operation
-------------------
Observers are an implementation feature: spec/Zab.tla does not model them (spec/README.md, departure 9), so no
method here is a spec action, and each docstring says so. They follow seed 000's packet table: OBSERVERINFO(16)
"the observer has accepted up to lastZxid" and INFORM(8) "deliver the data (only used with observers)".

An observer (a server whose own sid is among the core's ``observers``) learns the leader from election
notifications (`zabref.election.ObserverElection`) and then, through `join_leader`:

* ``observe`` -- state OBSERVING, zabState SYNCHRONIZATION (there is no discovery: the observer does not vote on the
  epoch), and OBSERVERINFO(lastZxid, LearnerInfo) to the leader;
* the sync exactly as a follower takes it -- DIFF / TRUNC / SNAP and PROPOSALs staged, nothing on disk -- through the
  follower's handlers, which accept OBSERVING (`zabref.core_follower.LEARNING`);
* NEWLEADER(e): apply the staged history and the epoch atomically (acceptedEpoch, the history, currentEpoch, in that
  order on disk), answer ACK(e << 32), enter BROADCAST. A NEWLEADER of an epoch older than the one the observer
  already accepted means a deposed leader: the observer goes back to election;
* UPTODATE(z): deliver up to z; INFORM(zxid, value): log the transaction (durable first: it is in ``persist``) and
  deliver it -- the leader sends INFORM only for committed transactions, so there is nothing to ACK.

The leader's side (`zabref.core_leader`: ``leader_take_observerinfo``, ``leader_take_observer_ack``) syncs an
observer only once its epoch is established (BROADCAST), and only with its *committed* prefix, so an observer's
history never holds an uncommitted transaction and every INFORM extends it by exactly one committed transaction.
"""

from __future__ import annotations

from zabref import wire
from zabref.core_follower import FollowerActions, _history_ops
from zabref.core_types import NO_SERVER, AppendTxns, Output, PersistOp, SetAcceptedEpoch, SetCurrentEpoch, ZabState
from zabref.packets import (
    PROTOCOL_VERSION,
    LearnerInfo,
    PacketType,
    QuorumPacket,
    ServerState,
    make_zxid,
    zxid_counter,
    zxid_epoch,
)

__all__ = ["ObserverActions"]


class ObserverActions(FollowerActions):
    """An observer's handlers, for a server whose ``state`` is OBSERVING. None of them is a spec action."""

    def _require_observing(self, j: int, packet: QuorumPacket, phase: ZabState) -> None:
        if self.state != ServerState.OBSERVING:
            self._reject(j, packet, "only an OBSERVING server takes it")
        if self.leader != j:
            self._reject(j, packet, f"server {j} is not this observer's leader ({self.leader})")
        if self.zab_state != phase:
            self._reject(j, packet, f"an observer takes it only in {phase}")

    def _observe(self, leader: int) -> Output:
        """Start observing ``leader`` (no spec action): OBSERVING/SYNCHRONIZATION, send OBSERVERINFO(lastZxid)."""
        if leader == NO_SERVER or leader not in self.servers:
            self._misuse("JoinLeader", f"an observer follows a participant: {leader} is not in {list(self.servers)}")
        self.state = ServerState.OBSERVING
        self.zab_state = ZabState.SYNCHRONIZATION
        self.leader = leader
        self.staged_history = []
        info = wire.encode_followerinfo_data(LearnerInfo(PROTOCOL_VERSION, self.sid))
        hello = QuorumPacket(PacketType.OBSERVERINFO, self.last_zxid, info)
        return Output(send=((leader, hello),), role=ServerState.OBSERVING)

    # ------------------------------------------------------------------------------------------ sync

    def observer_process_diff(self, j: int, packet: QuorumPacket) -> Output:
        """DIFF at an observer. The spec has no such action (no observers); the same step as FollowerProcessDIFF."""
        self._require_observing(j, packet, ZabState.SYNCHRONIZATION)
        return self.follower_process_diff(j, packet)

    def observer_process_trunc(self, j: int, packet: QuorumPacket) -> Output:
        """TRUNC at an observer. The spec has no such action (no observers); the same step as FollowerProcessTRUNC."""
        self._require_observing(j, packet, ZabState.SYNCHRONIZATION)
        return self.follower_process_trunc(j, packet)

    def observer_process_snap(self, j: int, packet: QuorumPacket) -> Output:
        """SNAP at an observer. The spec has no such action (no observers); the same step as FollowerProcessSNAP."""
        self._require_observing(j, packet, ZabState.SYNCHRONIZATION)
        return self.follower_process_snap(j, packet)

    def observer_process_proposal_in_sync(self, j: int, packet: QuorumPacket) -> Output:
        """A PROPOSAL of the sync at an observer: staged. The spec has no such action (no observers); the same step
        as FollowerProcessPROPOSALInSync. After the sync an observer gets INFORM, never PROPOSAL."""
        self._require_observing(j, packet, ZabState.SYNCHRONIZATION)
        return self.follower_process_proposal_in_sync(j, packet)

    def observer_process_newleader(self, j: int, packet: QuorumPacket) -> Output:
        """NEWLEADER(e) at an observer. The spec has no such action (no observers).

        Like FollowerProcessNEWLEADER, but an observer never took LEADERINFO: it accepts e here. e below its
        acceptedEpoch means a deposed leader: back to election, nothing applied. Otherwise, durably and in this
        order, acceptedEpoch = e, the staged history (one crash-atomic operation), currentEpoch = e; then ACK(e << 32).
        """
        self._require_observing(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.NEWLEADER:
            self._reject(j, packet, "expected NEWLEADER")
        if zxid_counter(packet.zxid) != 0:
            self._reject(j, packet, "NEWLEADER's zxid must be e << 32")
        e = zxid_epoch(packet.zxid)
        if e < self.accepted_epoch:
            return self.go_looking()
        persist: list[PersistOp] = [SetAcceptedEpoch(e)] if e > self.accepted_epoch else []
        persist += _history_ops(self.history, self.staged_history)
        if e > self.current_epoch:
            persist.append(SetCurrentEpoch(e))
        self.accepted_epoch = self.current_epoch = e
        self.history = self.staged_history
        self.staged_history = []
        self.zab_state = ZabState.BROADCAST
        return Output(persist=tuple(persist), send=((j, QuorumPacket(PacketType.ACK, make_zxid(e, 0))),))

    def observer_process_uptodate(self, j: int, packet: QuorumPacket) -> Output:
        """UPTODATE(z) at an observer: deliver up to z. The spec has no such action (no observers); the same step as
        FollowerProcessUPTODATE."""
        self._require_observing(j, packet, ZabState.BROADCAST)
        return self.follower_process_uptodate(j, packet)

    # ------------------------------------------------------------------------------------------ broadcast

    def observer_process_inform(self, j: int, packet: QuorumPacket) -> Output:
        """INFORM(zxid, value) at an observer -- seed 000: "deliver the data (only used with observers)". The spec has
        no such action (no observers).

        The leader informs only committed transactions, so the observer logs it (durable before anything else
        happens: it is in ``persist``) and delivers its whole history; it sends nothing back.
        """
        self._require_observing(j, packet, ZabState.BROADCAST)
        txn = self._proposal(j, packet, self.history, PacketType.INFORM)
        self.history.append(txn)
        return Output(persist=(AppendTxns((txn,)),), deliver=self._deliver(len(self.history)))

    # ------------------------------------------------------------------------------------------ failures

    def observer_timeout(self) -> Output:
        """An observer lost its leader (silence or a closed connection): back to election. The spec has no such
        action (no observers); it is FollowerTimeout's counterpart."""
        if self.state != ServerState.OBSERVING:
            self._misuse("ObserverTimeout", "only an OBSERVING server times out on its leader")
        return self.go_looking()
