"""Normal mode: what makes a server act by itself -- FastLeaderElection on the election port, PINGs, timeouts.

Theory of operation
-------------------
`NormalMode` is attached to a `zabref.runtime.Server` unless it runs in control mode. Every input it handles becomes
an event of the server's pump, so the Zab core and the election core (`zabref.election.FastLeaderElection`) are
only ever touched by that one task.

Election. On start and whenever the core goes back to LOOKING, the election starts a round with the core's last
zxid and currentEpoch (spec `StartElection`). Notifications from peers (`zabref.peers.ElectionSender` on the
sending side) go to ``FastLeaderElection.receive``; while it is ``finalizing`` a timer of `FINALIZE_TICKS` ticks
runs `finalize_timeout`. A `Decision` becomes ``core.elect_leader(self, quorum)`` when this server leads, else
``core.join_leader(leader)`` (both make the core connect to the leader and send FOLLOWERINFO). A LOOKING server
rebroadcasts its vote every `RESEND_TICKS` ticks, since a notification sent while a peer was down is lost.

Liveness, in ticks of ``tick_ms`` (ZooKeeper's tickTime, initLimit, syncLimit):

* a leader PINGs every learner connection every tick; a follower answers each PING with a PING;
* a follower that has heard nothing from its leader for ``sync_limit`` ticks (``init_limit`` before it reached
  BROADCAST), or whose leader connection closed, fires ``follower_timeout`` (spec FollowerTimeout);
* a leader closes a learner it has not heard for ``sync_limit`` ticks (``init_limit`` before UPTODATE) -- the core
  forgets it (``connection_closed``) -- and fires ``leader_timeout`` (spec LeaderTimeout) once it has lacked a quorum
  of connected learners for that long, or has not established its epoch within ``init_limit`` ticks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from zabref import peers, wire
from zabref.core import LearnerPhase, Output, ZabState
from zabref.election import Decision, FastLeaderElection, Step
from zabref.errors import LocalProtocolError, RemoteProtocolError
from zabref.packets import Notification, PacketType, QuorumPacket, ServerState

__all__ = ["NormalMode", "FINALIZE_TICKS", "RESEND_TICKS"]

log = logging.getLogger("zabref")

FINALIZE_TICKS = 2
RESEND_TICKS = 4


class NormalMode:
    """FastLeaderElection, PINGs and timeouts for one `zabref.runtime.Server`."""

    def __init__(self, server: Any) -> None:
        self.server = server
        cluster = server.config.cluster
        self.tick_s = cluster.tick_ms / 1000
        self.init_limit = cluster.init_limit
        self.sync_limit = cluster.sync_limit
        self.fle = FastLeaderElection(server.sid, frozenset(server.config.sids))
        self.senders: dict[int, peers.ElectionSender] = {}
        self.tick = 0
        self.last_heard: dict[int, int] = {}
        self.role_since = 0
        self.no_quorum_ticks = 0
        self._finalizing_round: int | None = None

    async def start(self) -> None:
        s = self.server
        await s.listen("election_port", self._accept)
        for other in s.config.servers:
            if other.id != s.sid:
                self.senders[other.id] = peers.ElectionSender(s.sid, other.id, other.host, other.election_port)
        s.enqueue(self._start_election)
        s.spawn(self._ticker(), "ticker")

    def close(self) -> None:
        for sender in self.senders.values():
            sender.close()

    # ------------------------------------------------------------------------------------------ election

    @peers.quiet_cancel
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address = writer.get_extra_info("peername")
        try:
            sid = await peers.accept_handshake(reader)
        except peers.HandshakeError as e:
            log.warning("election connection from %s closed: %s", address, e)
            writer.close()
            return
        if sid == self.server.sid or sid not in self.server.config.sids:
            log.warning("election connection from %s closed: handshake names server %d", address, sid)
            writer.close()
            return

        def on_body(body: bytes) -> None:
            n = wire.decode_notification(body)
            self.server.enqueue(lambda: self._receive(sid, n))

        reason = await peers.read_frames(reader, peers.MAX_ELECTION_FRAME, f"election stream from {sid}", on_body)
        level = logging.WARNING if reason.startswith("bad input") else logging.DEBUG
        log.log(level, "election connection from %d closed: %s", sid, reason)
        writer.close()

    def _start_election(self) -> list[Output]:
        core = self.server.core
        if core.state != ServerState.LOOKING or (self.fle.state is ServerState.LOOKING and self.fle.logicalclock):
            return []
        step = self.fle.start_election(core.last_zxid, core.current_epoch)
        log.info("election round %d: voting for %d (zxid %#x, epoch %d)", self.fle.logicalclock, self.server.sid,
                 core.last_zxid, core.current_epoch)
        return self._after(step)

    def _receive(self, sender: int, n: Notification) -> list[Output]:
        try:
            step = self.fle.receive(sender, n)
        except RemoteProtocolError as e:
            log.warning("election notification dropped: %s", e)
            return []
        except LocalProtocolError as e:
            log.debug("election notification from %d ignored: %s", sender, e)
            return []
        return self._after(step)

    def _after(self, step: Step) -> list[Output]:
        for send in step.sends:
            self.senders[send.to].send(send.notification)
        if self.fle.finalizing and self._finalizing_round != self.fle.logicalclock:
            r = self._finalizing_round = self.fle.logicalclock
            asyncio.get_running_loop().call_later(
                FINALIZE_TICKS * self.tick_s, lambda: self.server.enqueue(lambda: self._finalize(r)))
        if step.decision is not None:
            return self._decide(step.decision)
        return []

    def _finalize(self, r: int) -> list[Output]:
        self._finalizing_round = None
        if self.fle.state is ServerState.LOOKING and self.fle.finalizing:
            if self.fle.logicalclock == r:
                return self._after(self.fle.finalize_timeout())
            return self._after(Step("wait"))  # a later round is finalizing: restart its timer
        return []

    def _decide(self, d: Decision) -> list[Output]:
        core = self.server.core
        log.info("election round %d decided: %s, leader %d, agreeing %s", d.round, d.state.name, d.leader,
                 sorted(d.quorum))
        try:
            if d.leader == self.server.sid:
                out = core.elect_leader(d.leader, d.quorum | {d.leader})
            else:
                out = core.join_leader(d.leader)
        except LocalProtocolError as e:
            log.warning("election decision not taken: %s", e)
            return self._after(self.fle.start_election(core.last_zxid, core.current_epoch))
        self.role_since = self.tick
        self.last_heard.clear()
        return [out]

    # ------------------------------------------------------------------------------------------ runtime hooks

    def on_role(self, role: ServerState) -> None:
        """The core's role changed (called by the pump after the batch was persisted)."""
        self.role_since = self.tick
        self.no_quorum_ticks = 0
        if role == ServerState.LOOKING:
            self._start_election()
        elif role == ServerState.LEADING:
            self._unpark()

    def park(self, conn: peers.Connection, packet: QuorumPacket) -> bool:
        """A FOLLOWERINFO that reaches a server still LOOKING (its election has not decided yet, while the
        follower's has) waits in the connection's queue until this server leads -- as ZooKeeper's follower retries
        its connection until the leader accepts. If it never leads, the follower's initLimit ends the wait."""
        core = self.server.core
        if core.state == ServerState.LOOKING and packet.type == PacketType.FOLLOWERINFO and not conn.held:
            conn.held.append(packet)
            return True
        return False

    def _unpark(self) -> None:
        s = self.server
        for conn in list(s.conns.values()):
            while conn.held:
                packet = conn.held.popleft()
                s.enqueue(lambda c=conn, p=packet: s.receive(c, p))

    def on_connection_closed(self, peer: int) -> list[Output]:
        core = self.server.core
        if core.state == ServerState.FOLLOWING and core.leader == peer:
            log.info("connection to leader %d lost: FollowerTimeout", peer)
            return [core.follower_timeout()]
        return []

    def heard(self, peer: int) -> None:
        self.last_heard[peer] = self.tick

    def on_ping(self, conn: peers.Connection, packet: QuorumPacket) -> None:
        core = self.server.core
        if core.state == ServerState.FOLLOWING and conn.peer == core.leader and conn.initiated:
            conn.send(QuorumPacket(PacketType.PING, self.server.committed_zxid))

    # ------------------------------------------------------------------------------------------ ticks

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self.server.enqueue(self._on_tick)

    def _on_tick(self) -> list[Output]:
        self.tick += 1
        core = self.server.core
        if core.state == ServerState.LOOKING:
            if self.fle.state is ServerState.LOOKING and self.fle.logicalclock and self.tick % RESEND_TICKS == 0:
                n = self.fle.proposed_vote.notification(ServerState.LOOKING, self.fle.logicalclock)
                for sender in self.senders.values():
                    sender.send(n)
            return []
        if core.state == ServerState.FOLLOWING:
            limit = self.sync_limit if core.zab_state == ZabState.BROADCAST else self.init_limit
            silent = self.tick - self.last_heard.get(core.leader, self.role_since)
            if silent > limit:
                log.info("nothing from leader %d for %d ticks: FollowerTimeout", core.leader, silent)
                return [core.follower_timeout()]
            return []
        return self._leader_tick()

    def _leader_tick(self) -> list[Output]:
        s, core = self.server, self.server.core
        outs: list[Output] = []
        ping = QuorumPacket(PacketType.PING, s.committed_zxid)
        established = core.zab_state == ZabState.BROADCAST
        late = not established and self.tick - self.role_since > self.init_limit
        for peer, conn in list(s.conns.items()):
            if conn.initiated:
                continue
            if conn.state == "open":
                conn.send(ping)
            silent = self.tick - self.last_heard.get(peer, self.role_since)
            limit = self.sync_limit if core.learner_phase[peer] == LearnerPhase.UPTODATE else self.init_limit
            if silent > limit or late:
                why = f"epoch not established in {self.init_limit} ticks" if late else f"silent for {silent} ticks"
                outs += s.close_connection(conn, why, report=True)
        if core.state != ServerState.LEADING:
            return outs
        if core.leader_timeout_enabled():
            self.no_quorum_ticks += 1
            if late or self.no_quorum_ticks > (self.sync_limit if established else self.init_limit):
                log.info("no quorum of learners for %d ticks: LeaderTimeout", self.no_quorum_ticks)
                outs.append(core.leader_timeout())
        else:
            self.no_quorum_ticks = 0
        return outs
