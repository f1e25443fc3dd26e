"""One server's every decision, with no I/O: the Zab core, FastLeaderElection, timers, keepalives and clients.

Theory of operation
-------------------
A `Node` is what a zabref server *decides*; `zabref.runtime.server` (real sockets, a real disk) and `conformance.sim` (a
simulated network, clock and disk) only carry its inputs in and its effects out. Both modes of a real server --
normal (inputs delivered as they arrive, ticks from the clock) and control (the conformance driver delivers inputs
and advances a logical clock) -- run this same code; so does every simulated server. One entry point per kind of
input, each returning the `Effects` to carry out:

* ``start(now)`` -- the process started (a fresh server, or a restart after a crash): FastLeaderElection's first
  round (spec/FastLeaderElection.tla ``Init``/``Restart``);
* ``packet(peer, packet, now)`` -- a QuorumPacket from a peer's connection, in arrival order. PING keeps the
  connection alive (a follower answers its leader's), and so does a ZooKeeper learner's ACK of UPTODATE, which
  changes nothing (``_acks_uptodate``); REQUEST and SYNC are a sync's (`zabref.core.clients`, spec/ZabSync.tla),
  or REQUEST a learner's forwarded write (ClientRequest, `zabref.core.zkclients`); a leader answers a ZooKeeper
  learner's REVALIDATE (``_revalidate``: no session is a global one); every other type goes to the Zab core, except
  a packet the core holds
  (``ZabCore.held``: FOLLOWERINFO at a server that does not lead, ACKEPOCH(-1) at a leader in DISCOVERY -- no spec
  action takes it yet), which waits (``Effects.deferred``: the carrier keeps it at the head of its
  connection and offers it again once ``Effects.unblock`` says the node's role or zabState changed);
* ``connection_closed(peer, now)`` -- a quorum connection ended: a leader forgets that learner (the core's
  ``connection_closed``); a follower whose leader connection ended gives up at its next tick;
* ``notification(peer, n, now)`` -- an election notification; a `Decision` becomes the core's ``become_leader`` or
  ``become_follower(leader)`` (spec BecomeLeader / BecomeFollower);
* ``tick(now, votes_held)`` -- time passed. The only place timers live (`Timing`): the finalize wait and the resend
  of a LOOKING server's vote (when its vote and round did not change for a while: ZooKeeper's notTimeout, which
  doubles at each resend of a round; never while the carrier's senders still hold a notification, ``votes_held``:
  the spec's ``Quiet``, as far as a server can see it). A notification that changes neither does not restart the
  wait, as ZooKeeper's poll would: two servers of one round, one resending a worse vote that reaches the other just
  before its own timer, were otherwise silent to each other forever -- the worse vote never learns the better one, a
  livelock the simulator found twice, docs/simulation.md), a follower's silence limit
  (FollowerTimeout), a leader's PINGs and its quorum of responsive learners (LeaderTimeout), and clients waiting too
  long. A tick may come at any time -- the carrier ticks right after a connection closes, so that the follower
  reacts at once -- because every timer compares times, never counts ticks;
* ``client_submit(rid, value, now)``, ``client_sync(rid, now)``, ``forward_reply(rid, reply, now)`` and
  ``client_read(...)`` -- the client protocol: the leader runs ClientRequest; a follower forwards a write to its
  leader and answers once the transaction is delivered HERE (so that a later read here sees it), and sends a sync
  to its leader as REQUEST on the quorum connection;
* ``logged(serial, k, now)`` -- a leader that logs late (LeaderLogsLate): its carrier made the ``Effects.late``
  writes durable, up to history entry k, of the role ``serial`` names (``Effects.late_upto``): the spec's
  LeaderOwnACK, taken only while that role lasts;
* ``zk_write(rid, session, cxid, op, record, now)`` and ``zk_read(op, path)`` -- ZooKeeper's client protocol
  (`zabref.core.zkclients`): a write prepared as ZooKeeper's transaction at the leader, forwarded as REQUEST by a
  follower, answered when delivered here; a read of the tree of what was delivered here.

Silence. ``now`` is a time in seconds on any clock the carrier likes (a real server's loop clock, the driver's
logical clock, the simulator's); the node stamps ``heard[peer]`` when it takes a packet and compares with
``limit * tick_s``. `stalled(now)` says the carrier itself did not run for a while (a long fsync, a SIGSTOP): silence
is then counted from the end of the stall, so a server never blames its peers for its own pause.

The effects, and the order a carrier carries them out in (persistence first), are `zabref.core.effects`; the
client half of the node is `zabref.core.clients`.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from zabref.core import payloads, zktree
from zabref.core.clients import ClientRequests
from zabref.core.effects import Action, Effects, EffectsBuilder, Timing, refused
from zabref.core.election import FastLeaderElection, Step
from zabref.core.packets import Notification, PacketType, QuorumPacket, ServerState
from zabref.core.zab import SPEC_ACTIONS, LearnerPhase, Output, Persistent, ZabCore, ZabState
from zabref.core.zkclients import ZkClients
from zabref.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["Node", "DECISIONS_KEPT"]

#: The packets that start a follower's synchronization.
_SYNC_HEADS = frozenset({PacketType.DIFF, PacketType.TRUNC, PacketType.SNAP})

#: Election decisions a node remembers for inspection (the control socket's ``state``; the oldest are forgotten).
DECISIONS_KEPT = 1000


class Node(ClientRequests, ZkClients):
    """One server's decisions (module docstring). ``core`` and ``fle`` are its Zab and election state machines."""

    def __init__(self, sid: int, servers: tuple[int, ...], persistent: Persistent, timing: Timing, *,
                 logs_late: bool = False, zk_clients: bool = False) -> None:
        """``zk_clients``: this server serves ZooKeeper clients (`zabref.core.zkclients`: its delivered tree follows
        every delivery)."""
        self.sid = sid
        self.zk_clients = zk_clients
        self.timing = timing
        self.core = ZabCore(sid, servers, persistent, logs_late=logs_late)
        #: changes at every change of role: a late log write reported durable after the role it was made in ended
        #: (`logged`) is not this role's own ACK
        self.role_serial = 0
        self.fle = FastLeaderElection(sid, frozenset(servers))
        self.heard: dict[int, float] = {}  # when a packet of each peer was last taken
        self.role_since = 0.0
        self.stalled_until = 0.0
        self.leader_lost = False  # a follower's connection to its leader ended: give up at the next tick
        self.finalizing_since: float | None = None
        self.election_quiet_since = 0.0  # last change of vote or round, or resend, while LOOKING (the resend timer)
        self.resend_after = timing.limit(timing.resend_ticks)  # doubles at each resend of a round (notTimeout)
        self.learner_conns: set[int] = set()  # open quorum connections that learners opened to this server
        self.held: dict[int, QuorumPacket] = {}  # peer -> the packet deferred at the head of its connection
        self.outbound: set[int] = set()  # quorum connections this server opened (to its leader), open or opening
        self._waiting: dict[int, list[tuple[int, float]]] = {}  # zxid -> [(request id, deadline)]: until delivered
        self._waiting_zxids: list[int] = []  # a heap of _waiting's keys (and of keys since expired: skipped)
        self._forwarded: dict[int, float] = {}  # request id -> deadline: forwarded, the leader has not answered
        #: leader: per learner connection, PINGs sent on it and PINGs its learner sent back (a follower answers each
        #: of its leader's PINGs, in order): a reply counted here answers a PING at least that recent
        self.pings: dict[int, list[int]] = {}
        #: leader: the same for the PINGs that are steps of ZabSync's round (`payloads.PING_STEP`), which alone
        #: confirm its learners' syncs, as in the spec
        self.step_pings: dict[int, list[int]] = {}
        #: leader: syncs waiting for a quorum to confirm this leadership: (request id, commit point at arrival,
        #: learner -> the PINGs it must have answered, deadline)
        self._syncs: list[tuple[int, int, dict[int, int], float]] = []
        #: leader: its learners' syncs not answered yet, oldest first (ZabSync.tla's pendingSyncs): (learner, the
        #: zxid it waits to see committed, learner -> the step PINGs it must have answered)
        self.pending_syncs: deque[tuple[int, int, dict[int, int]]] = deque()
        #: follower: its clients' syncs sent to the leader, oldest first: (request id, deadline); None once expired
        self.follower_syncs: deque[tuple[int | None, float]] = deque()
        self.decisions: list[dict[str, Any]] = []  # the election's decisions (FLE's checking-only ``decisions``)
        #: follower: the commit point its leader's sync carried (its head, its COMMITs), for a ZooKeeper leader's
        #: UPTODATE(-1) (`_zookeeper_sync`)
        self.sync_commit = 0
        #: leader: the data tree of its history, for ZooKeeper clients' writes (forwarded by its followers, or its own)
        self.zk_tree = zktree.HistoryTree()
        #: the data tree of the transactions delivered here, for ZooKeeper clients' reads and answers (`ZkClients`)
        self.zk_applied = zktree.HistoryTree()
        #: ZooKeeper clients' writes waiting for their transaction: (session, cxid) -> (request id, deadline, the last
        #: zxid when it arrived: only a transaction above it answers it)
        self._zk_waiting: dict[tuple[int, int], tuple[int, float, int]] = {}

    # ------------------------------------------------------------------------------------------ inputs

    def start(self, now: float) -> Effects:
        """The process started: the first election round (FLE ``Init``; ``Restart`` after a crash)."""
        out = EffectsBuilder()
        self.role_since = self.election_quiet_since = now
        step = self.fle.start_election(self.core.last_zxid, self.core.current_epoch)
        self._fle_step(out, step, now)
        return out.build()

    def logged(self, serial: int, k: int, now: float) -> Effects:
        """The late log writes of role ``serial`` are durable up to history entry k (module docstring): LeaderOwnACK,
        when this server still leads in that role, in BROADCAST, and k is past what it counted; else nothing."""
        core = self.core
        out = EffectsBuilder()
        if (serial == self.role_serial and core.logs_late and core.state == ServerState.LEADING
                and core.zab_state == ZabState.BROADCAST and core.ack_index[self.sid] < k <= len(core.history)):
            self._core(out, core.leader_own_ack(k), now, "LeaderOwnACK", i=self.sid)
        return out.build()

    def packet(self, peer: int, packet: QuorumPacket, now: float, tag: int | None = None) -> Effects:
        """A quorum packet from ``peer``; RemoteProtocolError (nothing changed) when no spec action takes it.
        ``tag``: the carrier's id of the connection (recorded with the action, never used by the node)."""
        if packet.type == PacketType.PING:
            self.heard[peer] = now
            out = EffectsBuilder()
            core = self.core
            if core.state == ServerState.FOLLOWING and peer == core.leader:
                # FollowerProcessPING when it is a step of the sync's round. The answer echoes the PING's zxid, as
                # ZooKeeper's Learner.ping does; data: the sessions it touched (none here), never null: ZooKeeper's
                # LearnerHandler reads it
                out.send.append((peer, QuorumPacket(PacketType.PING, packet.zxid, b"")))
                if packet.zxid == payloads.PING_STEP:
                    out.actions.append(Action("ZabSync", "FollowerProcessPING", (("i", self.sid), ("j", peer)),
                                              packet, tag))
            elif core.state == ServerState.LEADING and peer in self.pings:
                self._ping_answered(peer, packet, out, tag)
            return out.build()
        if packet.type == PacketType.REQUEST:
            effects = self.leader_process_request(peer, packet, now, tag)
            self.heard[peer] = now
            return effects
        if packet.type == PacketType.REVALIDATE:
            effects = self._revalidate(peer, packet)
            self.heard[peer] = now
            return effects
        if packet.type == PacketType.SYNC:
            effects = self.follower_process_sync(peer, packet, tag)
            self.heard[peer] = now
            return effects
        if self._acks_uptodate(peer, packet):  # ZooKeeper's learner acknowledges UPTODATE: no spec action takes it
            self.heard[peer] = now
            return Effects()
        if self.core.state == ServerState.FOLLOWING and peer == self.core.leader:
            packet = self._zookeeper_sync(packet)
        if self.core.held(peer, packet):
            self.held[peer] = packet  # a learner whose ACKEPOCH(-1) waits does not keep a leader alive (Counted)
            return Effects(deferred=True)
        self.held.pop(peer, None)
        handler = self.core.handler_for(peer, packet)
        self.heard[peer] = now
        out = EffectsBuilder()
        before = self.core.zab_state
        self._core(out, handler(self.core, peer, packet), now, SPEC_ACTIONS[handler.__name__], packet, tag,
                   i=self.sid, j=peer)
        if self.core.zab_state != before:
            out.unblock = True  # e.g. the epoch is established: a held ACKEPOCH(-1) is synced now
        if self.core.state != ServerState.FOLLOWING:
            return out.build()
        if handler is ZabCore.follower_process_commit_in_sync:
            self.sync_commit = packet.zxid
        elif packet.type in _SYNC_HEADS:
            staged = self.core.staged_history
            # the leader's commit point as the sync's head says it: a DIFF names it (seed 000's lastCommittedZxid,
            # ZooKeeper's lastProcessedZxid) and a ZooKeeper leader's TRUNC too (LearnerHandler.syncFollower
            # truncates to maxCommittedLog or to a zxid of its committed log), when this follower holds it (else the
            # sync's COMMITs name it); a SNAP (ZooKeeper's: its applied tree) carries committed transactions only
            snap = packet.type == PacketType.SNAP
            self.sync_commit = (staged[-1].zxid if snap and staged
                                else packet.zxid if not snap and self.core.index_of(staged, packet.zxid) else 0)
        return out.build()

    def _zookeeper_sync(self, packet: QuorumPacket) -> QuorumPacket:
        """A ZooKeeper leader's UPTODATE in the spec's terms (spec/README.md, "What real ZooKeeper does"): ZooKeeper's
        carries zxid -1, the spec's (seed 004's) the leader's commit point, which is what the sync's head and COMMITs
        said (`sync_commit`). So UPTODATE(-1) in BROADCAST is FollowerProcessUPTODATE of that commit point; anything
        else is the packet itself, for the core to take or refuse."""
        if packet.type == PacketType.UPTODATE and packet.zxid == -1 and self.core.zab_state == ZabState.BROADCAST:
            return QuorumPacket(PacketType.UPTODATE, self.sync_commit, packet.data, packet.authinfo)
        return packet

    def _revalidate(self, peer: int, packet: QuorumPacket) -> Effects:
        """A ZooKeeper learner asks whether a client's session, reconnecting to it, is a global session
        (Learner.validateSession); a leader answers on the same connection (Leader.revalidateSession). A zabref
        leader holds no global session, so every session it is asked about is not one (a ZooKeeper leader says the
        same of a local session): the learner expires it and its client opens a new one. Not a step of the spec
        (sessions are not modelled); nothing of Zab's state changes."""
        core = self.core
        if core.state != ServerState.LEADING or peer not in self.pings:
            raise RemoteProtocolError(peer, f"server {self.sid}: REVALIDATE from {peer}, which is not a learner of "
                                            "this server's leadership")
        session, _ = payloads.decode_revalidate_data(packet.data)
        answer = QuorumPacket(PacketType.REVALIDATE, packet.zxid, payloads.encode_revalidate_answer(session, False))
        return Effects(send=((peer, answer),))

    def _acks_uptodate(self, peer: int, packet: QuorumPacket) -> bool:
        """Whether ``packet`` is a ZooKeeper learner's ACK(e << 32) of UPTODATE at its leader: ZooKeeper's
        Learner.syncWithLeader sends it after UPTODATE and Leader.processAck returns at once for a zxid whose counter
        is 0. Seed 000 and spec/Zab.tla have no such ACK (a zabref learner never sends it; spec/README.md, "What
        ZooKeeper does that the seeds do not say"), so the leader drops it as ZooKeeper's does, changing nothing: a
        stuttering step, like a PING. Any other ACK(e << 32) still goes to the core (the ACK of NEWLEADER)."""
        core = self.core
        return (packet.type == PacketType.ACK and core.state == ServerState.LEADING
                and packet.zxid == core.current_epoch << 32 and core.learner_phase.get(peer) == LearnerPhase.UPTODATE)

    def connection_opened(self, peer: int, inbound: bool) -> None:
        """A quorum connection with ``peer`` is up; ``inbound``: the peer opened it (a learner of this server)."""
        if inbound:
            self.learner_conns.add(peer)
            self.pings[peer] = [0, 0]
            self.step_pings[peer] = [0, 0]

    def connection_closed(self, peer: int, now: float, *, inbound: bool, tag: int | None = None) -> Effects:
        """A quorum connection with ``peer`` ended (the peer left, the network broke it, or bad input)."""
        out = EffectsBuilder()
        out.actions.append(Action("Zab", "ConnectionClosed", (("i", self.sid), ("j", peer)), None, tag))  # for the log
        if inbound:
            self.learner_conns.discard(peer)
            self.held.pop(peer, None)
            self.pings.pop(peer, None)
            self.step_pings.pop(peer, None)
            # SyncsDropped: the learner's own syncs go with its connection; a new connection is newer than any
            # waiting sync: one reply on it will do (Reconnects)
            self.pending_syncs = deque(s for s in self.pending_syncs if s[0] != peer)
            for marks in [s[2] for s in self._syncs] + [s[2] for s in self.pending_syncs]:
                if peer in marks:
                    marks[peer] = 1
            self._core(out, self.core.connection_closed(peer), now, None)
        else:
            self.outbound.discard(peer)
            if self.core.state == ServerState.FOLLOWING and peer == self.core.leader:
                self.leader_lost = True
        return out.build()

    def notification(self, peer: int, n: Notification, now: float) -> Effects:
        """An election notification from ``peer``; RemoteProtocolError for one no server sends."""
        out = EffectsBuilder()
        fle = self.fle
        before = (fle.logicalclock, fle.proposed_vote)
        try:
            action = fle.action_for(peer, n)
            step = fle.receive(peer, n)
        except LocalProtocolError:
            return out.build()  # e.g. before start: nothing to do with it
        if fle.state is ServerState.LOOKING and (fle.logicalclock, fle.proposed_vote) != before:
            self.election_quiet_since = now  # its vote went out again: the resend wait starts over (`_election_tick`)
        out.actions.append(Action("FLE", action, (("i", self.sid), ("j", peer))))
        self._fle_step(out, step, now)
        return out.build()

    def stalled(self, now: float) -> None:
        """The carrier did not run until ``now`` (module docstring: silence counts from here)."""
        self.stalled_until = max(self.stalled_until, now)

    def tick(self, now: float, votes_held: bool = False) -> Effects:
        """Time is ``now``: run every timer that is due (module docstring). ``votes_held``: the carrier's election
        senders still hold a notification not written to its peer (`_election_tick`)."""
        out = EffectsBuilder()
        self._expire_clients(out, now)
        self._zk_expire(out, now)
        core, t = self.core, self.timing
        if core.state == ServerState.LOOKING:
            self._election_tick(out, now, votes_held)
        elif core.state == ServerState.FOLLOWING:
            limit = t.limit(t.sync_limit if core.zab_state == ZabState.BROADCAST else t.init_limit)
            if self.leader_lost or self.silent(core.leader, now) > limit:
                self._core(out, core.follower_timeout(), now, "FollowerTimeout", i=self.sid)
        else:
            self._leader_tick(out, now)
        return out.build()

    # ------------------------------------------------------------------------------------------ reading

    @property
    def committed_zxid(self) -> int:
        """The zxid of the last delivered transaction (0 when none)."""
        core = self.core
        return core.history[core.last_committed - 1].zxid if core.last_committed else 0

    def silent(self, peer: int, now: float) -> float:
        """Seconds ``peer`` has been silent at ``now``, counted from this role's start and this server's stalls."""
        return now - max(self.heard.get(peer, self.role_since), self.role_since, self.stalled_until)

    def fle_variables(self) -> dict[str, Any]:
        """FastLeaderElection's variables of this server (spec/FastLeaderElection.tla), as plain values."""
        f = self.fle

        def vote(v: Any) -> Any:
            return None if v is None else {"leader": v.leader, "zxid": v.zxid, "epoch": v.epoch}

        def box(b: dict[int, Notification]) -> dict[str, Any]:
            return {str(s): {"state": n.state.name, "leader": n.leader, "zxid": n.zxid,
                             "electionEpoch": n.election_epoch, "peerEpoch": n.peer_epoch}
                    for s, n in sorted(b.items())}

        return {"state": f.state.name, "logicalclock": f.logicalclock, "proposedVote": vote(f.proposed_vote),
                "recvVotes": box(f.recv_votes), "outOfElection": box(f.out_of_election),
                "finalizing": f.finalizing}

    # ------------------------------------------------------------------------------------------ internals

    def _core(self, out: EffectsBuilder, output: Output, now: float, action: str | None,
              packet: QuorumPacket | None = None, tag: int | None = None, **params: int) -> None:
        """Take one core Output (spec action ``action``) into ``out``; react to a change of role."""
        if action is not None:
            out.actions.append(Action("Zab", action, tuple(params.items()), packet, tag))
        out.persist += output.persist
        if output.late:
            out.late += output.late
            out.late_upto = (self.role_serial, len(self.core.history))
        for peer in output.close:
            self.learner_conns.discard(peer)
            self.held.pop(peer, None)
            self.outbound.discard(peer)
        core = self.core
        for peer, packet in output.send:
            # A follower connects to its leader when it first sends to it (FOLLOWERINFO); a leader only answers on
            # the connections its learners opened.
            if core.state == ServerState.FOLLOWING and peer == core.leader and peer not in self.outbound:
                self.outbound.add(peer)
                out.dial.append(peer)
            out.send.append((peer, packet))
        out.deliver += output.deliver
        out.close += output.close
        if output.deliver:
            self._answer_delivered(out)
            self._zk_delivered(out)
            if self.pending_syncs:
                self._confirm_syncs(out)  # LeaderSendSYNC, after the COMMITs just sent
        if output.role is not None:
            out.role = output.role
            out.unblock = True
            self._role_changed(out, now)
        self._update_election_vote(out, action)

    def _update_election_vote(self, out: EffectsBuilder, action: str | None) -> None:
        """UpdateElectionVote (spec/FastLeaderElection.tla; ZooKeeper's QuorumPeer.updateElectionVote,
        ZOOKEEPER-1732): a leader once its NEWLEADER quorum is in (BROADCAST), a follower at UPTODATE (where
        ZooKeeper's Learner.syncWithLeader calls it: after its leader's quorum) -- the decided vote carries the epoch
        established, which every member of the ensemble then reports to a server that looks for a leader: a
        ZooKeeper server joins on a quorum of decided votes equal in leader and epoch."""
        core, fle = self.core, self.fle
        vote = fle.proposed_vote
        synced = (action == "FollowerProcessUPTODATE" if core.state == ServerState.FOLLOWING
                  else core.state == ServerState.LEADING and core.zab_state == ZabState.BROADCAST)
        if synced and fle.state is not ServerState.LOOKING and vote is not None and vote.epoch < core.current_epoch:
            fle.update_election_vote(core.current_epoch)
            out.actions.append(Action("FLE", "UpdateElectionVote", (("i", self.sid),)))

    def _role_changed(self, out: EffectsBuilder, now: float) -> None:
        self.role_since = now
        self.role_serial += 1
        self.heard.clear()
        self.leader_lost = False
        # A forwarded request waits for the answer of the leader it went to; once this server stops following that
        # leader, the answer can no longer come (its connection is gone), and nothing here knows the request's zxid:
        # the client learns now that the outcome is unknown, not when the forward's deadline runs out.
        for rid in list(self._forwarded):
            del self._forwarded[rid]
            out.answers.append((rid, refused(f"server {self.sid} stopped following before its leader answered the "
                                              "forwarded request: outcome unknown", False)))
        for rid, _, _, _ in self._syncs:  # a sync changes nothing: asking again is safe
            out.answers.append((rid, refused(f"leader {self.sid} stopped leading before a quorum confirmed the "
                                              "sync", True)))
        self._syncs = []
        self.pending_syncs.clear()  # its learners' connections close: their followers refuse those syncs
        for sync_rid, _ in self.follower_syncs:
            if sync_rid is not None:
                out.answers.append((sync_rid, refused(f"server {self.sid} stopped following before its leader "
                                                       "answered the sync", True)))
        self.follower_syncs.clear()
        self._zk_role_changed(out)
        if self.core.state == ServerState.LOOKING:  # GoLooking: a new election round (FLE StartElection)
            if self.fle.state is not ServerState.LOOKING:
                self.election_quiet_since = now
                self._fle_step(out, self.fle.start_election(self.core.last_zxid, self.core.current_epoch), now)

    def _fle_step(self, out: EffectsBuilder, step: Step, now: float) -> None:
        if step.action in ("StartElection", "Restart"):
            out.actions.append(Action("FLE", step.action, (("i", self.sid),)))
            self.resend_after = self.timing.limit(self.timing.resend_ticks)
        out.notify += step.sends
        if self.fle.finalizing:
            if self.finalizing_since is None:
                self.finalizing_since = now
        else:
            self.finalizing_since = None
        if step.decision is not None:
            d = step.decision
            self.decisions.append({"sid": self.sid, "round": d.round, "leader": d.leader,
                                   "quorum": sorted(d.quorum), "looking": sorted(d.looking)})
            del self.decisions[:-DECISIONS_KEPT]
            self._decide(out, d.leader, now)

    def elected(self, leader: int, now: float) -> Effects:
        """The election decided ``leader``: what `notification` does with a `Decision` (`_decide`), as one input.
        The edge check (conformance/replay/edges.py) takes a spec state's BecomeLeader and BecomeFollower here."""
        out = EffectsBuilder()
        self._decide(out, leader, now)
        return out.build()

    def _decide(self, out: EffectsBuilder, leader: int, now: float) -> None:
        """An election decision becomes BecomeLeader or BecomeFollower (the core refuses one it cannot take)."""
        core = self.core
        try:
            if leader == self.sid:
                self._core(out, core.become_leader(), now, "BecomeLeader", i=self.sid)
            else:
                self._core(out, core.become_follower(leader), now, "BecomeFollower", i=self.sid, j=leader)
        except LocalProtocolError:  # e.g. no epoch left above acceptedEpoch: look again, in the next round
            self._fle_step(out, self.fle.start_election(core.last_zxid, core.current_epoch), now)

    def _election_tick(self, out: EffectsBuilder, now: float, votes_held: bool) -> None:
        """FinalizeTimeout when the finalize wait is over; else ResendNotifications when the vote and round did not
        change for ``resend_after`` -- and nothing waits in the carrier's senders: the spec resends only when every
        channel of the server is empty (``Quiet``). A notification still queued for a peer not connected yet is one
        the spec has in its channel; resending would queue a copy behind it (a mixed run's election check caught
        that, two round-1 votes to a ZooKeeper server in one write). Then the wait starts again, not doubled: nothing
        was sent."""
        t = self.timing
        fle = self.fle
        if fle.finalizing:
            if self.finalizing_since is not None and now - self.finalizing_since >= t.limit(t.finalize_ticks):
                out.actions.append(Action("FLE", "FinalizeTimeout", (("i", self.sid),)))
                self._fle_step(out, fle.finalize_timeout(), now)
        elif fle.logicalclock and now - max(self.election_quiet_since, self.stalled_until) >= self.resend_after:
            self.election_quiet_since = now
            if votes_held:
                return
            self.resend_after = min(2 * self.resend_after, t.limit(t.resend_max_ticks))
            out.actions.append(Action("FLE", "ResendNotifications", (("i", self.sid),)))
            self._fle_step(out, fle.resend_notifications(), now)

    def _leader_tick(self, out: EffectsBuilder, now: float) -> None:
        """LeaderTimeout when a quorum of responsive learners is lacking for too long, else a PING to every
        learner (LeaderSendPING when a waiting sync needs one: `_ping_all`)."""
        if not self._leader_gives_up(out, now):
            self._ping_all(out, step=False)

    def _leader_gives_up(self, out: EffectsBuilder, now: float) -> bool:
        core, t = self.core, self.timing
        established = core.zab_state == ZabState.BROADCAST
        # Until when each learner counts as responsive: its silence is within its limit. The quorum of responsive
        # learners (with this leader) lasted until the latest moment at which those responsive then still formed
        # one -- computed from the times heard, not from when ticks ran, so a tick that comes late (or a clock
        # that jumps) sees the lack as long as it really was.
        until = []
        for f in core.servers:
            if f != self.sid and core.counted(f, self.held.get(f)):
                phase = core.learner_phase[f]
                limit = t.limit(t.sync_limit if phase == LearnerPhase.UPTODATE else t.init_limit)
                until.append((now - self.silent(f, now) + limit, f))
        lost = max(self.role_since, self.stalled_until)  # never a quorum this role: lacking since the role began
        members = {self.sid}
        for end, f in sorted(until, reverse=True):
            members.add(f)
            if core.is_quorum(members):
                if end >= now:
                    return False  # a quorum is responsive now
                lost = max(end, self.stalled_until)
                break
        if now - lost > t.limit(t.sync_limit if established else t.init_limit):
            self._core(out, core.leader_timeout(), now, "LeaderTimeout", i=self.sid)
            return True
        return False
