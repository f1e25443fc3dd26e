"""The leader's side of Zab: one method per leader action of spec/Zab.tla, beside the spec text it mirrors.

Theory of operation
-------------------
A leader runs the three phases of seed 000 against each learner connection separately and against the quorum as a
whole. ``learner_phase[f]`` records how far the connection to learner f has got (named after the last packet
exchanged); the quorum transitions fire when a packet completes a quorum (the leader counts itself):

* phase 1 -- FOLLOWERINFO from a quorum fixes the epoch ``new_epoch`` above every acceptedEpoch seen and sends
  LEADERINFO; ACKEPOCH from a quorum makes the leader set currentEpoch and start phase 2;
* phase 2 -- to each learner that ACKed the epoch, the sync chosen by `sync_packets` (the spec's SyncPackets: DIFF,
  SNAP or TRUNC, then the missing PROPOSALs) and NEWLEADER; the ACK of NEWLEADER from a quorum moves the leader to
  BROADCAST, delivers its whole history and sends UPTODATE;
* phase 3 -- client_request logs a transaction and sends PROPOSAL to the forwarding list; ACKs advance
  ``ack_index`` and the longest prefix ACKed by a quorum is delivered and announced with a COMMIT for each
  transaction newly committed, in order.

A learner that arrives late goes through the same steps, answered at once (LEADERINFO, the sync, UPTODATE).

Each handler first checks the spec action's enabling condition and decodes the packet, raising with nothing changed;
only then does it change fields and return an `Output` whose ``persist`` must be durable before ``send`` leaves.
"""

from __future__ import annotations

from mypy_extensions import trait

from zabref.core import payloads, zktxn
from zabref.core.packets import (
    MAX_COUNTER,
    MAX_EPOCH,
    PROTOCOL_VERSION,
    PacketType,
    QuorumPacket,
    ServerState,
    make_zxid,
    zxid_counter,
    zxid_epoch,
)
from zabref.core.state import CoreState
from zabref.core.types import (
    FORWARDING_PHASES,
    AppendTxns,
    LearnerPhase,
    Output,
    OutputBuilder,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    Txn,
    ZabState,
)
from zabref.errors import CodecError, LocalProtocolError

__all__ = ["LeaderActions", "sync_packets"]


def sync_packets(history: list[Txn], last_committed: int, z: int, commits: int) -> list[QuorumPacket]:
    """SyncPackets(h, c, z, s): what a leader with history h and commit point c sends, before NEWLEADER, to a learner
    whose last zxid is z (seed 000, phase 2, step 1), when the first s (``commits``) transactions of h are ones it
    has committed or commits at its NEWLEADER quorum:

    * DIFF(lastCommittedZxid) alone when z is the leader's last zxid;
    * SNAP(leader's last zxid) carrying the whole history when z precedes everything in it;
    * DIFF then the PROPOSALs after z when z appears in h;
    * otherwise the learner has transactions the leader skipped: TRUNC(t), t the last zxid of h below z (0 when
      none), then the PROPOSALs after t;
    * and before DIFF and TRUNC(t), when z is above the first s (a leader in BROADCAST, the learner holding a
      proposal it has not committed): TRUNC(h[s]) and the PROPOSALs after it, so that whatever the learner has not
      committed comes again on this connection, as ZooKeeper's leader syncs (LearnerHandler.syncFollower's TRUNC
      to maxCommittedLog, Leader.startForwarding's outstanding proposals): a ZooKeeper follower commits only what
      came on its connection (docs/zookeeper.md, item 8).

    Each PROPOSAL of one of the first s transactions is followed by its COMMIT, as ZooKeeper's LearnerHandler sends
    its committedLog (a ZooKeeper follower keeps a PROPOSAL of its sync that no COMMIT follows pending, and exits when
    a later COMMIT names another transaction); the follower takes it as FollowerProcessCOMMITInSync.
    """
    n = len(history)

    def zxid_at(k: int) -> int:
        """The zxid of the first k transactions' last (0 for none)."""
        return history[k - 1].zxid if k else 0

    last = zxid_at(n)
    diff = QuorumPacket(PacketType.DIFF, zxid_at(last_committed))

    def proposals(after: int) -> list[QuorumPacket]:
        out = []
        for k, t in enumerate(history[after:], start=after + 1):
            out.append(QuorumPacket(PacketType.PROPOSAL, t.zxid, payloads.encode_proposal_data(t.zxid, t.value)))
            if k <= commits:
                out.append(QuorumPacket(PacketType.COMMIT, t.zxid))
        return out

    if n > 0 and z < history[0].zxid:
        return [QuorumPacket(PacketType.SNAP, last, payloads.encode_snap_data(history))]
    if commits < n and z > zxid_at(commits):
        return [QuorumPacket(PacketType.TRUNC, zxid_at(commits)), *proposals(commits)]
    if z == last:
        return [diff]
    pos = CoreState.index_of(history, z)
    if pos > 0:
        return [diff, *proposals(pos)]
    t = sum(1 for txn in history if txn.zxid < z)  # zxids increase: the largest k with h[k].zxid < z
    return [QuorumPacket(PacketType.TRUNC, zxid_at(t)), *proposals(t)]


@trait
class LeaderActions(CoreState):
    """The spec's Leader* actions and ClientRequest, for a server whose ``state`` is LEADING."""

    def _require_leading(self, j: int, packet: QuorumPacket) -> None:
        if self.state != ServerState.LEADING:
            self._reject(j, packet, "only a LEADING server takes it")

    def _forwarding(self) -> list[int]:
        """{f \\in Server : learnerPhase[i][f] \\in ForwardingPhases}, in sid order."""
        return [f for f in self.servers if self.learner_phase[f] in FORWARDING_PHASES]

    def _learner_info(self, j: int, packet: QuorumPacket) -> None:
        """Check the LearnerInfo {serverid, protocolVersion, configVersion} in FOLLOWERINFO's data, as ZooKeeper's
        LearnerHandler does: a learner whose configuration is later than this leader's is refused ("Follower is ahead
        of the leader"; zabref's configuration version is always 0)."""
        try:
            info = payloads.decode_followerinfo_data(packet.data)
        except CodecError as e:
            self._reject(j, packet, str(e))
        if info.serverid != j:
            self._reject(j, packet, f"LearnerInfo names server {info.serverid}, the connection is from {j}")
        if info.protocol_version < PROTOCOL_VERSION:
            self._reject(j, packet, f"protocol version {info.protocol_version:#x} predates Zab 1.0")
        if info.config_version > 0:
            self._reject(j, packet, f"the learner's configuration version {info.config_version:#x} is later than "
                                    "this leader's (0)")

    def _in_phase(self, phase: LearnerPhase) -> set[int]:
        return {f for f in self.servers if self.learner_phase[f] == phase}

    # ------------------------------------------------------------------------------------------ phase 1

    def leader_process_followerinfo(self, j: int, packet: QuorumPacket) -> Output:
        """LeaderProcessFOLLOWERINFO(i, j) -- seed 000, phase 1, step 3.

        Until a quorum has connected, the proposed epoch grows above every acceptedEpoch seen; with the quorum, the
        leader accepts that epoch and sends LEADERINFO(e) to every waiting learner. Once the epoch is chosen
        (acceptedEpoch = newEpoch), a late learner gets LEADERINFO at once.
        """
        self._require_leading(j, packet)
        if packet.type != PacketType.FOLLOWERINFO:
            self._reject(j, packet, "expected FOLLOWERINFO")
        if self.learner_phase[j] != LearnerPhase.NONE:
            self._reject(j, packet, f"learner {j} already sent FOLLOWERINFO (phase {self.learner_phase[j]})")
        if zxid_counter(packet.zxid) != 0:
            self._reject(j, packet, "FOLLOWERINFO's zxid must be acceptedEpoch << 32")
        self._learner_info(j, packet)
        if zxid_epoch(packet.zxid) >= MAX_EPOCH:
            self._reject(j, packet, "acceptedEpoch leaves no epoch above it")

        out = OutputBuilder()
        if self.accepted_epoch == self.new_epoch:
            self.learner_phase[j] = LearnerPhase.LEADERINFO
            out.send.append((j, self._leaderinfo(self.new_epoch)))
            return out.build()
        e = max(self.new_epoch, zxid_epoch(packet.zxid) + 1)
        waiting = self._in_phase(LearnerPhase.FOLLOWERINFO) | {j}
        self.new_epoch = e
        if self.is_quorum(waiting | {self.sid}):
            self.accepted_epoch = e
            out.persist.append(SetAcceptedEpoch(e))
            for f in sorted(waiting):
                self.learner_phase[f] = LearnerPhase.LEADERINFO
                out.send.append((f, self._leaderinfo(e)))
        else:
            self.learner_phase[j] = LearnerPhase.FOLLOWERINFO
        return out.build()

    @staticmethod
    def _leaderinfo(e: int) -> QuorumPacket:
        return QuorumPacket(PacketType.LEADERINFO, make_zxid(e, 0), payloads.encode_leaderinfo_data(PROTOCOL_VERSION))

    def leader_process_ackepoch(self, j: int, packet: QuorumPacket) -> Output:
        """LeaderProcessACKEPOCH(i, j) -- seed 000, phase 1, steps 5-7, and phase 2, step 1.

        If j is more up to date than the leader (a greater currentEpoch, or the same and a greater lastZxid), the
        leader goes back to election (step 7). Once a quorum has acknowledged the epoch, the leader sets currentEpoch
        and sends each acknowledged learner its sync packets, then NEWLEADER(e). A later ACKEPOCH is synced at once.
        An ACKEPOCH carrying -1 does not count toward the quorum: it is not taken in DISCOVERY at all (`acks_again`;
        ZooKeeper's Leader.waitForEpochAck), and is synced at once afterwards.
        """
        self._require_leading(j, packet)
        if packet.type != PacketType.ACKEPOCH:
            self._reject(j, packet, "expected ACKEPOCH")
        if self.learner_phase[j] != LearnerPhase.LEADERINFO:
            self._reject(j, packet, f"no LEADERINFO awaits an answer from {j} (phase {self.learner_phase[j]})")
        try:
            their_epoch = payloads.decode_ackepoch_data(packet.data)
        except CodecError as e:
            self._reject(j, packet, str(e))
        if self.acks_again(j, packet):
            raise LocalProtocolError(f"server {self.sid}: ACKEPOCH(-1) from {j} taken in DISCOVERY: it waits until "
                                     "the epoch is established (LeaderProcessACKEPOCH is not enabled)")
        their_zxid = packet.zxid
        behind = (
            their_epoch == payloads.ACKEPOCH_ALREADY_ACKNOWLEDGED
            or their_epoch < self.current_epoch
            or (their_epoch == self.current_epoch and their_zxid <= self.last_zxid)
        )
        if not behind:
            return self.go_looking()

        out = OutputBuilder()
        acked = self._in_phase(LearnerPhase.ACKEPOCH) | {j}
        self.learner_last_zxid[j] = their_zxid
        if self.zab_state == ZabState.DISCOVERY and self.is_quorum(acked | {self.sid}):
            self.current_epoch = self.new_epoch
            out.persist.append(SetCurrentEpoch(self.new_epoch))
            self.zab_state = ZabState.SYNCHRONIZATION
            for f in sorted(acked):
                self.learner_phase[f] = LearnerPhase.NEWLEADER
                out.send.extend((f, p) for p in self._sync(f))
        elif self.zab_state == ZabState.DISCOVERY:
            self.learner_phase[j] = LearnerPhase.ACKEPOCH
        else:
            self.learner_phase[j] = LearnerPhase.NEWLEADER
            out.send.extend((j, p) for p in self._sync(j))
        return out.build()

    def _sync(self, f: int) -> list[QuorumPacket]:
        """sync(f): SyncPackets for learner f, then NEWLEADER(e << 32). The sync commits what a leader in BROADCAST
        has committed; a leader in its own synchronization commits its whole history at its NEWLEADER quorum."""
        upto = self.last_committed if self.zab_state == ZabState.BROADCAST else len(self.history)
        packets = sync_packets(self.history, self.last_committed, self.learner_last_zxid[f], upto)
        return [*packets, QuorumPacket(PacketType.NEWLEADER, make_zxid(self.new_epoch, 0))]

    # ------------------------------------------------------------------------------------------ phase 2

    def leader_process_acknewleader(self, j: int, packet: QuorumPacket) -> Output:
        """LeaderProcessACKNEWLEADER(i, j) -- seed 000, phase 2, step 3.

        With a quorum of ACKs of NEWLEADER the leader takes leadership of the epoch: it delivers its whole history
        and queues UPTODATE(its last zxid) to the learners that ACKed. A learner that ACKs later gets
        UPTODATE(commit point) at once.
        """
        self._require_leading(j, packet)
        if packet.type != PacketType.ACK:
            self._reject(j, packet, "expected the ACK of NEWLEADER")
        if self.learner_phase[j] != LearnerPhase.NEWLEADER:
            self._reject(j, packet, f"no NEWLEADER awaits an ACK from {j} (phase {self.learner_phase[j]})")
        if packet.zxid != make_zxid(self.current_epoch, 0):
            self._reject(j, packet, f"the ACK of NEWLEADER must carry {make_zxid(self.current_epoch, 0):#x}")

        out = OutputBuilder()
        acked = self._in_phase(LearnerPhase.ACKNEWLEADER) | {j}
        if self.zab_state == ZabState.SYNCHRONIZATION and self.is_quorum(acked | {self.sid}):
            self.zab_state = ZabState.BROADCAST
            out.deliver.extend(self._deliver(len(self.history)))
            uptodate = QuorumPacket(PacketType.UPTODATE, self.last_zxid)
            for f in sorted(acked):
                self.learner_phase[f] = LearnerPhase.UPTODATE
                out.send.append((f, uptodate))
        elif self.zab_state == ZabState.SYNCHRONIZATION:
            self.learner_phase[j] = LearnerPhase.ACKNEWLEADER
        else:
            self.learner_phase[j] = LearnerPhase.UPTODATE
            committed = self.history[self.last_committed - 1].zxid if self.last_committed else 0
            out.send.append((j, QuorumPacket(PacketType.UPTODATE, committed)))
        return out.build()

    # ------------------------------------------------------------------------------------------ phase 3

    def client_request(self, value: bytes) -> Output:
        """ClientRequest(i) -- seed 000, phase 3, step 1.

        The leader assigns the next zxid of its epoch, logs the transaction and queues PROPOSAL(zxid, value) to every
        learner on its forwarding list. The leader's own log write is in ``persist``, so it is durable before any
        PROPOSAL leaves: that is why the leader may count itself in every quorum of ACKs -- unless it logs late
        (LeaderLogsLate): then the write is in ``late``, durable after the PROPOSALs leave, and the leader counts
        itself for it only from its `leader_own_ack` (LeaderOwnACK) on. ``value`` is a client's
        text, or a ZooKeeper client's write prepared as ZooKeeper's transaction (`zktxn.FOREIGN`, then the
        transaction of zxid `next_zxid`: `zabref.core.zkprep`).
        """
        if self.state != ServerState.LEADING or self.zab_state != ZabState.BROADCAST:
            self._misuse("ClientRequest", "only a LEADING server in BROADCAST takes client requests")
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"client_request: value must be bytes, not {type(value).__name__}")
        zxid = self.next_zxid()
        if value[:1] == zktxn.FOREIGN and not zktxn.carries_zxid(value, zxid):
            self._misuse("ClientRequest", "a value that begins with byte 0xff is a ZooKeeper transaction "
                                          f"(zktxn.FOREIGN), and this one's zxid is not the next, {zxid:#x}")
        txn = Txn(zxid, bytes(value))
        self.history.append(txn)
        proposal = QuorumPacket(PacketType.PROPOSAL, txn.zxid, payloads.encode_proposal_data(txn.zxid, txn.value))
        sends = tuple((f, proposal) for f in self._forwarding())
        if self.logs_late:
            return Output(send=sends, late=(AppendTxns((txn,)),))
        return Output(persist=(AppendTxns((txn,)),), send=sends)

    def next_zxid(self) -> int:
        """The zxid `client_request` assigns next: counter c + 1 of the current epoch, where
        c == Cardinality({k : history[k].zxid[1] = currentEpoch}). Those are the history's tail, numbered 1..c by
        this leader, so c is the last zxid's counter when it is of this epoch: O(1), not a walk of the history
        (the walk made every write slower as the log grew: docs/performance.md)."""
        last = self.history[-1].zxid if self.history else 0
        c = zxid_counter(last) if zxid_epoch(last) == self.current_epoch else 0
        if c >= MAX_COUNTER:
            self._misuse("ClientRequest", f"epoch {self.current_epoch} has used every zxid counter")
        return make_zxid(self.current_epoch, c + 1)

    def leader_process_ack(self, j: int, packet: QuorumPacket) -> Output:
        """LeaderProcessACK(i, j) -- seed 000, phase 3, step 3.

        ACK(zxid) from j: j holds our history up to zxid. When a quorum (the leader counts itself; when it logs late,
        only for what it has logged: CountsSelf) has ACKed a longer prefix than is committed, the leader delivers it
        and queues one COMMIT for each transaction it newly commits, in order, to its forwarding list (seed 000: a
        COMMIT per acknowledged proposal; to the follower a COMMIT(zxid) still means "everything up to zxid").
        """
        self._require_leading(j, packet)
        if packet.type != PacketType.ACK:
            self._reject(j, packet, "expected ACK")
        if self.zab_state != ZabState.BROADCAST:
            self._reject(j, packet, "the leader takes ACKs of proposals only in BROADCAST")
        if self.learner_phase[j] not in (LearnerPhase.ACKNEWLEADER, LearnerPhase.UPTODATE):
            self._reject(j, packet, f"learner {j} has not ACKed NEWLEADER (phase {self.learner_phase[j]})")
        if zxid_counter(packet.zxid) == 0:
            self._reject(j, packet, "an ACK of a proposal has a counter above 0")

        self.ack_index[j] = max(self.ack_index[j], self.index_of(self.history, packet.zxid))
        return self._commit_to(self._quorum_point())

    def _quorum_point(self) -> int:
        """QuorumPoint: the largest k such that the servers whose ack reaches k are a quorum -- this leader counted
        up to what it has logged (CountsSelf: all of its history, or with LeaderLogsLate ackIndex[i][i]) and each
        learner f up to ack_index[f]."""
        need = len(self.servers) // 2  # others beside the leader; one more where the leader does not count
        others = sorted((self.ack_index[f] for f in self.servers if f != self.sid), reverse=True)
        logged = self.ack_index[self.sid] if self.logs_late else len(self.history)
        with_self = min(logged, others[need - 1]) if need else logged
        without = others[need] if need < len(others) else 0
        return max(with_self, without)

    def _commit_to(self, c: int) -> Output:
        """CommitTo(i, c): when c is past the commit point, deliver up to c and queue a COMMIT for each transaction
        newly committed; else nothing."""
        if c <= self.last_committed:
            return Output()
        # Commits(h, lastCommitted, c): one COMMIT per transaction newly committed, in order (a ZooKeeper
        # follower applies a COMMIT only to the oldest transaction it has not applied)
        commits = [QuorumPacket(PacketType.COMMIT, t.zxid) for t in self.history[self.last_committed:c]]
        delivered = self._deliver(c)
        return Output(send=tuple((f, commit) for f in self._forwarding() for commit in commits), deliver=delivered)

    def leader_own_ack(self, k: int) -> Output:
        """LeaderOwnACK(i) -- with LeaderLogsLate only: this leader's log write of its history up to k is durable
        (the runtime reports it after the write's sync, as ZooKeeper's SyncRequestProcessor hands a flushed batch to
        its AckRequestProcessor). It counts itself for them now and, as `leader_process_ack`, commits what a quorum
        has and queues a COMMIT for each transaction newly committed."""
        if not self.logs_late:
            self._misuse("LeaderOwnACK", "this server logs before it proposes (LeaderLogsLate is off)")
        if self.state != ServerState.LEADING or self.zab_state != ZabState.BROADCAST:
            self._misuse("LeaderOwnACK", "only a LEADING server in BROADCAST counts its own log writes")
        if not self.ack_index[self.sid] < k <= len(self.history):
            self._misuse("LeaderOwnACK", f"{k} is not past what it logged ({self.ack_index[self.sid]}) and within its "
                                         f"history ({len(self.history)})")
        self.ack_index[self.sid] = k
        return self._commit_to(self._quorum_point())

    # ------------------------------------------------------------------------------------------ failures

    def acks_again(self, j: int, packet: QuorumPacket) -> bool:
        """Whether ``packet`` from learner j is an ACKEPOCH(-1) that must wait for the end of this leader's
        discovery (LeaderProcessACKEPOCH's enabling condition; HeldAck(i, j) once it heads j's connection): j had
        accepted the epoch before, from this leader or another leader of the same epoch, so its answer does not
        count toward the quorum that establishes the epoch (spec/README.md, "Where the spec and ZooKeeper 3.8
        differ", 1)."""
        if (packet.type != PacketType.ACKEPOCH or self.state != ServerState.LEADING
                or self.zab_state != ZabState.DISCOVERY or self.learner_phase.get(j) != LearnerPhase.LEADERINFO):
            return False
        try:
            return payloads.decode_ackepoch_data(packet.data) == payloads.ACKEPOCH_ALREADY_ACKNOWLEDGED
        except CodecError:
            return False  # not an ACKEPOCH this server could take: the handler refuses it

    def counted(self, f: int, head: QuorumPacket | None = None) -> bool:
        """Counted(i, f): whether learner f keeps this leader alive -- in DISCOVERY every connected learner whose
        ACKEPOCH(-1) is not held (``head``: the packet at the head of f's connection, if any, `acks_again`), later
        only those syncing or synced (NEWLEADER, ACKNEWLEADER, UPTODATE). A learner that connects and rejects the
        epoch (it accepted a greater one) never gets that far, however often it comes back, nor does one that can
        only answer -1 (spec/README.md, "Liveness")."""
        phase = self.learner_phase.get(f, LearnerPhase.NONE)
        if self.zab_state == ZabState.DISCOVERY:
            return phase != LearnerPhase.NONE and not (head is not None and self.acks_again(f, head))
        return phase in (LearnerPhase.NEWLEADER, LearnerPhase.ACKNEWLEADER, LearnerPhase.UPTODATE)

    def leader_timeout(self) -> Output:
        """LeaderTimeout(i) -- seed 000, phase 3: "the leader will remain active as long as there is a quorum of
        followers"; when it stops hearing from one it gives up leadership and goes back to election. Which silence
        counts is `zabref.core.node`'s decision (the spec allows it at any time, as a fault while learners that are
        `counted` make a quorum)."""
        if self.state != ServerState.LEADING:
            self._misuse("LeaderTimeout", "only a LEADING server gives up leadership")
        return self.go_looking()
