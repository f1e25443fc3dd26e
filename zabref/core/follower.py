"""The follower's side of Zab: one method per follower action of spec/Zab.tla, beside the spec text it mirrors.

Theory of operation
-------------------
A follower talks to one leader at a time (seed 000: "a follower will only connect to a single leader at a time") and
processes its packets in order:

* DISCOVERY -- LEADERINFO(e): accept e (durably) and answer ACKEPOCH, or go back to election if e is stale;
* SYNCHRONIZATION -- DIFF, TRUNC or SNAP, then PROPOSALs (a committed one followed by its COMMIT), all *staged* in
  ``staged_history``: nothing reaches the disk until NEWLEADER(e), which applies the staged history and
  currentEpoch = e atomically and answers ACK;
* BROADCAST -- PROPOSAL is logged (durably) and ACKed; COMMIT and UPTODATE deliver up to their zxid.

"Atomically" on disk: `_history_ops` turns the change from ``history`` to ``staged_history`` into ONE storage
operation that a crash cannot cut in half -- an append of the new tail (a crash leaves a prefix of the new history,
which is a prefix of the leader's), a truncation, or a whole replacement by rename. currentEpoch is written after the
history, never before: a server whose currentEpoch says e must hold epoch e's history, or its election vote
(currentEpoch, lastZxid, sid) would claim transactions the new leader skipped.

"""

from __future__ import annotations

import bisect

from mypy_extensions import trait

from zabref.core import payloads, zktxn
from zabref.core.packets import PacketType, QuorumPacket, ServerState, make_zxid, zxid_counter, zxid_epoch
from zabref.core.state import CoreState
from zabref.core.types import (
    AppendTxns,
    Output,
    PersistOp,
    ReplaceHistory,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    TruncateHistory,
    Txn,
    ZabState,
    check_history,
)
from zabref.errors import CodecError

__all__ = ["FollowerActions"]


def _history_ops(old: list[Txn], new: list[Txn]) -> list[PersistOp]:
    """One crash-atomic storage operation that turns history ``old`` into ``new`` (none if they are equal)."""
    if new == old:
        return []
    if new[: len(old)] == old:
        return [AppendTxns(tuple(new[len(old) :]))]
    if old[: len(new)] == new:
        return [TruncateHistory(new[-1].zxid if new else 0)]
    return [ReplaceHistory(tuple(new))]


def _commit_point_in(new: list[Txn], old: list[Txn], committed: int) -> int:
    """lastCommitted as a position in the history ``new`` that replaces ``old``, whose first ``committed``
    transactions were delivered. The spec keeps it unchanged, and in every state it reaches that is the same
    position: DIFF and TRUNC keep the committed prefix, and its SNAP carries the leader's whole history, of which
    that prefix is a prefix. A SNAP whose history starts with a base (`zktxn.SNAPSHOT`: a ZooKeeper leader's tree, or
    a zabref leader's history that starts with one; spec/README.md, departure 15) may be shorter than what was
    delivered, and its positions are not ours: the commit point is then the transactions of ``new`` up to the last
    delivered zxid -- none when the base lies above it, so that UPTODATE delivers the base and what follows."""
    if not committed:
        return 0
    c = old[committed - 1].zxid
    if len(new) >= committed and new[committed - 1].zxid == c:
        return committed
    return bisect.bisect_right(new, c, key=lambda t: t.zxid)


@trait
class FollowerActions(CoreState):
    """The spec's Follower* actions and FollowerTimeout, for a server whose ``state`` is FOLLOWING."""

    def _require(self, j: int, packet: QuorumPacket, phase: ZabState) -> None:
        """state[i] = FOLLOWING /\\ leader[i] = j /\\ zabState[i] = phase; SyncingFrom(i, j) for SYNCHRONIZATION."""
        if self.state != ServerState.FOLLOWING:
            self._reject(j, packet, "only a FOLLOWING server takes it")
        if self.leader != j:
            self._reject(j, packet, f"server {j} is not this follower's leader ({self.leader})")
        if self.zab_state != phase:
            self._reject(j, packet, f"a follower takes it only in {phase}")

    # ------------------------------------------------------------------------------------------ phase 1

    def follower_process_leaderinfo(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessLEADERINFO(i, j) -- seed 000, phase 1, step 4.

        e > acceptedEpoch: accept e (on disk before answering) and send ACKEPOCH(lastZxid, currentEpoch);
        e = acceptedEpoch: send ACKEPOCH(lastZxid, -1) ("already acknowledged"; the leader still needs lastZxid);
        e < acceptedEpoch: go back to leader election.
        """
        self._require(j, packet, ZabState.DISCOVERY)
        if packet.type != PacketType.LEADERINFO:
            self._reject(j, packet, "expected LEADERINFO")
        if zxid_counter(packet.zxid) != 0:
            self._reject(j, packet, "LEADERINFO's zxid must be e << 32")
        try:
            payloads.decode_leaderinfo_data(packet.data)
        except CodecError as err:
            self._reject(j, packet, str(err))
        e = zxid_epoch(packet.zxid)
        if e < self.accepted_epoch:
            return self.go_looking()
        persist: tuple[PersistOp, ...] = ()
        their = self.current_epoch if e > self.accepted_epoch else payloads.ACKEPOCH_ALREADY_ACKNOWLEDGED
        if e > self.accepted_epoch:
            persist = (SetAcceptedEpoch(e),)
        self.accepted_epoch = e
        self.zab_state = ZabState.SYNCHRONIZATION
        ackepoch = QuorumPacket(PacketType.ACKEPOCH, self.last_zxid, payloads.encode_ackepoch_data(their))
        return Output(persist=persist, send=((j, ackepoch),))

    # ------------------------------------------------------------------------------------------ phase 2

    def follower_process_diff(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessDIFF(i, j) -- seed 000, phase 2, step 1 (DIFF): the follower's history is a prefix of the
        leader's; stage it as it is."""
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.DIFF:
            self._reject(j, packet, "expected DIFF")
        self.staged_history = list(self.history)
        return Output()

    def follower_process_trunc(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessTRUNC(i, j) -- seed 000, phase 2, step 1 (TRUNC(truncZxid)): stage the history without
        every transaction after truncZxid (the ones the leader skipped)."""
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.TRUNC:
            self._reject(j, packet, "expected TRUNC")
        self.staged_history = [t for t in self.history if t.zxid <= packet.zxid]
        return Output()

    def follower_process_snap(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessSNAP(i, j) -- seed 000, phase 2, step 1 (SNAP): a state transfer; the packet carries the
        leader's whole history, which is staged in place of ours. Its zxid is the leader's last (zabref's), or a
        ZooKeeper leader's last processed zxid, which the history need not show (its new epoch's ``<<e, 0>>``, a
        transaction that left no node of its own). A ZooKeeper leader's tree of its clients' nodes is staged as one
        base transaction (`zktxn.SNAPSHOT`, `payloads.decode_snap_data`)."""
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.SNAP:
            self._reject(j, packet, "expected SNAP")
        try:
            snapshot = list(check_history(payloads.decode_snap_data(packet.data, packet.zxid), "SNAP history"))
        except (CodecError, ValueError) as e:
            self._reject(j, packet, str(e))
        if packet.zxid < (snapshot[-1].zxid if snapshot else 0):
            self._reject(j, packet, "SNAP's zxid precedes the last zxid of the history it carries")
        self.staged_history = snapshot
        return Output()

    def follower_process_proposal_in_sync(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessPROPOSALInSync(i, j) -- seed 000, phase 2, step 2: "the follower syncs with the leader, but
        doesn't modify its state until it receives NEWLEADER": the PROPOSAL is staged, not logged, not ACKed. One
        that a staged base already holds (`_in_base`) is read and left out."""
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type == PacketType.PROPOSAL and self._in_base(packet.zxid):
            self._proposal_value(j, packet)
            return Output()
        txn = self._proposal(j, packet, self.staged_history)
        self.staged_history.append(txn)
        return Output()

    def follower_process_commit_in_sync(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessCOMMITInSync(i, j): a COMMIT of the sync follows the PROPOSAL of the same zxid (the
        leader's SyncPackets, ZooKeeper's LearnerHandler); it changes nothing, since UPTODATE carries the commit
        point. A COMMIT anywhere else in a sync is a protocol error, but for one of a transaction that a staged base
        already holds (`_in_base`)."""
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.COMMIT:
            self._reject(j, packet, "expected COMMIT")
        if self._in_base(packet.zxid):
            return Output()
        if not self.staged_history or self.staged_history[-1].zxid != packet.zxid:
            last = self.staged_history[-1].zxid if self.staged_history else 0
            self._reject(j, packet, f"a COMMIT of a sync follows the PROPOSAL it names; the last staged is {last:#x}")
        return Output()

    def _in_base(self, zxid: int) -> bool:
        """Whether the sync staged a base alone (a ZooKeeper leader's SNAP of its clients' nodes, `zktxn.SNAPSHOT`)
        whose zxid is at or above ``zxid``. ZooKeeper's leader serializes its tree while it goes on applying
        transactions (a fuzzy snapshot, under the SNAP's zxid read before) and then forwards its outstanding and
        to-be-applied proposals above the zxid its sync started from (`Leader.startForwarding`), so a PROPOSAL and
        COMMIT of a transaction the snapshot holds may follow (3.9.5 in a random mixed run: SNAP(0x40000021a), then
        PROPOSAL(0x40000021a)). ZooKeeper's learner logs it and applies it again; here the base holds it already. No
        leader of the spec sends one, and a zabref leader does not."""
        staged = self.staged_history
        return len(staged) == 1 and staged[0].value[:1] == zktxn.SNAPSHOT and 0 < zxid <= staged[0].zxid

    def _proposal(self, j: int, packet: QuorumPacket, after: list[Txn]) -> Txn:
        """The transaction a PROPOSAL carries, which must follow ``after``."""
        if packet.type != PacketType.PROPOSAL:
            self._reject(j, packet, "expected PROPOSAL")
        value = self._proposal_value(j, packet)
        last = after[-1].zxid if after else 0
        if zxid_counter(packet.zxid) == 0 or packet.zxid <= last:
            self._reject(j, packet, f"a proposal's zxid must have a counter above 0 and follow {last:#x}")
        return Txn(packet.zxid, value)

    def _proposal_value(self, j: int, packet: QuorumPacket) -> bytes:
        """The value a PROPOSAL's data carries; bad bytes are the connection's error."""
        try:
            return payloads.decode_proposal_data(packet.zxid, packet.data)
        except CodecError as e:
            self._reject(j, packet, str(e))

    def follower_process_newleader(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessNEWLEADER(i, j) -- seed 000, phase 2, step 2.

        Atomically apply the staged history, set currentEpoch = e (both durable, history first), answer
        ACK(e << 32). From here on the follower logs and ACKs proposals.
        """
        self._require(j, packet, ZabState.SYNCHRONIZATION)
        if packet.type != PacketType.NEWLEADER:
            self._reject(j, packet, "expected NEWLEADER")
        e = zxid_epoch(packet.zxid)
        if zxid_counter(packet.zxid) != 0 or e != self.accepted_epoch:
            self._reject(j, packet, f"NEWLEADER must carry the accepted epoch {self.accepted_epoch} << 32")
        persist = [*_history_ops(self.history, self.staged_history), SetCurrentEpoch(e)]
        self.last_committed = _commit_point_in(self.staged_history, self.history, self.last_committed)
        self.history = self.staged_history
        self.current_epoch = e
        self.staged_history = []
        self.zab_state = ZabState.BROADCAST
        return Output(persist=tuple(persist), send=((j, QuorumPacket(PacketType.ACK, make_zxid(e, 0))),))

    def follower_process_uptodate(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessUPTODATE(i, j) -- seed 000, phase 2, step 4: deliver up to the leader's commit point and
        start serving clients. If the history goes beyond that point, ACK each transaction of this epoch after it, in
        order (`UptodateAcks`): the sync's transactions were never ACKed one by one, a leader that synced this
        follower in BROADCAST would not count them until a later proposal (spec/README.md, "Liveness"), and a
        ZooKeeper leader counts an ACK for its own proposal only (docs/zookeeper.md, "A zabref server in a ZooKeeper
        ensemble", 4)."""
        self._require(j, packet, ZabState.BROADCAST)
        if packet.type != PacketType.UPTODATE:
            self._reject(j, packet, "expected UPTODATE")
        deliver = self._deliver_upto(j, packet, allow_zero=True)
        k = self.index_of(self.history, packet.zxid)
        # the transactions of older epochs: a history holds its epochs in order
        older = bisect.bisect_left(self.history, make_zxid(self.current_epoch, 0), key=lambda t: t.zxid)
        acks = tuple((j, QuorumPacket(PacketType.ACK, t.zxid)) for t in self.history[max(k, older):])
        return Output(deliver=deliver, send=acks)

    # ------------------------------------------------------------------------------------------ phase 3

    def follower_process_proposal(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessPROPOSAL(i, j) -- seed 000, phase 3, step 2: "a follower will log and sync proposals to
        disk and send ACK(zxid)" -- the log write is in ``persist``, durable before the ACK leaves."""
        self._require(j, packet, ZabState.BROADCAST)
        txn = self._proposal(j, packet, self.history)
        self.history.append(txn)
        return Output(persist=(AppendTxns((txn,)),), send=((j, QuorumPacket(PacketType.ACK, txn.zxid)),))

    def follower_process_commit(self, j: int, packet: QuorumPacket) -> Output:
        """FollowerProcessCOMMIT(i, j) -- seed 000, phase 3, step 3: deliver everything in the history up to zxid."""
        self._require(j, packet, ZabState.BROADCAST)
        if packet.type != PacketType.COMMIT:
            self._reject(j, packet, "expected COMMIT")
        return Output(deliver=self._deliver_upto(j, packet, allow_zero=False))

    def _deliver_upto(self, j: int, packet: QuorumPacket, *, allow_zero: bool) -> tuple[Txn, ...]:
        """k == IndexOf(history[i], zxid); IF k > lastCommitted[i] THEN Deliver(i, history[i], k).

        The spec leaves an unknown zxid as a no-op, but no reachable state sends one: the leader only names zxids of
        its history, all of which reached this follower (sync, then forwarded PROPOSALs) before the COMMIT or
        UPTODATE. So an unknown zxid is a faulty peer here. UPTODATE(0) is the commit point of an empty history.
        """
        k = self.index_of(self.history, packet.zxid)
        if k == 0 and not (allow_zero and packet.zxid == 0):
            self._reject(j, packet, f"zxid {packet.zxid:#x} is not in this follower's history")
        return self._deliver(k) if k > self.last_committed else ()

    # ------------------------------------------------------------------------------------------ failures

    def follower_timeout(self) -> Output:
        """FollowerTimeout(i) -- seed 000, phase 3: "the follower will continue to support a leader as long as it
        receives proposals or pings within a timeout interval"; after that, or when the connection to the leader is
        lost, the runtime fires this and the follower goes back to election."""
        if self.state != ServerState.FOLLOWING:
            self._misuse("FollowerTimeout", "only a FOLLOWING server times out on its leader")
        return self.go_looking()
