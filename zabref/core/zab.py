"""The deterministic Zab core: spec/Zab.tla's actions, one method each, for one server, with no I/O.

Theory of operation
-------------------
`ZabCore` is the protocol state machine of one server, in the sans-IO style of etcd-io/raft and h11: it holds the
spec's per-server variables (`zabref.core.state`) and takes one event at a time through one entry point per kind of
input --

* ``receive(peer, packet)`` -- a QuorumPacket from a peer, routed by packet type and role to the handler named after
  the spec action (``LEADERINFO`` at a follower -> ``follower_process_leaderinfo``); a packet no spec action takes in
  the current state raises `RemoteProtocolError` naming the peer, with nothing changed, and the runtime closes that
  connection (then reports it with ``connection_closed``);
* ``client_request(value)`` -- ClientRequest;
* ``become_leader()`` / ``become_follower(leader)`` -- this server's election decision (BecomeLeader,
  BecomeFollower), which `zabref.core.node` takes from FastLeaderElection;
* ``follower_timeout()`` / ``leader_timeout()`` -- FollowerTimeout, LeaderTimeout; the runtime decides when;
* ``connection_closed(peer)`` -- the TCP connection to peer closed: a leader forgets that learner, as the spec's
  GoLooking(peer) does at every other server. A follower whose leader connection closed changes nothing here: the
  spec models that as a separate FollowerTimeout step, which the runtime fires.

-- and returns an `Output`: storage operations to make durable first, then packets to send, transactions delivered,
connections to close, the new role. Crash(i) is not a method: it is a process restart, ``ZabCore(sid, servers,
Persistent.from_storage(storage))``, which keeps exactly history, acceptedEpoch and currentEpoch.

The handlers live in `zabref.core.leader` (LeaderProcess*, ClientRequest, LeaderTimeout) and `zabref.core.follower`
(FollowerProcess*, FollowerTimeout); docs/core.md has the table from spec action to method.
"""

from __future__ import annotations

from collections.abc import Callable

from zabref.core import payloads
from zabref.core.follower import FollowerActions
from zabref.core.leader import LeaderActions, sync_packets
from zabref.core.packets import (
    MAX_EPOCH,
    PROTOCOL_VERSION,
    LearnerInfo,
    PacketType,
    QuorumPacket,
    ServerState,
    make_zxid,
)
from zabref.core.state import SPEC_VARIABLES
from zabref.core.types import (
    EMPTY,
    FORWARDING_PHASES,
    NO_SERVER,
    AppendTxns,
    LearnerPhase,
    Output,
    Persistent,
    PersistOp,
    ReplaceHistory,
    SetAcceptedEpoch,
    SetCurrentEpoch,
    TruncateHistory,
    Txn,
    ZabState,
    apply_persist,
)
from zabref.errors import RemoteProtocolError

__all__ = [
    "ZabCore",
    "Output",
    "Persistent",
    "Txn",
    "ZabState",
    "LearnerPhase",
    "FORWARDING_PHASES",
    "NO_SERVER",
    "PersistOp",
    "AppendTxns",
    "TruncateHistory",
    "ReplaceHistory",
    "SetAcceptedEpoch",
    "SetCurrentEpoch",
    "apply_persist",
    "sync_packets",
    "SPEC_VARIABLES",
    "HANDLERS",
    "SPEC_ACTIONS",
]

Handler = Callable[["ZabCore", int, QuorumPacket], Output]


class ZabCore(LeaderActions, FollowerActions):
    """One Zab server's protocol state machine. See the module docstring; the fields are `CoreState`'s."""

    # ---------------------------------------------------------------------------------------------- packets

    def receive(self, peer: int, packet: QuorumPacket) -> Output:
        """A packet from ``peer``, taken from the head of that connection in order (seed 000: "servers must process
        packets in the order that they are received")."""
        return self.handler_for(peer, packet)(self, peer, packet)

    def handler_for(self, peer: int, packet: QuorumPacket) -> Handler:
        """The handler (named after its spec action) that `receive` runs for ``packet`` from ``peer`` now;
        RemoteProtocolError, with nothing changed, when no spec action takes it in this state."""
        if peer == self.sid or peer not in self.servers:
            raise RemoteProtocolError(peer, f"server {self.sid}: {peer} is not another server of {list(self.servers)}")
        if packet.zxid < 0:
            self._reject(peer, packet, "a zxid is never negative")
        handlers = HANDLERS.get(self.state, {})
        handler = handlers.get(packet.type)
        if handler is None:
            takes = ", ".join(t.name for t in handlers) or "no packet"
            self._reject(peer, packet, f"a {self.state.name} server takes {takes}")
        if packet.type == PacketType.PROPOSAL and self.state == ServerState.FOLLOWING:
            # staged in sync (FollowerProcessPROPOSALInSync), logged in broadcast (FollowerProcessPROPOSAL)
            in_sync = self.zab_state == ZabState.SYNCHRONIZATION
            return ZabCore.follower_process_proposal_in_sync if in_sync else ZabCore.follower_process_proposal
        if packet.type == PacketType.COMMIT and self.state == ServerState.FOLLOWING:
            # taken without a change in sync (FollowerProcessCOMMITInSync), delivered in broadcast
            in_sync = self.zab_state == ZabState.SYNCHRONIZATION
            return ZabCore.follower_process_commit_in_sync if in_sync else ZabCore.follower_process_commit
        if packet.type == PacketType.ACK and self.state == ServerState.LEADING:
            # of NEWLEADER while learner j is in phase NEWLEADER (LeaderProcessACKNEWLEADER), else of a proposal
            newleader = self.learner_phase[peer] == LearnerPhase.NEWLEADER
            return ZabCore.leader_process_acknewleader if newleader else ZabCore.leader_process_ack
        return handler

    def held(self, peer: int, packet: QuorumPacket) -> bool:
        """Whether ``packet`` from ``peer`` waits at the head of its connection: no spec action takes it in this
        state, but one will after this server's role or zabState changes -- FOLLOWERINFO at a server that does not
        lead (LeaderProcessFOLLOWERINFO needs LEADING), ACKEPOCH(-1) at a leader in DISCOVERY (`acks_again`). The
        carrier keeps it and offers it again after the change (`zabref.core.node`, ``Effects.deferred``)."""
        if packet.type == PacketType.FOLLOWERINFO:
            return self.state != ServerState.LEADING
        return self.acks_again(peer, packet)

    # ---------------------------------------------------------------------------------------------- election

    def become_leader(self) -> Output:
        """BecomeLeader(i) -- seed 000, phase 1, step 1: this server's election decided that it leads.

        It starts phase 1 proposing an epoch above its acceptedEpoch and waits for FOLLOWERINFO. Whether the
        decision was wise is the election's business (spec/Zab.tla: any decision is allowed; Zab's discovery phase
        keeps safety).
        """
        if self.state != ServerState.LOOKING:
            self._misuse("BecomeLeader", "only a LOOKING server takes an election decision")
        if self.accepted_epoch >= MAX_EPOCH:
            self._misuse("BecomeLeader", "acceptedEpoch leaves no epoch above it")
        self.state = ServerState.LEADING
        self.zab_state = ZabState.DISCOVERY
        self.leader = self.sid
        self.new_epoch = self.accepted_epoch + 1
        if self.logs_late:  # its whole history is durable: it logged it before it led (ackIndex[i][i] = Len)
            self.ack_index[self.sid] = len(self.history)
        return Output(role=ServerState.LEADING)

    def become_follower(self, leader: int) -> Output:
        """BecomeFollower(i, j) -- seed 000, phase 1, step 2: this server's election decided to follow ``leader``.

        It connects to the leader and sends FOLLOWERINFO(acceptedEpoch << 32, LearnerInfo) at once, whatever the
        leader is doing: a leader that does not lead yet takes the packet when it does (`zabref.core.node` keeps it
        waiting), and one that already leads an established epoch takes a joining follower through the phases.
        """
        if self.state != ServerState.LOOKING:
            self._misuse("BecomeFollower", "only a LOOKING server takes an election decision")
        if leader == self.sid or leader not in self.servers:
            self._misuse("BecomeFollower", f"{leader} is not another server of {list(self.servers)}")
        return self._follow(leader)

    def _follow(self, leader: int) -> Output:
        self.state = ServerState.FOLLOWING
        self.zab_state = ZabState.DISCOVERY
        self.leader = leader
        info = payloads.encode_followerinfo_data(LearnerInfo(self.sid, PROTOCOL_VERSION))
        followerinfo = QuorumPacket(PacketType.FOLLOWERINFO, make_zxid(self.accepted_epoch, 0), info)
        return Output(send=((leader, followerinfo),), role=ServerState.FOLLOWING)

    # ---------------------------------------------------------------------------------------------- connections

    def connection_closed(self, peer: int) -> Output:
        """The connection to ``peer`` closed. GoLooking(peer), as seen here: forget peer as a learner
        (learnerPhase, learnerLastZxid, ackIndex back to NONE, <<0, 0>>, 0). Nothing else changes; in particular a
        follower whose leader went away stays FOLLOWING until `zabref.core.node` fires `follower_timeout`."""
        if peer in self.servers and peer != self.sid:
            self._forget_learner(peer)
        return EMPTY


#: The dispatch table of `ZabCore.receive`: role -> packet type -> handler. Data, so docs and tests can read it.
HANDLERS: dict[ServerState, dict[PacketType, Handler]] = {
    ServerState.LOOKING: {},
    ServerState.FOLLOWING: {
        PacketType.LEADERINFO: ZabCore.follower_process_leaderinfo,
        PacketType.DIFF: ZabCore.follower_process_diff,
        PacketType.TRUNC: ZabCore.follower_process_trunc,
        PacketType.SNAP: ZabCore.follower_process_snap,
        PacketType.PROPOSAL: ZabCore.follower_process_proposal,  # or ..._in_sync: ZabCore.handler_for
        PacketType.NEWLEADER: ZabCore.follower_process_newleader,
        PacketType.UPTODATE: ZabCore.follower_process_uptodate,
        PacketType.COMMIT: ZabCore.follower_process_commit,  # or ..._in_sync: ZabCore.handler_for
    },
    ServerState.LEADING: {
        PacketType.FOLLOWERINFO: ZabCore.leader_process_followerinfo,
        PacketType.ACKEPOCH: ZabCore.leader_process_ackepoch,
        PacketType.ACK: ZabCore.leader_process_ack,  # or leader_process_acknewleader: ZabCore.handler_for
    },
}

#: Every entry point that is a spec action: method name -> the action's name in spec/Zab.tla (tests/test_core.py
#: checks it against Next). `zabref.core.node` names the actions it takes with it (the action log, docs/validation.md).
SPEC_ACTIONS: dict[str, str] = {
    "become_leader": "BecomeLeader",
    "become_follower": "BecomeFollower",
    "leader_process_followerinfo": "LeaderProcessFOLLOWERINFO",
    "follower_process_leaderinfo": "FollowerProcessLEADERINFO",
    "leader_process_ackepoch": "LeaderProcessACKEPOCH",
    "follower_process_diff": "FollowerProcessDIFF",
    "follower_process_trunc": "FollowerProcessTRUNC",
    "follower_process_snap": "FollowerProcessSNAP",
    "follower_process_proposal_in_sync": "FollowerProcessPROPOSALInSync",
    "follower_process_commit_in_sync": "FollowerProcessCOMMITInSync",
    "follower_process_newleader": "FollowerProcessNEWLEADER",
    "leader_process_acknewleader": "LeaderProcessACKNEWLEADER",
    "follower_process_uptodate": "FollowerProcessUPTODATE",
    "client_request": "ClientRequest",
    "follower_process_proposal": "FollowerProcessPROPOSAL",
    "leader_process_ack": "LeaderProcessACK",
    "leader_own_ack": "LeaderOwnACK",
    "follower_process_commit": "FollowerProcessCOMMIT",
    "follower_timeout": "FollowerTimeout",
    "leader_timeout": "LeaderTimeout",
}
