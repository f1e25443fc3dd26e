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
  of connected learners for that long, or has not established its epoch within ``init_limit`` ticks;
* a server that does not lead closes an inbound quorum connection silent for ``init_limit`` ticks.

Silence is measured in wall time on the loop's clock (``loop.time()``), against ``limit * tick_ms``, never by
counting ticks: the tick is an event of the pump, and a pump busy with a long batch runs it late, which made a live
peer look dead when counted in ticks (docs/performance.md). ``heard`` stamps the time a frame was read; the check
runs with the time the ticker *enqueued* the tick -- a moment the loop was free, so every frame that had arrived was
read by then -- rather than the time the busy pump gets to it. When the loop itself stalled for more than a tick
(the ticker woke late: a long pump batch, an inline fsync, a SIGSTOP of this process), the silence is counted from
the end of the stall (``stalled_until``): this process was not listening, so the peer gets no blame for it.

Bad input on the election port: a notification that cannot exist (`zabref.election.check_notification`: a negative
field, a round above `MAX_ROUND`) closes its connection as bad input before it reaches the pump, and a frame must
complete within `peers.ELECTION_FRAME_TIMEOUT` seconds of its first byte. An idle election connection (between two
notifications) is never timed out: a peer's `ElectionSender` keeps one open for as long as it runs.

Observers (implementation only; the spec has none). The voters are the participants: `FastLeaderElection` runs
over them only. A participant answers a notification from an observer with its current state and vote (ZooKeeper's
WorkerReceiver does the same for a non-voter) and never counts it. An observer runs `ObserverElection` instead: it
asks the voters, decides for the leader a quorum of them follow, and joins it (``core.join_leader``, which sends
OBSERVERINFO). An observer is timed out on its leader as a follower is (``observer_timeout``), and a leader PINGs
and disconnects observers as it does followers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from zabref import peers, wire
from zabref.core import LearnerPhase, ObserverPhase, Output, ZabState
from zabref.election import Decision, FastLeaderElection, ObserverElection, Send, Step, check_notification
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
        voters = frozenset(server.config.participants)
        self.observers = frozenset(server.config.observers)
        self.is_observer = server.sid in self.observers
        self.fle: FastLeaderElection | ObserverElection = (
            ObserverElection(server.sid, voters) if self.is_observer else FastLeaderElection(server.sid, voters))
        self.senders: dict[int, peers.ElectionSender] = {}
        self.loop = asyncio.get_running_loop()
        self.tick = 0  # ticks run; only paces the vote resends
        self.last_heard: dict[int, float] = {}  # loop time a frame from each peer was last read
        self.role_since = self.loop.time()
        self.stalled_until = 0.0  # loop time at which this process last recovered from a stall (module docstring)
        self.no_quorum_since: float | None = None  # since when a leader has lacked a quorum of connected learners
        self._finalizing_round: int | None = None
        self._inbound: dict[int, set[asyncio.StreamWriter]] = {}  # open election connections from each peer

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
        if sid in self.server.cut_peers:
            log.debug("election connection from %d refused: link cut by the fault layer", sid)
            writer.close()
            return

        def on_body(body: bytes) -> None:
            n = wire.decode_notification(body)
            check_notification(n)  # ValueError: the connection is closed as bad input, nothing reaches the pump
            if sid not in self.server.cut_peers:
                self.server.enqueue(lambda: self._receive(sid, n))

        self._inbound.setdefault(sid, set()).add(writer)
        try:
            reason = await peers.read_frames(reader, peers.MAX_ELECTION_FRAME, f"election stream from {sid}", on_body,
                                             frame_timeout=peers.ELECTION_FRAME_TIMEOUT)
        finally:
            self._inbound[sid].discard(writer)
        level = logging.WARNING if reason.startswith("bad input") else logging.DEBUG
        log.log(level, "election connection from %d closed: %s", sid, reason)
        writer.close()

    def set_links_cut(self, sids: set[int], cut: bool) -> None:
        """Fault layer (`zabref.runtime.Server.cut_links`): cut or heal the election links with ``sids``."""
        for sid in sids:
            self.senders[sid].set_link_cut(cut)
            if cut:
                for writer in list(self._inbound.get(sid, ())):
                    writer.close()

    def _start_election(self) -> list[Output]:
        core = self.server.core
        if core.state != ServerState.LOOKING or (self.fle.state is ServerState.LOOKING and self.fle.logicalclock):
            return []
        step = self.fle.start_election(core.last_zxid, core.current_epoch)
        if self.is_observer:
            log.info("election round %d: observer asking the participants for their leader", self.fle.logicalclock)
        else:
            log.info("election round %d: voting for %d (zxid %#x, epoch %d)", self.fle.logicalclock, self.server.sid,
                     core.last_zxid, core.current_epoch)
        return self._after(step)

    def _receive(self, sender: int, n: Notification) -> list[Output]:
        if sender in self.observers and not self.is_observer:
            self._answer_observer(sender)
            return []
        try:
            step = self.fle.receive(sender, n)
        except RemoteProtocolError as e:
            log.warning("election notification dropped: %s", e)
            return []
        except LocalProtocolError as e:
            log.debug("election notification from %d ignored: %s", sender, e)
            return []
        return self._after(step)

    def _answer_observer(self, observer: int) -> None:
        """A voter answers an observer with its current state and vote; the observer is never counted."""
        fle = self.fle
        if fle.logicalclock and fle.proposed_vote is not None:
            self.senders[observer].send(fle.proposed_vote.notification(fle.state, fle.logicalclock))

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
        self.role_since = self.loop.time()
        self.last_heard.clear()
        return [out]

    # ------------------------------------------------------------------------------------------ runtime hooks

    def on_role(self, role: ServerState) -> None:
        """The core's role changed (called by the pump after the batch was persisted)."""
        self.role_since = self.loop.time()
        self.no_quorum_since = None
        if role == ServerState.LOOKING:
            self._start_election()
        elif role == ServerState.LEADING:
            self._unpark()

    def park(self, conn: peers.Connection, packet: QuorumPacket) -> bool:
        """A FOLLOWERINFO that reaches a server still LOOKING (its election has not decided yet, while the
        follower's has) waits in the connection's queue until this server leads -- as ZooKeeper's follower retries
        its connection until the leader accepts. If it never leads, the follower's initLimit ends the wait."""
        core = self.server.core
        hello = (PacketType.FOLLOWERINFO, PacketType.OBSERVERINFO)
        if core.state == ServerState.LOOKING and packet.type in hello and not conn.held:
            conn.held.append(packet)
            return True
        return False

    def _unpark(self) -> None:
        s = self.server
        for conn in list(s.conns.values()):
            while conn.held:
                packet = conn.held.popleft()
                s.enqueue(lambda c=conn, p=packet: s.receive(c, p))

    def _leader_lost(self) -> list[Output]:
        core = self.server.core
        return [core.observer_timeout() if core.state == ServerState.OBSERVING else core.follower_timeout()]

    def on_connection_closed(self, peer: int) -> list[Output]:
        core = self.server.core
        if core.state in (ServerState.FOLLOWING, ServerState.OBSERVING) and core.leader == peer:
            log.info("connection to leader %d lost: %s timeout", peer, core.state.name)
            return self._leader_lost()
        return []

    def heard(self, peer: int) -> None:
        self.last_heard[peer] = self.loop.time()

    def silent(self, peer: int, now: float) -> float:
        """Seconds ``peer`` has been silent at loop time ``now``, not counting this process's own stalls."""
        return now - max(self.last_heard.get(peer, self.role_since), self.stalled_until)

    def on_ping(self, conn: peers.Connection, packet: QuorumPacket) -> None:
        core = self.server.core
        if core.state in (ServerState.FOLLOWING, ServerState.OBSERVING) and conn.peer == core.leader and conn.initiated:
            conn.send(QuorumPacket(PacketType.PING, self.server.committed_zxid))

    # ------------------------------------------------------------------------------------------ ticks

    async def _ticker(self) -> None:
        last = self.loop.time()
        while True:
            await asyncio.sleep(self.tick_s)
            now = self.loop.time()
            if now - last > 2 * self.tick_s:  # the loop did not run for over a tick: our stall, not the peers'
                self.stalled_until = now
            last = now
            self.server.enqueue(lambda t=now: self._on_tick(t))

    def _on_tick(self, now: float) -> list[Output]:
        """One tick, judged at loop time ``now`` (when the ticker enqueued it: module docstring)."""
        self.tick += 1
        core = self.server.core
        if core.state == ServerState.LOOKING:
            if self.fle.state is ServerState.LOOKING and self.fle.logicalclock and self.tick % RESEND_TICKS == 0:
                for send in self._resend():
                    self.senders[send.to].send(send.notification)
            return self._close_silent_inbound(now)
        if core.state in (ServerState.FOLLOWING, ServerState.OBSERVING):
            limit = self.sync_limit if core.zab_state == ZabState.BROADCAST else self.init_limit
            silent = self.silent(core.leader, now)
            if silent > limit * self.tick_s:
                log.info("nothing from leader %d for %.2f s (%d ticks of %g s): %s timeout", core.leader, silent,
                         limit, self.tick_s, core.state.name)
                return self._leader_lost()
            return self._close_silent_inbound(now)
        return self._leader_tick(now)

    def _close_silent_inbound(self, now: float) -> list[Output]:
        """A server that does not lead has no learners: an inbound quorum connection there is a FOLLOWERINFO parked
        until this server leads (`park`), or junk. Either way it is closed once silent for ``init_limit`` ticks --
        the bound the parked follower itself waits before it gives up (a leader's learners: `_leader_tick`)."""
        s = self.server
        outs: list[Output] = []
        for peer, conn in list(s.conns.items()):
            if conn.initiated:
                continue
            silent = self.silent(peer, now)
            if silent > self.init_limit * self.tick_s:
                outs += s.close_connection(conn, f"silent for {silent:.2f} s while not leading", report=True)
        return outs

    def _resend(self) -> tuple[Send, ...]:
        """What a LOOKING server re-sends: its vote to every other voter, or an observer's question."""
        if isinstance(self.fle, ObserverElection):
            return self.fle.ask()
        n = self.fle.proposed_vote.notification(ServerState.LOOKING, self.fle.logicalclock)
        return tuple(Send(s, n) for s in sorted(self.fle.voters) if s != self.server.sid)

    def _leader_tick(self, now: float) -> list[Output]:
        s, core = self.server, self.server.core
        outs: list[Output] = []
        ping = QuorumPacket(PacketType.PING, s.committed_zxid)
        established = core.zab_state == ZabState.BROADCAST
        late = not established and now - max(self.role_since, self.stalled_until) > self.init_limit * self.tick_s
        for peer, conn in list(s.conns.items()):
            if conn.initiated:
                continue
            if conn.state == "open":
                conn.send(ping)
            silent = self.silent(peer, now)
            synced = (core.learner_phase.get(peer) == LearnerPhase.UPTODATE
                      or core.observer_phase.get(peer) == ObserverPhase.UPTODATE)
            limit = self.sync_limit if synced else self.init_limit
            if silent > limit * self.tick_s or late:
                why = (f"epoch not established in {self.init_limit} ticks" if late
                       else f"silent for {silent:.2f} s ({limit} ticks of {self.tick_s:g} s)")
                outs += s.close_connection(conn, why, report=True)
        if core.state != ServerState.LEADING:
            return outs
        if core.leader_timeout_enabled():
            if self.no_quorum_since is None:
                self.no_quorum_since = now - self.tick_s  # it began at most a tick ago, as a tick count would say
            lacking = now - max(self.no_quorum_since, self.stalled_until)
            if late or lacking > (self.sync_limit if established else self.init_limit) * self.tick_s:
                log.info("no quorum of learners for %.2f s: LeaderTimeout", lacking)
                outs.append(core.leader_timeout())
        else:
            self.no_quorum_since = None
        return outs
